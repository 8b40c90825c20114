"""What the executor does for each action a plan names: one handler per action, found in
one registry (registry.py)."""

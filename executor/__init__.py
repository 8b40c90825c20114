"""cargoship executor: applies a saved plan (lock, drift check, mutating steps, release).

It imports the planner to re-read live state; the planner never imports it. The write
interface to hosts lives here, so planner phases structurally cannot change a host.
"""

"""The performance benchmark of issue 6 (python -m tests.bench)."""

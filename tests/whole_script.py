"""A restart script in one go, for the tests that run one outside a rollout (a rollout
sends the head ahead of the host's turn, then its GO: executor/restart.py)."""

from __future__ import annotations

from executor.swap_script import GO, SwapScript


def whole(script: SwapScript, *, swap: bool = True) -> str:
    """The whole restart (no marker), or (swap=False) only the watch after it."""
    return script.head(swap=swap) + (script.begin() if swap else "") + GO

"""Render a plan for people: text for a terminal, markdown for a pull-request comment.

Both are compact by default (per-host preflight detail only where something is wrong,
each change once with the hosts it applies to, led by what it changes by key) and show
everything with `View(full=True)`. Secrets are already masked in the plan.

The renderers load on first use (PEP 562): they bring the plan's whole model, which a plan
needs only once its hosts are read, and an error line anywhere needs only `printable`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ..safetext import json_escaped, printable

if TYPE_CHECKING:
    from .groups import summary_line
    from .markdown import render_markdown
    from .split import COMMENT_LIMIT, split_markdown
    from .text import View, render_text

_LAZY = {"summary_line": ".groups", "render_markdown": ".markdown", "COMMENT_LIMIT": ".split",
         "split_markdown": ".split", "View": ".text", "render_text": ".text"}

__all__ = ["COMMENT_LIMIT", "View", "json_escaped", "printable", "render_markdown", "render_text",
           "split_markdown", "summary_line"]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

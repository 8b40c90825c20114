"""Render a plan for people: text for a terminal, markdown for a pull-request comment.

Both are compact by default (per-host preflight detail only where something is wrong,
each change once with the hosts it applies to, led by what it changes by key) and show
everything with `View(full=True)`. Secrets are already masked in the plan.
"""

from .groups import summary_line
from .markdown import render_markdown
from .safe import json_escaped, printable
from .split import COMMENT_LIMIT, split_markdown
from .text import View, render_text

__all__ = ["COMMENT_LIMIT", "View", "json_escaped", "printable", "render_markdown", "render_text",
           "split_markdown", "summary_line"]

"""Labeling nodes with their profile group: If enabled, sets node-role.kubernetes.io/<profile>=true
where missing or different.

A mutating phase: a dry run reports it and never runs it (the default declaration).
"""

from __future__ import annotations

from .base import Phase


class LabelNodes(Phase):
    title = "Labeling nodes with their profile group"

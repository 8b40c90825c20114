"""Updating kubeconfig file with the current cluster: If enabled, merges the cluster's admin
credentials into the local kubeconfig.

A mutating phase: a dry run reports it and never runs it (the default declaration).
"""

from __future__ import annotations

from .base import Phase


class UpdateKubeconfig(Phase):
    title = "Updating kubeconfig file with the current cluster"

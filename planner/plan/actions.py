"""The closed set of actions a plan may ask for, one per kind of change.

Each change in a plan names one of these; the executor has exactly one handler per action
(executor/actions/registry.py) and refuses a plan with an action it has no handler for.
Phase titles are for people: nothing decides what to do by them.

New actions come with a new minor plan format version; the schema accepts any well-formed
action name so an older executor can name what it does not know instead of calling the
plan corrupt.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Scope = Literal["host", "cluster"]  # cluster: about no single host (host is null)


@dataclass(frozen=True)
class ActionSpec:
    name: str
    scope: Scope
    drain: bool  # the node is cordoned and drained first
    restart: bool  # the engine is stopped before and started (and waited Ready) after
    fields: tuple[str, ...]  # the change fields this action needs beyond host/target/diff
    description: str


WRITE_FILE = "write-file"
WRITE_FILE_IN_PLACE = "write-file-in-place"
DELETE_FILE = "delete-file"
DELETE_FILE_IN_PLACE = "delete-file-in-place"
RECOVER = "recover"
RESTORE_BACKUP = "restore-backup"
MERGE_KUBECONFIG = "merge-kubeconfig"
LABEL_NODE = "label-node"
UNLABEL_NODE = "unlabel-node"
# The node label a label-node change sets: this prefix, then the host's profile, "=true".
LABEL_PREFIX = "node-role.kubernetes.io/"
# The node annotation that lists (comma-separated, sorted) the labels cargoship set there:
# what is cargoship's to remove when a host leaves its profile, and nothing else is (the
# engines set node-role.kubernetes.io/control-plane, etcd, master themselves).
LABELLED_ANNOTATION = "cargoship.io/labels"

ACTIONS: dict[str, ActionSpec] = {a.name: a for a in (
    ActionSpec(WRITE_FILE, "host", True, True, ("before", "after"),
               "write a file the engine reads at start (target: its path): cordon, drain, "
               "stop the engine, write atomically with a backup, start, wait Ready, uncordon"),
    ActionSpec(WRITE_FILE_IN_PLACE, "host", False, False, ("before", "after"),
               "write a file the engine reconciles while running (chart values): atomic "
               "write with a backup, no restart"),
    ActionSpec(DELETE_FILE, "host", True, True, ("before",),
               "remove a file cargoship owns that the engine reads at start: as write-file, "
               "but the file is removed (backed up)"),
    ActionSpec(DELETE_FILE_IN_PLACE, "host", False, False, ("before",),
               "remove a chart-values file cargoship owns (backed up), no restart"),
    ActionSpec(RECOVER, "host", True, True, (),
               "finish a host an interrupted apply left (target: its in-progress marker): "
               "drain, restart the engine, uncordon"),
    ActionSpec(RESTORE_BACKUP, "host", True, True, (),
               "undo what an apply that stopped while rolling back left (killed, or its "
               "rollback failed; target: its backup "
               "directory): drain, stop the engine, put back the files from before that "
               "apply, start, wait Ready, uncordon"),
    ActionSpec(MERGE_KUBECONFIG, "cluster", False, False, ("context",),
               "merge the cluster's admin credentials into the local kubeconfig (target: "
               "its path) as a named context, other contexts kept"),
    ActionSpec(LABEL_NODE, "host", False, False, ("node", "label", "after"),
               "set the label `label`=`after` on the node `node` through the Kubernetes API"),
    ActionSpec(UNLABEL_NODE, "host", False, False, ("node", "label"),
               "remove the label `label`, which cargoship set, from the node `node` through "
               "the Kubernetes API (its host no longer has that profile)"),
)}

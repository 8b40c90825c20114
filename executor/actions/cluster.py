"""The cluster actions: the local kubeconfig merge and node labels, after the rollout."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from planner.plan.actions import LABEL_NODE, LABEL_PREFIX, MERGE_KUBECONFIG, UNLABEL_NODE
from planner.plan.model import Change

from ..cluster_steps import label_node, merge_kubeconfig, owned_labels
from .base import ApplyEnv, ClusterHandler, Item, ItemResult


class MergeKubeconfig(ClusterHandler):
    action = MERGE_KUBECONFIG
    finishes_unassessed = True

    def run(self, items: Sequence[Item], env: ApplyEnv) -> list[ItemResult]:
        admin = env.admin()  # read again: a restart may have rewritten it
        if admin is None:
            return [ItemResult(i, "not done", "no controller to read the admin kubeconfig "
                                              "from") for i in items]
        # A planned merge names its file and context; an unassessed one takes the config's
        # (the same ones, both come from the plan's desired state).
        planned = next((i for i in items if isinstance(i, Change)), None)
        path = merge_kubeconfig(env.config, admin,
                                Path(planned.target) if planned else None,
                                planned.context if planned else None)
        env.progress("kubeconfig", f"merged context into {path}")
        return [ItemResult(i, "done", f"merged context into {path}") for i in items]


class LabelNode(ClusterHandler):
    action = LABEL_NODE
    finishes_unassessed = True

    def run(self, items: Sequence[Item], env: ApplyEnv) -> list[ItemResult]:
        results = []
        api = env.api()
        for item in items:
            assert item.host is not None  # the schema holds label-node to a host
            host = env.host(item.host)
            profile = host.config.profile
            if isinstance(item, Change) and item.node and item.label:
                node, key = item.node, item.label
            else:  # unassessed: the node is back now; what to set comes from the config
                node = host.node
                key = f"{LABEL_PREFIX}{profile}" if profile else ""
                if api is not None:  # and what it no longer asks for goes
                    ours = {f"{LABEL_PREFIX}{p}" for p in env.config.profiles}
                    for stale in sorted(owned_labels(api, node, ours) - {key}):
                        if label_node(api, node, stale, host.label, host.addresses,
                                      remove=True):
                            env.progress(str(item.host),
                                         f"removed label {stale} from node {node}")
            if api is None or not key:
                results.append(ItemResult(item, "not done" if api is None else "done",
                                          "no Kubernetes API" if api is None else
                                          "no profile: only labels cargoship set removed"))
                continue
            if label_node(api, node, key, host.label, host.addresses):
                detail = f"labelled node {node} with {key}=true"
                env.progress(str(item.host), detail)
                results.append(ItemResult(item, "done", detail))
            else:
                results.append(ItemResult(item, "unchanged", f"node {node} already had {key}"))
        return results


class UnlabelNode(ClusterHandler):
    """Remove a label cargoship set from a node whose host no longer has that profile."""

    action = UNLABEL_NODE

    def run(self, items: Sequence[Item], env: ApplyEnv) -> list[ItemResult]:
        results = []
        api = env.api()
        for item in items:
            assert item.host is not None and isinstance(item, Change)
            host = env.host(item.host)
            if api is None or not item.node or not item.label:
                results.append(ItemResult(item, "not done", "no Kubernetes API"))
                continue
            if label_node(api, item.node, item.label, host.label, host.addresses,
                          remove=True):
                detail = f"removed label {item.label} from node {item.node}"
                env.progress(str(item.host), detail)
                results.append(ItemResult(item, "done", detail))
            else:
                results.append(ItemResult(item, "unchanged",
                                          f"node {item.node} no longer had {item.label}"))
        return results

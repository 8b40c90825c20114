"""9. Updating kubeconfig file with the current cluster: if enabled, merge the cluster's
admin credentials into the local kubeconfig as a named context.

Assessed read-only: the admin kubeconfig is read from the first controller (its server
127.0.0.1 replaced by an address the API certificate covers: see kube.api_server), the local
kubeconfig from this machine.
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from ..api_server import host_address
from ..context import HostState, PlanContext, PlannedChange
from ..desired.compare import file_digest
from ..desired.keys import key_changes
from ..hosts.batch import Fact
from ..kube import admin_kubeconfig_path, masked, merge, named_entries
from ..plan.actions import MERGE_KUBECONFIG
from ..safeyaml import safe_load
from .admin_access import admin_prefetch, first_controller, read_admin_from
from .base import Phase, Resource


class UpdateKubeconfig(Phase):
    title = "Updating kubeconfig file with the current cluster"
    unassessed_action = MERGE_KUBECONFIG

    def cluster_reads(self, ctx: PlanContext) -> frozenset[str]:
        return frozenset({"kubeconfig"}) if ctx.config.options.kubeconfig_enabled else \
            frozenset()

    def reads(self, ctx: PlanContext, host: HostState) -> frozenset[str]:
        if ctx.config.options.kubeconfig_enabled and host is first_controller(ctx):
            return frozenset({f"file:{admin_kubeconfig_path(ctx.config.engine.distro)}"})
        return frozenset()

    def prefetch(self, ctx: PlanContext, host: HostState) -> list[tuple[Fact[Any], bool]]:
        return admin_prefetch(ctx, host) if ctx.config.options.kubeconfig_enabled else []

    def may_write(self, ctx: PlanContext, host: HostState) -> frozenset[str]:
        return frozenset()  # it reads the admin kubeconfig on a host, writes only locally

    def would(self, ctx: PlanContext, host: HostState | None) -> str | None:
        options = ctx.config.options
        if not options.kubeconfig_enabled:
            return None
        name = options.kubeconfig_context or ctx.config.name
        controller = host or first_controller(ctx)
        # The engine writes its admin kubeconfig with server 127.0.0.1 (kube.api_server).
        sans = controller.engine_settings.list_of("tls-san") \
            if controller and controller.engine_settings else []
        server = options.kubeconfig_server or (
            f"https://{sans[0] if sans else host_address(controller)}:6443"
            if controller else "the restarted controller's API server")
        return (f"merge context {name} (server {server}, the admin credentials of "
                f"{controller.label if controller else 'the first controller'}) into "
                f"{options.kubeconfig_path.expanduser()}")

    def assess(self, ctx: PlanContext, hosts: Sequence[HostState]) -> set[Resource]:
        options = ctx.config.options
        if not options.kubeconfig_enabled:
            ctx.found(self.title, None, "disabled (options.kubeconfig.enabled is false)")
            return set()
        controller = first_controller(ctx)
        if controller is None or controller not in hosts:
            return set()
        found = read_admin_from(ctx, self.title, controller)
        if found is None:
            return set()
        admin, source = found
        path = options.kubeconfig_path.expanduser()
        name = options.kubeconfig_context or ctx.config.name
        local, problem = _read_local(path)
        if problem:
            ctx.problem(self.title, None, problem)
            return set()
        entries = named_entries(admin, name)
        if local and all(entries[s] in (local.get(s) or []) for s in entries):
            ctx.found(self.title, None, f"{path} already has context {name}")
            return set()
        merged = merge(local, entries)
        before = _dump(masked(local)) if local else ""
        diff = "".join(difflib.unified_diff(
            before.splitlines(keepends=True), _dump(masked(merged)).splitlines(keepends=True),
            fromfile=f"{path} (local)", tofile=f"{path} (merged)"))
        ctx.change(PlannedChange(self.title, None, MERGE_KUBECONFIG, str(path),
                                 file_digest(path.read_bytes(), ctx.salt)
                                 if local is not None else None, None, diff, context=name,
                                 key_changes=key_changes(masked(local) if local else None,
                                                         masked(merged))))
        ctx.found(self.title, None, f"would merge context {name} (server "
                                    f"{entries['clusters']['cluster'].get('server')}, from "
                                    f"{source}) into {path}")
        return {(None, "kubeconfig")}


def _read_local(path: Path) -> tuple[dict[str, Any] | None, str | None]:
    try:
        data = safe_load(path.read_text())
    except FileNotFoundError:
        return None, None
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        return None, f"cannot read local kubeconfig {path}: {exc}"
    if data is not None and not isinstance(data, dict):
        return None, f"local kubeconfig {path} is not a mapping"
    return data, None


def _dump(data: Any) -> str:
    return yaml.safe_dump(data, sort_keys=False, default_flow_style=False)

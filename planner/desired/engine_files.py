"""Render the files a host should have from `engineConfig`, per distro and role.

Which changes need a restart follows the design: registries.yaml on any node; audit policy,
Pod Security config and the config drop-in that points at them on controllers; chart values
(HelmChartConfig manifests, reconciled by the engine's helm controller) never.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import yaml

from ..config.model import ClusterConfig
from ..config.secrets import Secret
from ..facts.distro import LAYOUTS, DistroLayout
from ..facts.engine_config import EngineSettings, Locations, default_locations

OWNED_PREFIX = "cargoship-"  # files cargoship may delete when no longer desired
# A chart taken out of engineConfig.charts: its manifest is first emptied, not deleted. The
# deploy controller (k3s pkg/deploy/controller.go) prunes what an emptied manifest applied
# but leaves the objects of a deleted one in force; the empty file goes once it has pruned.
CHART_REMOVAL = "chart-removal"
CHART_REMOVED = ("# cargoship no longer manages this chart's values: emptied so that the "
                 "deploy controller\n# prunes its HelmChartConfig; cargoship deletes this "
                 "file once it has.\n")
DROPIN_NAME = "50-cargoship.yaml"
# A plan's read of where a host's engine keeps what cargoship writes, when not the default:
# the executor writes there, and a plan whose host moved them since is drifted.
PLACEMENT_READ = "engine:placement"


@dataclass(frozen=True)
class Placement:
    """Where one host's engine reads cargoship's files, and whether its user gives the API
    server an audit-log-path of their own (cargoship then adds none: theirs stands)."""

    locations: Locations
    user_audit_log: bool = False

    def encode(self) -> str:
        return f"{self.locations.encode()}\n{int(self.user_audit_log)}"

    @classmethod
    def decode(cls, text: str) -> Placement:
        head, _, flag = text.rpartition("\n")
        return cls(Locations.decode(head), flag == "1")


def default_placement(layout: DistroLayout) -> Placement:
    return Placement(default_locations(layout))


def placement_of(settings: EngineSettings | None, layout: DistroLayout) -> Placement:
    """The host's placement from its engine settings (None: not read yet: the defaults)."""
    if settings is None:
        return default_placement(layout)
    at = settings.locations(layout)
    ours = f"{at.dropin_dir}/{DROPIN_NAME}"
    user_log = any(a.value.lstrip("-").startswith("audit-log-path=")
                   and a.where.rsplit(":", 1)[0] != ours for a in settings.apiserver_args)
    return Placement(at, user_log)


@dataclass(frozen=True)
class DesiredFile:
    path: str
    kind: str  # "registries", "audit-policy", "pod-security", "config-dropin", "chart"
    data: Any  # structure, secrets as Secret objects
    mode: int
    restart: bool
    owner: str = "0:0"  # uid:gid; every file cargoship writes is root's (credentials or not)

    def content(self) -> str:
        """The exact bytes to write (secrets revealed): only the executor writes them.

        Keys sorted: the bytes (and so the digest a plan promises) must not depend on the
        key order of whatever carried the config. A plan file stores its desired state with
        sorted keys, so a config with `username` before `password` rendered differently at
        apply than at plan, and every such plan was refused as drifted. Mapping order means
        nothing to the engines; lists keep theirs."""
        return self._rendered

    @cached_property
    def _rendered(self) -> str:
        # Once per file, not once or twice per host: every host of a role shares it, and
        # the YAML dump was a large part of a plan's own CPU per host.
        if self.kind == CHART_REMOVAL:
            return CHART_REMOVED
        return dump_yaml(_reveal(self.data), sort_keys=True)


class _BlockDumper(yaml.SafeDumper):
    pass


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    # Multi-line strings (HelmChartConfig valuesContent) as readable `|` blocks.
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_BlockDumper.add_representer(str, _str)


def dump_yaml(data: Any, *, sort_keys: bool) -> str:
    return yaml.dump(data, Dumper=_BlockDumper, sort_keys=sort_keys, default_flow_style=False,
                     allow_unicode=True)


def is_owned(name: str) -> bool:
    """Files cargoship created (and so may delete): `cargoship-*` and the config drop-in."""
    return name.startswith(OWNED_PREFIX) or name == DROPIN_NAME


def owned_paths(layout: DistroLayout, where: Placement | None = None) -> tuple[str, ...]:
    """Glob-free list of directories where cargoship-owned files live."""
    at = (where or default_placement(layout)).locations
    return tuple(dict.fromkeys((layout.config_dir, at.dropin_dir, at.manifests_dir)))


def desired_files(config: ClusterConfig, role: str,
                  where: Placement | None = None) -> list[DesiredFile]:
    """The files a host of this role should have, where its engine reads them."""
    layout = LAYOUTS[config.engine.distro]
    where = where or default_placement(layout)
    engine = config.engine_config
    files: list[DesiredFile] = []
    if "registries" in engine:
        files.append(DesiredFile(where.locations.registries, "registries",
                                 engine["registries"], 0o600, restart=True))
    if role != "controller":
        return files
    args: dict[str, str] = {}
    if "auditPolicy" in engine:
        path = f"{layout.config_dir}/{OWNED_PREFIX}audit-policy.yaml"
        files.append(DesiredFile(path, "audit-policy", engine["auditPolicy"], 0o600, True))
        args["audit-policy-file"] = path
    if "podSecurity" in engine:
        path = f"{layout.config_dir}/{OWNED_PREFIX}pod-security.yaml"
        files.append(DesiredFile(path, "pod-security", engine["podSecurity"], 0o600, True))
        args["pod-security"] = path
    if args:
        files.append(DesiredFile(f"{where.locations.dropin_dir}/{DROPIN_NAME}",
                                 "config-dropin", _dropin(layout, args, where), 0o600, True))
    for chart, settings in sorted(engine.get("charts", {}).items()):
        files.append(DesiredFile(f"{where.locations.manifests_dir}/{OWNED_PREFIX}{chart}.yaml",
                                 "chart",
                                 _helm_chart_config(chart, settings["values"]), 0o600, False))
    return files


def _dropin(layout: DistroLayout, args: dict[str, str], where: Placement) -> dict[str, Any]:
    if layout.distro == "rke2":
        data: dict[str, Any] = {}
        if "audit-policy-file" in args:
            data["audit-policy-file"] = args["audit-policy-file"]
        if "pod-security" in args:
            data["pod-security-admission-config-file"] = args["pod-security"]
        return data
    # k3s has no dedicated keys: the flags go to the API server, appended (`+`) to those
    # config.yaml or an earlier drop-in gives it; a plain key would replace them all.
    flags = []
    if "audit-policy-file" in args:
        flags.append(f"audit-policy-file={args['audit-policy-file']}")
        if not where.user_audit_log:  # the user's own audit-log-path stands: never ours
            data_dir = where.locations.manifests_dir.removesuffix("/server/manifests")
            flags.append(f"audit-log-path={data_dir}/server/logs/audit.log")
    if "pod-security" in args:
        flags.append(f"admission-control-config-file={args['pod-security']}")
    return {"kube-apiserver-arg+": flags}


def _helm_chart_config(chart: str, values: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "helm.cattle.io/v1",
        "kind": "HelmChartConfig",
        "metadata": {"name": chart, "namespace": "kube-system"},
        "spec": {"valuesContent": yaml.safe_dump(values, sort_keys=True)},
    }


def _reveal(value: Any) -> Any:
    if isinstance(value, Secret):
        return value.reveal()
    if isinstance(value, dict):
        return {k: _reveal(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_reveal(v) for v in value]
    return value


def chart_name(path: str, where: Placement) -> str | None:
    """The chart a cargoship manifest at `path` holds values for (None: not one)."""
    directory, _, name = path.rpartition("/")
    if directory != where.locations.manifests_dir or not name.startswith(OWNED_PREFIX) \
            or not name.endswith(".yaml"):
        return None
    return name[len(OWNED_PREFIX):-len(".yaml")]


def chart_removal(path: str) -> DesiredFile:
    """The emptied manifest of a chart no longer in engineConfig.charts."""
    return DesiredFile(path, CHART_REMOVAL, None, 0o600, restart=False)


def wanted_files(config: ClusterConfig, role: str, where: Placement,
                 targets: Sequence[str]) -> dict[str, DesiredFile]:
    """By path: the desired files, and the emptied manifest of each target that is a
    cargoship chart manifest no longer desired (what a plan's in-place writes may hold)."""
    wanted = {f.path: f for f in desired_files(config, role, where)}
    for target in targets:
        if target not in wanted and chart_name(target, where) is not None:
            wanted[target] = chart_removal(target)
    return wanted

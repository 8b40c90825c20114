"""Hostile values: shell injection and path traversal in every config value that could
reach a host or a path, end to end through `cargoship plan` and `apply` on lab hosts.

Each value is either refused by validation (exit 1, one line per problem naming the file,
line and path inside it, and no SSH session opened) or used safely: written literally where
it belongs. Either way no command ran (no canary file, on the hosts or here) and nothing was
written on a host outside the engine directories.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from planner.plan import codec
from tests.e2e.cli import cargoship, edit_config
from tests.lab import Lab
from tests.reliability.hostwrites import CANARY, canaries, outside_writes, sessions, snapshots
from tests.reliability.labs import config_copy, shared_lab

HOSTILE = {
    "semicolon": f"; touch {CANARY}",
    "subshell": f"$(touch {CANARY})",
    "backticks": f"`touch {CANARY}`",
    "newline": f"x\ntouch {CANARY}",
    "traversal": "../../etc/x",
}
REGISTRIES = "/etc/rancher/rke2/registries.yaml"
CHART = "/var/lib/rancher/rke2/server/manifests/cargoship-hostile.yaml"
Edit = Callable[[dict[str, Any], str, Lab, Path], str | None]


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    yield from shared_lab(tmp_path_factory)


# Each edit puts the hostile value in one place and returns the config path a refusal must
# name, or None when the value is legal there and must be used safely.

def _hostname(d: dict[str, Any], v: str, lab: Lab, tmp: Path) -> str | None:
    d["spec"]["hosts"][1]["hostname"] = v
    return "spec.hosts[1].hostname"


def _profile(d: dict[str, Any], v: str, lab: Lab, tmp: Path) -> str | None:
    d["spec"]["profiles"] = {v: {}}
    d["spec"]["hosts"][1]["profile"] = v
    return "spec.hosts[1].profile"


def _label_profile(d: dict[str, Any], v: str, lab: Lab, tmp: Path) -> str | None:
    d["spec"]["options"]["labelProfiles"] = True  # the profile becomes a node label key
    return _profile(d, v, lab, tmp)


def _chart_name(d: dict[str, Any], v: str, lab: Lab, tmp: Path) -> str | None:
    d["spec"]["engineConfig"]["charts"] = {v: {"values": {"replicas": 1}}}
    return "spec.engineConfig.charts"


def _chart_values(d: dict[str, Any], v: str, lab: Lab, tmp: Path) -> str | None:
    d["spec"]["engineConfig"]["charts"] = {"hostile": {"values": {"command": v, v: [v]}}}
    return None


def _private_interface(d: dict[str, Any], v: str, lab: Lab, tmp: Path) -> str | None:
    d["spec"]["hosts"][1]["privateInterface"] = v
    return "spec.hosts[1].privateInterface"


def _mirror_name(d: dict[str, Any], v: str, lab: Lab, tmp: Path) -> str | None:
    d["spec"]["engineConfig"]["registries"]["mirrors"][v] = {
        "endpoint": ["https://mirror.lab.internal:5000"]}
    return "spec.engineConfig.registries.mirrors"


def _mirror_endpoint(d: dict[str, Any], v: str, lab: Lab, tmp: Path) -> str | None:
    endpoint = f"https://mirror.lab.internal:5000/{v}"
    d["spec"]["engineConfig"]["registries"]["mirrors"]["docker.io"]["endpoint"] = [endpoint]
    # Whitespace can't be in a URL; anything else is just text in registries.yaml.
    return None if v.split() == [v] else \
        "spec.engineConfig.registries.mirrors['docker.io'].endpoint[0]"


def _mirror_rewrite(d: dict[str, Any], v: str, lab: Lab, tmp: Path) -> str | None:
    d["spec"]["engineConfig"]["registries"]["mirrors"]["docker.io"]["rewrite"] = {"^lab/(.*)": v}
    return None


def _local_copy(source: Path, tmp: Path, v: str, name: str) -> str | None:
    """A real file at a path made of the hostile value, so the value is really used."""
    if "\n" in v:
        return "refused"  # the schema refuses control characters in paths
    if v.startswith(".."):
        return str(Path(v) / name)  # relative to the config's directory: nothing there
    target = tmp / "files" / v.lstrip("/") / name
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(source, target)
    target.chmod(0o600)
    return str(target)


def _key_path(d: dict[str, Any], v: str, lab: Lab, tmp: Path) -> str | None:
    path = _local_copy(lab.dir / "id_ed25519", tmp, v, "id_ed25519")
    d["spec"]["hosts"][1]["ssh"]["keyPath"] = v if path == "refused" else path
    # A traversal to a key that isn't there is refused as unreadable, by validation.
    return None if path != "refused" and not v.startswith("..") else \
        "spec.hosts[1].ssh.keyPath"


def _known_hosts(d: dict[str, Any], v: str, lab: Lab, tmp: Path) -> str | None:
    path = _local_copy(lab.dir / "known_hosts", tmp, v, "known_hosts")
    d["spec"]["hosts"][1]["ssh"]["knownHosts"] = v if path == "refused" else path
    if path == "refused":
        return "spec.hosts[1].ssh.knownHosts"
    # known_hosts that isn't there holds no key: the host is refused when it connects.
    return "unknown host key" if v.startswith("..") else None


FIELDS: dict[str, Edit] = {
    "hostname": _hostname, "profile": _profile, "label profile": _label_profile,
    "chart name": _chart_name, "chart values": _chart_values,
    "privateInterface": _private_interface, "mirror name": _mirror_name,
    "mirror endpoint": _mirror_endpoint, "mirror rewrite": _mirror_rewrite,
    "keyPath": _key_path, "knownHosts": _known_hosts,
}


def _clean_refusal(result: Any, config: Path, path: str) -> None:
    assert result.returncode == 1, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert lines and all(line.startswith(f"error: {config}:") for line in lines), result.stderr
    assert any(f": {path}: " in line for line in lines), result.stderr


@pytest.mark.reliability("hostile values")
@pytest.mark.parametrize("value", HOSTILE.values(), ids=HOSTILE.keys())
@pytest.mark.parametrize("field", FIELDS)
def test_hostile_config_value(lab: Lab, tmp_path: Path, tally, field: str,  # type: ignore[no-untyped-def]
                             value: str) -> None:
    tally.case()
    config = config_copy(lab, tmp_path / "cluster.yaml")
    refusal: list[str | None] = []
    edit_config(config, lambda d: refusal.append(FIELDS[field](d, value, lab, tmp_path)))
    names = [h.name for h in lab.hosts]
    before, logins = snapshots(lab, names), {h: sessions(lab, h) for h in names}
    plan_file = tmp_path / "plan.json"
    planned = cargoship("plan", "-c", config, "-out", plan_file)
    if refusal[0] == "unknown host key":
        assert planned.returncode == 1 and "is not in" in planned.stdout, planned.stdout
        assert sessions(lab, "wrk-1") == logins["wrk-1"]  # refused before authenticating
        assert not plan_file.exists()
    elif refusal[0] is not None:
        _clean_refusal(planned, config, refusal[0])
        assert {h: sessions(lab, h) for h in names} == logins, "a refused config connected"
        assert not plan_file.exists()
    else:
        assert planned.returncode == 0, planned.stdout + planned.stderr
        applied = cargoship("apply", plan_file, "--confirm", timeout=300)
        assert applied.returncode == 0, applied.stdout + applied.stderr
        _landed_literally(lab, field, value)
    assert canaries(lab) == [], "a hostile value ran as a command"
    assert outside_writes(lab, before) == {}


def _landed_literally(lab: Lab, field: str, value: str) -> None:
    """Used safely: the value is data in the file it belongs to, exactly as given."""
    if field == "chart values":
        manifest = yaml.safe_load(lab.exec("ctl-1", f"cat {CHART}").stdout)
        values = yaml.safe_load(manifest["spec"]["valuesContent"])
        assert values == {"command": value, value: [value]}
    elif field in ("mirror endpoint", "mirror rewrite"):
        for host in ("ctl-1", "wrk-1"):
            mirror = yaml.safe_load(lab.exec(host, f"cat {REGISTRIES}").stdout)["mirrors"]
            if field == "mirror endpoint":
                assert mirror["docker.io"]["endpoint"] == [
                    f"https://mirror.lab.internal:5000/{value}"]
            else:
                assert mirror["docker.io"]["rewrite"] == {"^lab/(.*)": value}


# The same values in an edited plan whose digest was recomputed: a plan is refused by the
# rules the config is, before any connection.

PLAN_EDITS: dict[str, Callable[[dict[str, Any], str], str]] = {
    "hostname": lambda d, v: _set(d, ("hosts", 1, "hostname"), v),
    "profile": lambda d, v: _set(d, ("hosts", 1, "profile"), v),
    "privateInterface": lambda d, v: _set(d, ("hosts", 1, "private_interface"), v),
    "chart name": lambda d, v: _set(d, ("engineConfig", "charts"), {v: {"values": {}}}),
    "mirror name": lambda d, v: _set(d, ("engineConfig", "registries", "mirrors"),
                                     {v: {"endpoint": ["https://m.lab.internal"]}}),
    "kubeconfig context": lambda d, v: _set(d, ("options", "kubeconfig_context"), v),
    "cluster name": lambda d, v: _set(d, ("cluster",), v),
}


def _set(desired: dict[str, Any], where: tuple[Any, ...], value: Any) -> str:
    parent: Any = desired
    for key in where[:-1]:
        parent = parent[key]
    parent[where[-1]] = value
    return "desired." + ".".join(str(k) for k in where).replace(".1.", "[1].")


@pytest.fixture(scope="module")
def lab_plan(lab: Lab, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    path = tmp_path_factory.mktemp("plan") / "plan.json"
    result = cargoship("plan", "-c", lab.dir / "cluster.yaml", "-out", path)
    assert result.returncode == 0, result.stdout + result.stderr
    return json.loads(path.read_text())  # type: ignore[no-any-return]


@pytest.mark.reliability("hostile values")
@pytest.mark.parametrize("value", HOSTILE.values(), ids=HOSTILE.keys())
@pytest.mark.parametrize("field", PLAN_EDITS)
def test_hostile_value_in_a_redigested_plan(lab: Lab, lab_plan: dict[str, Any],  # type: ignore[no-untyped-def]
                                            tmp_path: Path, tally, field: str,
                                            value: str) -> None:
    tally.case()
    data = json.loads(json.dumps(lab_plan))
    where = PLAN_EDITS[field](data["desired"], value)
    data["digest"] = codec.digest_of(data)
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(json.dumps(data))
    names = [h.name for h in lab.hosts]
    logins = {h: sessions(lab, h) for h in names}
    for argv in (("show", plan_file), ("apply", plan_file, "--confirm")):
        result = cargoship(*argv)
        assert result.returncode == 1, result.stdout + result.stderr
        assert result.stderr.startswith(f"error: {plan_file}: not a valid plan file: {where}"), \
            result.stderr
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert {h: sessions(lab, h) for h in names} == logins
    assert canaries(lab) == []

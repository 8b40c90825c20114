"""Hosts are identified by address and port: two hosts behind one address (a NAT gateway's
port forwards, here a TCP forwarder on 127.0.0.1 with one port per host) are two hosts in
the plan, the drift check, the apply and its record."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.bench.fleet import Proxy, start_proxy
from tests.e2e.cli import cargoship
from tests.lab import HostSpec, Lab

REGISTRIES = "/etc/rancher/rke2/registries.yaml"
DRIFTED = "mirrors: {}\n"


@pytest.fixture
def behind_one_address(lab_factory, tmp_path: Path) -> Iterator[tuple[Lab, Proxy]]:  # type: ignore[no-untyped-def]
    lab = lab_factory([HostSpec("ctl-1", "controller"), HostSpec("wrk-1", "worker"),
                       HostSpec("wrk-2", "worker")])
    workers = [lab.host("wrk-1"), lab.host("wrk-2")]
    proxy = start_proxy(tmp_path, [h.address for h in workers], delay_ms=0)
    try:
        keys = dict(line.split(" ", 1) for line in
                    (lab.dir / "known_hosts").read_text().splitlines())
        known = tmp_path / "known_hosts"
        known.write_text((lab.dir / "known_hosts").read_text() + "".join(
            f"[127.0.0.1]:{proxy.ports[h.address]} {keys[h.address]}\n" for h in workers))
        config = yaml.safe_load((lab.dir / "cluster.yaml").read_text())
        for entry in config["spec"]["hosts"]:
            entry["ssh"]["knownHosts"] = str(known)
            for host in workers:
                if entry["ssh"]["address"] == host.address:
                    entry["ssh"].update(address="127.0.0.1", port=proxy.ports[host.address])
        config["spec"]["options"].update(readyTimeoutSeconds=20, drain={"timeoutSeconds": 10})
        (lab.dir / "cluster.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
        yield lab, proxy
    finally:
        proxy.stop()


def test_two_hosts_on_one_address_are_drift_checked_separately(
        behind_one_address: tuple[Lab, Proxy], tmp_path: Path) -> None:
    lab, proxy = behind_one_address
    config = lab.dir / "cluster.yaml"
    port = {name: proxy.ports[lab.host(name).address] for name in ("wrk-1", "wrk-2")}
    assert port["wrk-1"] != port["wrk-2"]
    for name in ("wrk-1", "wrk-2"):
        lab.exec(name, f"printf '{DRIFTED}' > {REGISTRIES}")
    plan_file = tmp_path / "plan.json"
    planned = cargoship("plan", "-c", config, "-out", plan_file, "--verbose")
    assert planned.returncode == 0, planned.stdout + planned.stderr
    plan = json.loads(plan_file.read_text())
    assert [c["host"] for c in plan["changes"]] == [
        {"name": "wrk-1", "address": "127.0.0.1", "port": port["wrk-1"]},
        {"name": "wrk-2", "address": "127.0.0.1", "port": port["wrk-2"]}]
    assert f"wrk-2 (127.0.0.1:{port['wrk-2']})" in planned.stdout

    # Only the first of the two drifts: a check by address alone would hold wrk-2's
    # fingerprints against wrk-2 twice and never look at wrk-1.
    lab.exec("wrk-1", f"printf 'mirrors: {{a: {{}}}}\\n' > {REGISTRIES}")
    refused = cargoship("apply", plan_file, "--confirm")
    assert refused.returncode == 1
    assert refused.stderr == (
        "error: the hosts changed since the plan was made; nothing was changed: make a new "
        "plan (cargoship plan -c CLUSTER.yaml -out PLAN.json) and apply that\n"
        f"  - {REGISTRIES} changed since the plan was made: on wrk-1\n")
    assert lab.exec("wrk-2", f"cat {REGISTRIES}").stdout == DRIFTED  # untouched

    lab.exec("wrk-1", f"printf '{DRIFTED}' > {REGISTRIES}")  # as planned again
    applied = cargoship("apply", plan_file, "--confirm", "--json", timeout=300)
    assert applied.returncode == 0, applied.stdout + applied.stderr
    result = json.loads(applied.stdout)
    assert sorted((h["host"]["name"], h["host"]["port"], h["status"])
                  for h in result["hosts"] if h["host"]["address"] == "127.0.0.1") == [
        ("wrk-1", port["wrk-1"], "applied"), ("wrk-2", port["wrk-2"], "applied")]
    wanted = lab.exec("ctl-1", f"cat {REGISTRIES}").stdout
    assert all(lab.exec(n, f"cat {REGISTRIES}").stdout == wanted for n in ("wrk-1", "wrk-2"))
    history = json.loads(cargoship("history", "-c", config, "--json").stdout)
    assert sorted((h["host"]["name"], h["host"]["port"]) for h in history["plans"][0]["hosts"]
                  if h["host"]["address"] == "127.0.0.1") == [
        ("wrk-1", port["wrk-1"]), ("wrk-2", port["wrk-2"])]

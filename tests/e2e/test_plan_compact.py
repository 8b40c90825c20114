"""Plans at fleet scale, through the command against lab hosts (issue 16, points 1, 2, 8):
compact by default, each change once with its hosts, led by what it changes by key;
diff colours by the diff column; the unified diff and every host's detail one flag away.

One drifted lab for the module: 2 controllers, 8 workers. wrk-1..wrk-4 and wrk-6 carry the
same stale mirror, wrk-8 an extra endpoint, ctl-1 a chart value changed by hand, ctl-2 the
right chart values in another key order and formatting, wrk-7 the lock of another run.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.cli import cargoship, edit_config
from tests.e2e.test_cli_color import on_a_terminal
from tests.e2e.test_plan_preflight import phase_block
from tests.lab import HostSpec, Lab

REGISTRIES = "/etc/rancher/rke2/registries.yaml"
MANIFESTS = "/var/lib/rancher/rke2/server/manifests"
CHART = f"{MANIFESTS}/cargoship-rke2-ingress-nginx.yaml"
MIRROR = "https://mirror.lab.internal:5000"
STALE = ["wrk-1", "wrk-2", "wrk-3", "wrk-4", "wrk-6"]
SUMMARY = "Plan: 7 files to change on 7 hosts, 6 restarts, 0 labels, 0 unassessed."
RED, GREEN, YELLOW = "\x1b[31m", "\x1b[32m", "\x1b[33m"


def registries(*endpoints: str) -> str:
    items = "".join(f"      - {e}\n" for e in endpoints)
    return f"mirrors:\n  docker.io:\n    endpoint:\n{items}"


def chart(values: str) -> str:
    return ("spec:\n  valuesContent: |\n" + "".join(f"    {v}\n" for v in values.splitlines())
            + "metadata: {namespace: kube-system, name: rke2-ingress-nginx}\n"
              "kind: HelmChartConfig\napiVersion: helm.cattle.io/v1\n")


@pytest.fixture(scope="module")
def drifted(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Lab, Path, str]]:
    """The lab, its plan file and what `plan` printed."""
    if os.geteuid() != 0:
        pytest.skip("the lab needs root (namespaces)")
    base = tmp_path_factory.mktemp("compact")
    specs = [HostSpec(f"ctl-{i}", "controller") for i in (1, 2)]
    specs += [HostSpec(f"wrk-{i}", "worker") for i in range(1, 9)]
    # Two servers on an external datastore: two etcd members have no quorum to spare, and
    # the plan would refuse to restart either (test_quorum_gate.py).
    lab = Lab.up(base / "lab", specs, etcd=False)
    try:
        edit_config(lab.dir / "cluster.yaml", lambda d: d["spec"]["engineConfig"].update(
            charts={"rke2-ingress-nginx": {"values": {"controller": {
                "replicaCount": 3, "config": {"use-forwarded-headers": "true"}}}}}))
        for name in STALE:
            lab.exec(name, f"cat > {REGISTRIES}", input=registries("https://stale.example"))
        lab.exec("wrk-8", f"cat > {REGISTRIES}",
                 input=registries(MIRROR, "https://old-extra.example"))
        lab.exec("ctl-1", f"mkdir -p {MANIFESTS} && cat > {CHART} && chmod 600 {CHART}",
                 input=chart("controller:\n  replicaCount: 2\n  config:\n"
                             "    use-forwarded-headers: 'true'"))
        lab.exec("ctl-2", f"mkdir -p {MANIFESTS} && cat > {CHART} && chmod 600 {CHART}",
                 input=chart("controller: {config: {use-forwarded-headers: \"true\"}, "
                             "replicaCount: 3}"))
        holder = {"id": "lk-7", "holder": "bob@ci-runner", "pid": 4242, "plan_id": "p" * 32,
                  "since": "2026-12-01T03:00:00Z"}
        lab.exec("wrk-7", "mkdir -p /run/cargoship && cat > /run/cargoship/lock",
                 input=json.dumps(holder))
        plan = base / "plan.json"
        result = cargoship("plan", "-c", lab.dir / "cluster.yaml", "-out", plan,
                           "--detailed-exitcode")
        assert result.returncode == 2, result.stdout + result.stderr
        yield lab, plan, result.stdout
    finally:
        lab.down()


def test_identical_changes_print_once_with_their_hosts(drifted) -> None:
    _, _, out = drifted
    worker = phase_block(out, "Sync Registry Config Worker")
    assert worker.count(f"write-file {REGISTRIES} (drain + restart)") == 2
    assert (f"write-file {REGISTRIES} (drain + restart) on wrk-1..wrk-4, wrk-6 (same change on 5 "
            "hosts)") in worker
    assert f"write-file {REGISTRIES} (drain + restart) on wrk-8\n" in worker + "\n"
    # Led by the change by key; the unified diff is one flag away.
    assert (f'~ mirrors."docker.io".endpoint[0]: "https://stale.example" -> "{MIRROR}"'
            in worker)
    assert '- mirrors."docker.io".endpoint[1]: "https://old-extra.example"' in worker
    assert "@@" not in out and "(live)" not in out
    assert SUMMARY in out.splitlines()


def test_preflight_detail_only_for_hosts_with_problems_or_warnings(drifted) -> None:
    _, _, out = drifted
    connect = phase_block(out, "Connect to hosts")
    assert re.search(r"wrk-7 \(10[.0-9]+\)\s+connected as root", connect)
    assert "9 other host(s) ok" in connect
    assert out.count("connected as root") == 1
    assert "Warnings (1):" in out and "held by another run: bob@ci-runner" in out
    # The warning's host is shown in every preflight phase, the others counted.
    for title in ("Detect host operating systems", "Gather host facts", "Validate hosts",
                  "Gathering facts about the distro installed"):
        block = phase_block(out, title)
        assert "wrk-7 (" in block and "9 other host(s) ok" in block, block
        assert "wrk-1 (" not in block


def test_chart_values_have_their_own_heading(drifted) -> None:
    _, _, out = drifted
    controller = phase_block(out, "Sync Registry Config Controller")
    assert CHART not in controller and "chart values: under" in controller
    charts = out.split("\nChart values (HelmChartConfig, written in place):\n", 1)[1]
    charts = charts.split("\n\n", 1)[0]
    # ctl-2 has the same values in another key order and formatting: no change there.
    assert charts.splitlines() == [
        f"      write-file-in-place {CHART} (in place) on ctl-1",
        "          ~ spec.valuesContent.controller.replicaCount: 2 -> 3"]


def test_verbose_and_full_show_everything_and_diff_shows_diffs(drifted) -> None:
    lab, plan, _ = drifted
    verbose = cargoship("plan", "-c", lab.dir / "cluster.yaml", "--verbose")
    assert verbose.returncode == 0, verbose.stderr
    assert verbose.stdout.count("connected as root") == 10
    assert "other host(s) ok" not in verbose.stdout and "Compact plan" not in verbose.stdout
    assert "          -    - https://stale.example\n" in verbose.stdout
    full = cargoship("show", plan, "--full").stdout
    assert full.count("connected as root") == 10 and full.count("@@ ") == 3
    diff = cargoship("show", plan, "--diff").stdout
    assert diff.count("@@ ") == 3 and diff.count("connected as root") == 1
    assert cargoship("plan", "-c", lab.dir / "cluster.yaml", "--diff").stdout.count("@@ ") == 3
    shown = cargoship("show", plan).stdout
    assert "@@" not in shown and shown.count("connected as root") == 1 and SUMMARY in shown


def test_no_changes_comes_first(drifted, tmp_path: Path) -> None:
    lab, _, _ = drifted
    # The same config for the two hosts already in sync (ctl-2's chart values differ from
    # cargoship's rendering only in key order and formatting).
    in_sync = tmp_path / "cluster.yaml"
    in_sync.write_text((lab.dir / "cluster.yaml").read_text())
    wanted = {lab.host("ctl-2").address, lab.host("wrk-5").address}
    edit_config(in_sync, lambda d: d["spec"].update(
        hosts=[h for h in d["spec"]["hosts"] if h["ssh"]["address"] in wanted]))
    result = cargoship("plan", "-c", in_sync, "--detailed-exitcode")
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.startswith(
        "No changes. Every host matches the desired engine config.\n")
    assert "Plan: " not in result.stdout


def test_markdown_is_compacted_the_same_way(drifted, tmp_path: Path) -> None:
    _, plan, _ = drifted
    markdown = cargoship("show", plan, "--markdown").stdout
    assert markdown.count(f"**write-file** `{REGISTRIES}`") == 2
    assert "on wrk-1..wrk-4, wrk-6 (same change on 5 hosts)" in markdown
    assert f"```diff\n! mirrors.\"docker.io\".endpoint[0]: \"https://stale.example\" -> " \
           f"\"{MIRROR}\"\n```" in markdown
    after = markdown.split("#### Chart values (HelmChartConfig, written in place)\n", 1)[1]
    assert after.lstrip().startswith(f"**write-file-in-place** `{CHART}` (in place) on ctl-1")
    assert "@@" not in markdown and markdown.count("connected as root") == 1
    assert "Preflight detail of hosts with problems or warnings" in markdown
    assert SUMMARY in markdown
    with_diffs = cargoship("show", plan, "--markdown", "--diff").stdout
    assert with_diffs.count("@@ ") == 3 and "<summary>unified diff</summary>" in with_diffs
    parts = tmp_path / "parts"
    split = cargoship("show", plan, "--markdown", "--split-dir", parts)
    assert split.returncode == 0 and split.stdout.split() == [str(parts / "plan-1.md")]
    assert "(same change on 5 hosts)" in (parts / "plan-1.md").read_text()


def test_diff_colours_follow_the_diff_column(drifted) -> None:
    """A context line of a YAML list (`    - https://...`) is not red; only `-` lines are."""
    _, plan, _ = drifted
    env = {k: v for k, v in os.environ.items() if k != "NO_COLOR"}
    coloured = on_a_terminal("show", str(plan), "--diff", env=env).replace("\r\n", "\n")
    lines = coloured.splitlines()
    context = [line for line in lines if line.endswith(f"     - {MIRROR}")]
    assert context and all("\x1b[" not in line for line in context), context
    removed = [line for line in lines if "https://old-extra.example" in line]
    assert f"{RED}          -    - https://old-extra.example\x1b[0m" in removed
    added = [line for line in lines if line.endswith(f"+    - {MIRROR}\x1b[0m")]
    assert added and all(line.startswith(GREEN) for line in added)
    # Only diff lines and key-summary lines are coloured; a `-` in content never is.
    for line in lines:
        if line.startswith(RED):
            body = line[len(RED):].strip()
            assert body.startswith(("-", "x ")), line
    assert (f'{YELLOW}          ~ spec.valuesContent.controller.replicaCount: 2 -> 3\x1b[0m'
            in lines)
    assert f'{RED}          - mirrors."docker.io".endpoint[1]: "https://old-extra.example"' \
           f'\x1b[0m' in lines


def test_json_carries_changes_by_key_and_the_diff(drifted) -> None:
    _, plan, _ = drifted
    data = json.loads(cargoship("show", plan, "--json").stdout)
    by_host = {c["host"]["name"]: c for c in data["changes"]}
    assert sorted(by_host) == ["ctl-1", *STALE, "wrk-8"]
    assert by_host["wrk-8"]["key_changes"] == [
        {"op": "remove", "path": 'mirrors."docker.io".endpoint[1]',
         "before": '"https://old-extra.example"', "after": None}]
    assert by_host["ctl-1"]["key_changes"] == [
        {"op": "change", "path": "spec.valuesContent.controller.replicaCount",
         "before": "2", "after": "3"}]
    assert all(c["diff"].startswith(f"--- {c['target']} (live)") for c in data["changes"])

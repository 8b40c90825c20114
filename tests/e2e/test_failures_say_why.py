"""Failures say why, through the command on lab hosts: SSH errors tell refused, timed out,
no route, host key changed, a key the host refuses and an encrypted key without an agent
apart, naming the key; apply ends with a summary, and a failed one with what every host
is left with; Ctrl-C while waiting for a lock changes nothing and releases the locks
taken; with no host connected, later phases say "skipped"."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

from tests.e2e.cli import cargoship, cargoship_argv, edit_config
from tests.lab import HostSpec, Lab

REGISTRIES = "/etc/rancher/rke2/registries.yaml"


def small_lab(lab_factory) -> Lab:  # type: ignore[no-untyped-def]
    lab = lab_factory([HostSpec("ctl-1", "controller"), HostSpec("wrk-1", "worker"),
                       HostSpec("wrk-2", "worker")])
    edit_config(lab.dir / "cluster.yaml", lambda d: d["spec"]["options"].update(
        readyTimeoutSeconds=6, drain={"timeoutSeconds": 5},
        ssh={"connectTimeoutSeconds": 1, "commandTimeoutSeconds": 10}))
    return lab


def one_host_config(lab: Lab, tmp_path: Path, name: str, **ssh: object) -> Path:
    """The lab's config cut down to its first host, with SSH settings changed."""
    config = tmp_path / f"{name}.yaml"
    shutil.copy(lab.dir / "cluster.yaml", config)

    def edit(data: dict) -> None:  # type: ignore[type-arg]
        data["spec"]["hosts"] = data["spec"]["hosts"][:1]
        data["spec"]["hosts"][0]["ssh"].update(ssh)

    return edit_config(config, edit)


def connect_error(config: Path, env: dict[str, str] | None = None) -> str:
    result = cargoship("plan", "-c", config, env=env)
    assert result.returncode == 1, result.stdout
    line = next(line for line in result.stdout.splitlines() if "Connect to hosts:" in line)
    return line


def test_ssh_errors_tell_the_causes_apart(lab_factory, tmp_path: Path) -> None:
    lab = small_lab(lab_factory)
    ctl = lab.host("ctl-1").address
    wrk1, wrk2 = lab.host("wrk-1").address, lab.host("wrk-2").address
    lab.exec("wrk-1", "iptables -I INPUT -p tcp --dport 22 -j DROP")
    lab.exec("wrk-2", "iptables -I INPUT -p tcp --dport 22 -j REJECT "
                      "--reject-with icmp-host-unreachable")

    refused = connect_error(one_host_config(lab, tmp_path, "refused", port=2))
    assert f"cannot connect to {ctl}:2: connection refused" in refused
    timed_out = connect_error(one_host_config(lab, tmp_path, "dropped", address=wrk1))
    assert f"cannot connect to {wrk1}:22: timed out after 1s" in timed_out
    no_route = connect_error(one_host_config(lab, tmp_path, "unreachable", address=wrk2))
    assert f"cannot connect to {wrk2}:22: no route to host" in no_route

    other = tmp_path / "other_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)],
                   check=True)
    refused_key = connect_error(one_host_config(lab, tmp_path, "wrong-key",
                                                keyPath=str(other)))
    assert f"authentication failed for root@{ctl}:22: the host accepted neither key " \
           f"{other}" in refused_key

    encrypted = tmp_path / "encrypted_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "a passphrase", "-f",
                    str(encrypted)], check=True)
    no_agent = {k: v for k, v in os.environ.items() if k != "SSH_AUTH_SOCK"}
    locked = subprocess.run([*cargoship_argv(), "plan", "-c",
                             str(one_host_config(lab, tmp_path, "encrypted",
                                                 keyPath=str(encrypted)))],
                            capture_output=True, text=True, env=no_agent, timeout=120)
    assert f"key {encrypted} is passphrase-protected and no ssh-agent is running " \
           f"(SSH_AUTH_SOCK is not set); add it with ssh-add {encrypted}" in locked.stdout

    known = tmp_path / "known_hosts"
    key = (other.with_name("other_key.pub")).read_text().split()
    known.write_text(f"{ctl} {key[0]} {key[1]}\n")
    changed = connect_error(one_host_config(lab, tmp_path, "changed", knownHosts=str(known)))
    assert f"host key of {ctl}:22 CHANGED" in changed


def test_no_host_connected_means_skipped_not_no_changes(tmp_path: Path) -> None:
    key = tmp_path / "key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    (tmp_path / "known_hosts").write_text("")
    config = tmp_path / "cluster.yaml"
    hosts = "\n".join(
        f"    - role: {role}\n      ssh: {{address: 127.0.0.1, port: {port}, keyPath: key, "
        "knownHosts: known_hosts}" for role, port in (("controller", 2), ("worker", 3)))
    config.write_text("apiVersion: cargoship/v1\nkind: Cluster\nmetadata: {name: t}\nspec:\n"
                      "  engine: {distro: rke2, version: v1.30.4+rke2r1}\n  hosts:\n"
                      f"{hosts}\n")
    result = cargoship("plan", "-c", config)
    assert result.returncode == 1
    phases = re.findall(r"^\s*(\d+)\. (.+?)  \[[^]]+\] (.+)$", result.stdout, re.M)
    outcomes = {int(number): outcome for number, _, outcome in phases}
    assert outcomes[1] == "ran" and outcomes[12] == "ran", result.stdout
    assert all(outcomes[n] == "skipped" for n in range(2, 12)), result.stdout
    assert "no changes" not in result.stdout


def test_apply_summary_and_what_a_failed_apply_leaves(lab_factory, tmp_path: Path) -> None:
    lab = small_lab(lab_factory)
    config = lab.dir / "cluster.yaml"
    for host in ("wrk-1", "wrk-2"):
        lab.exec(host, f"printf 'mirrors: {{}}\\n' > {REGISTRIES}")
    good = tmp_path / "good.json"
    assert cargoship("plan", "-c", config, "-out", good).returncode == 0
    applied = cargoship("apply", good, "--confirm", timeout=300)
    assert applied.returncode == 0, applied.stdout + applied.stderr
    assert re.search(r"^Apply complete after \d+\.\d+s: 2 host\(s\) changed, 2 engine "
                     r"restart\(s\), 1 unchanged\.$", applied.stdout, re.M), applied.stdout

    # An engine that refuses the new config: ctl-1 is rolled back, the workers not started.
    edit_config(config, lambda d: d["spec"]["engineConfig"]["registries"]["mirrors"]
                ["docker.io"].update(endpoint=["https://broken.invalid"]))
    broken = tmp_path / "broken.json"
    assert cargoship("plan", "-c", config, "-out", broken).returncode == 0
    failed = cargoship("apply", broken, "--confirm", timeout=300)
    assert failed.returncode == 1, failed.stdout + failed.stderr
    # ctl-1 restarted twice: with the new config, and back on the old one (issue 29).
    assert re.search(r"^Apply FAILED after \d+\.\d+s: 0 host\(s\) changed, 2 engine "
                     r"restart\(s\), 1 rolled back, 2 not started\.$", failed.stdout, re.M), \
        failed.stdout
    left = failed.stdout.split("Each host is left with:\n", 1)[1].splitlines()
    assert left[0].startswith("  ctl-1 (") and left[0].endswith(
        ": its previous config (rolled back), engine running")
    assert left[1].startswith("  wrk-1 (") and left[1].endswith(
        ": its previous config, untouched")
    assert left[2].startswith("  wrk-2 (") and left[2].endswith(
        ": its previous config, untouched")


def test_ctrl_c_while_waiting_for_a_lock_changes_nothing(lab_factory, tmp_path: Path) -> None:
    lab = small_lab(lab_factory)
    lab.exec("wrk-1", f"printf 'mirrors: {{}}\\n' > {REGISTRIES}")
    plan_file = tmp_path / "plan.json"
    assert cargoship("plan", "-c", lab.dir / "cluster.yaml", "-out", plan_file).returncode == 0
    # wrk-2 is locked by another run; ctl-1 and wrk-1 come first (sorted) and get our lock.
    lab.exec("wrk-2", "mkdir -p /run/cargoship && echo '{\"id\": \"0ther0\", \"holder\": "
                      "\"bob@ci\"}' > /run/cargoship/lock")
    proc = subprocess.Popen([*cargoship_argv(), "apply", str(plan_file), "--confirm",
                             "--lock-timeout", "60"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    seen = ""
    deadline = time.monotonic() + 60
    while f"waiting for the lock of {lab.host('wrk-2').address}:" not in seen:
        assert time.monotonic() < deadline, seen
        seen += proc.stderr.readline()
    assert lab.exec("ctl-1", "cat /run/cargoship/lock").stdout.strip() != ""
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, out + err
    assert "Traceback" not in err
    assert ("interrupted: interrupted before anything was changed: nothing was changed on any "
            "host, and the locks taken were released") in err
    for host in ("ctl-1", "wrk-1"):
        assert lab.exec(host, "test -e /run/cargoship/lock", check=False).returncode == 1
    assert "0ther0" in lab.exec("wrk-2", "cat /run/cargoship/lock").stdout
    assert lab.exec("wrk-1", f"cat {REGISTRIES}").stdout == "mirrors: {}\n"


def test_ctrl_c_during_the_drift_check_changes_nothing(lab_factory, tmp_path: Path) -> None:
    """Made deterministic: while the apply waits for a lock, ctl-1's /etc/os-release turns
    into a FIFO nobody writes, so the drift check's read of ctl-1 (over the session the
    apply holds) blocks until the Ctrl-C; nothing else of the apply needs that file."""
    lab = small_lab(lab_factory)
    edit_config(lab.dir / "cluster.yaml", lambda d: d["spec"]["options"].update(
        ssh={"connectTimeoutSeconds": 30, "commandTimeoutSeconds": 30}))
    lab.exec("wrk-1", f"printf 'mirrors: {{}}\\n' > {REGISTRIES}")
    plan_file = tmp_path / "plan.json"
    assert cargoship("plan", "-c", lab.dir / "cluster.yaml", "-out", plan_file).returncode == 0
    lab.exec("wrk-2", "mkdir -p /run/cargoship && echo '{\"id\": \"0ther1\", \"holder\": "
                      "\"bob@ci\"}' > /run/cargoship/lock")
    proc = subprocess.Popen([*cargoship_argv(), "apply", str(plan_file), "--confirm",
                             "--lock-timeout", "60"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stderr is not None
    try:
        seen = ""
        while f"waiting for the lock of {lab.host('wrk-2').address}:" not in seen:
            seen += proc.stderr.readline()
            assert proc.poll() is None, seen
        lab.exec("ctl-1", "mv /etc/os-release /etc/os-release.real && mkfifo /etc/os-release")
        lab.exec("wrk-2", "rm -f /run/cargoship/lock")
        out = ""
        while "locked 3 host(s)" not in out:
            line = proc.stdout.readline()
            assert line, out
            out += line
        proc.send_signal(signal.SIGINT)
        rest, err = proc.communicate(timeout=60)
    finally:
        lab.exec("ctl-1", "rm -f /etc/os-release && mv /etc/os-release.real /etc/os-release")
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, out + rest + err
    assert "nothing was changed on any host, and the locks taken were released" in err
    assert "hosts match the plan" not in out + rest  # it was stopped in the drift check
    for host in ("ctl-1", "wrk-1", "wrk-2"):
        assert lab.exec(host, "test -e /run/cargoship/lock", check=False).returncode == 1
    assert lab.exec("wrk-1", f"cat {REGISTRIES}").stdout == "mirrors: {}\n"

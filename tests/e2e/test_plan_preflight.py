"""`cargoship plan` against real lab hosts: the read-only phases and the preflight."""

from __future__ import annotations

import re
import socket
import threading
from pathlib import Path

from tests.e2e.cli import cargoship, edit_config
from tests.lab import HostSpec
from tests.unit.test_dryrun import EXPECTED_PHASES

TITLES = EXPECTED_PHASES


def phase_block(output: str, title: str) -> str:
    """The lines a phase printed (its header and findings)."""
    lines = output.splitlines()
    start = next(i for i, line in enumerate(lines) if f". {title}  [" in line)
    end = start + 1
    while end < len(lines) and lines[end].startswith("      "):
        end += 1
    return "\n".join(lines[start:end])


def test_healthy_cluster_passes_with_every_phase_reported_in_order(healthy_lab) -> None:
    # Every host's preflight detail: --verbose (by default only hosts with a problem or a
    # warning get theirs).
    result = cargoship("plan", "-c", healthy_lab.dir / "cluster.yaml", "--verbose")
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    positions = [out.index(f"{n:>2}. {title}  [{label}]") for n, (title, label) in
                 enumerate(TITLES, 1)]
    assert positions == sorted(positions)
    for host in healthy_lab.hosts:
        line = f"{host.name} ({host.address})"
        assert line in phase_block(out, "Connect to hosts")
        assert f"hostname {host.name}, private address {host.address} on eth0" in \
            phase_block(out, "Gather host facts")
        assert "root, arch amd64, firewall" in phase_block(out, "Validate hosts")
        assert "rke2 v1.30.4+rke2r1 installed (as pinned), service running" in \
            phase_block(out, "Gathering facts about the distro installed")
    assert "Preflight passed on 6 host(s); nothing was changed on any host." in out
    # Deterministic order: findings follow the config's host order.
    block = phase_block(out, "Connect to hosts")
    assert [h.name for h in healthy_lab.hosts] == [
        line.split()[0] for line in block.splitlines()[1:]]


def test_unknown_host_key_is_refused_then_accepted_on_opt_in(lab_factory) -> None:
    lab = lab_factory([HostSpec("ctl-1", "controller"), HostSpec("wrk-1", "worker")])
    known = lab.dir / "known_hosts"
    known.write_text("")
    refused = cargoship("plan", "-c", lab.dir / "cluster.yaml")
    assert refused.returncode == 1
    for host in lab.hosts:
        assert f"x {host.address}: Connect to hosts: host key SHA256:" in refused.stdout
    assert "is not in" in refused.stdout and "--accept-new-host-keys" in refused.stdout
    assert known.read_text() == ""

    accepted = cargoship("plan", "-c", lab.dir / "cluster.yaml", "--accept-new-host-keys")
    assert accepted.returncode == 0, accepted.stdout
    assert len(known.read_text().splitlines()) == 2
    # Recorded keys are then enforced without the opt-in.
    assert cargoship("plan", "-c", lab.dir / "cluster.yaml").returncode == 0


def test_changed_host_key_is_refused_even_with_opt_in(lab_factory, tmp_path: Path) -> None:
    lab = lab_factory([HostSpec("ctl-1", "controller")])
    other = lab_factory([HostSpec("ctl-1", "controller")])  # a different host key
    impostor_key = (other.dir / "known_hosts").read_text().split(None, 1)[1]
    (lab.dir / "known_hosts").write_text(f"{lab.hosts[0].address} {impostor_key}")
    result = cargoship("plan", "-c", lab.dir / "cluster.yaml", "--accept-new-host-keys")
    assert result.returncode == 1
    assert "CHANGED" in result.stdout and "man-in-the-middle" in result.stdout


def test_a_revoked_host_key_is_refused_even_where_known_or_with_opt_in(lab_factory) -> None:
    # OpenSSH never accepts a key on a @revoked line: its private half may be elsewhere.
    lab = lab_factory([HostSpec("ctl-1", "controller"), HostSpec("wrk-1", "worker")])
    known = lab.dir / "known_hosts"
    lines = known.read_text().splitlines()
    revoked = next(line for line in lines if line.startswith(lab.hosts[1].address + " "))
    key = revoked.split(None, 1)[1]
    known.write_text("\n".join([*lines, f"@revoked * {key}"]) + "\n")
    result = cargoship("plan", "-c", lab.dir / "cluster.yaml")
    assert result.returncode == 1
    assert f"x {lab.hosts[1].address}: Connect to hosts: host key SHA256:" in result.stdout
    assert f"is marked @revoked in {known}" in result.stdout
    assert f"x {lab.hosts[0].address}" not in result.stdout  # the other host is fine
    # Not known at all, and the user accepts new keys: still refused, and not recorded.
    known.write_text("\n".join([lines[0], f"@revoked * {key}"]) + "\n")
    before = known.read_text()
    accepted = cargoship("plan", "-c", lab.dir / "cluster.yaml", "--accept-new-host-keys")
    assert accepted.returncode == 1
    assert "is marked @revoked" in accepted.stdout
    assert known.read_text() == before


def test_unreachable_host_is_reported_and_the_rest_still_checked(lab_factory) -> None:
    lab = lab_factory([HostSpec("ctl-1", "controller"), HostSpec("wrk-1", "worker")])
    dead = lab.hosts[1].address.rsplit(".", 1)[0] + ".250"

    def add_dead_host(data: dict) -> None:  # type: ignore[type-arg]
        ssh = dict(data["spec"]["hosts"][1]["ssh"], address=dead)
        data["spec"]["hosts"].append({"role": "worker", "ssh": ssh})
        data["spec"].setdefault("options", {})["ssh"] = {"connectTimeoutSeconds": 2}

    edit_config(lab.dir / "cluster.yaml", add_dead_host)
    result = cargoship("plan", "-c", lab.dir / "cluster.yaml", "--verbose")
    assert result.returncode == 1
    assert f"x {dead}: Connect to hosts: cannot connect to {dead}:22" in result.stdout
    assert "Problems (1):" in result.stdout
    # The reachable hosts were still read.
    assert "ctl-1" in phase_block(result.stdout, "Gathering facts about the distro installed")


def test_bad_config_lists_every_problem_and_connects_nowhere(tmp_path: Path) -> None:
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.2)
    port = listener.getsockname()[1]
    accepted: list[object] = []
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            try:
                accepted.append(listener.accept())
            except TimeoutError:
                continue

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    config = tmp_path / "cluster.yaml"
    config.write_text(
        "apiVersion: cargoship/v1\nkind: Cluster\nmetadata: {name: Bad_Name}\nspec:\n"
        "  engine: {distro: rke2, version: v1.30.4+rke2r1}\n  hosts:\n"
        f"    - {{role: controller, ssh: {{address: 127.0.0.1, port: {port}}}}}\n"
        f"    - {{role: wizard, ssh: {{address: 127.0.0.1, port: {port}, colour: red}}}}\n"
        "  options: {concurrency: {hosts: 0}}\n")
    try:
        result = cargoship("plan", "-c", config)
    finally:
        stop.set()
        thread.join()
        listener.close()
    assert result.returncode == 1
    errors = result.stderr.strip().splitlines()
    assert errors == [
        f"error: {config}:3: metadata.name: expected a lower-case DNS label: letters, digits "
        "and '-', at most 63 characters, got 'Bad_Name'",
        f"error: {config}:8: spec.hosts[1].role: expected one of 'controller', 'worker', "
        "got 'wizard'",
        # Checks the schema can't express run beside its errors too (issue 29: every error
        # in one run): both hosts are this one listener.
        f"error: {config}:8: spec.hosts[1].ssh.address: duplicate SSH endpoint "
        f"127.0.0.1:{port} (also spec.hosts[0])",
        f"error: {config}:8: spec.hosts[1].ssh.colour: unknown key (expected one of: address, "
        "bastion, keyPath, knownHosts, port, user)",
        f"error: {config}:9: spec.options.concurrency.hosts: expected a value >= 1, got 0",
    ]
    assert result.stdout == ""
    assert accepted == []


def test_duplicate_hostnames_are_reported_on_both_hosts(lab_factory) -> None:
    lab = lab_factory([HostSpec("ctl-1", "controller"), HostSpec("wrk-1", "worker"),
                       HostSpec("wrk-2", "worker")])
    lab.exec("wrk-2", ["hostname", "wrk-1"])
    result = cargoship("plan", "-c", lab.dir / "cluster.yaml")
    assert result.returncode == 1
    a, b = lab.hosts[1].address, lab.hosts[2].address
    for address in (a, b):
        assert (f"x wrk-1 ({address}): Validate hosts: hostname wrk-1 is not unique "
                f"(shared by {a}, {b})") in result.stdout
    assert "Problems (2):" in result.stdout


def test_host_without_sudo_is_refused_and_sudo_user_passes(lab_factory) -> None:
    lab = lab_factory([HostSpec("ctl-1", "controller", user="alice", sudo=True),
                       HostSpec("wrk-1", "worker", user="bob", sudo=False)])
    result = cargoship("plan", "-c", lab.dir / "cluster.yaml", "--verbose")
    assert result.returncode == 1
    assert "alice with passwordless sudo" in phase_block(result.stdout, "Validate hosts")
    assert (f"x wrk-1 ({lab.hosts[1].address}): Validate hosts: user bob is not root and "
            "cannot run sudo without a password") in result.stdout
    # With sudo, root-only reads (engine service state) work for alice.
    assert "service running" in phase_block(result.stdout,
                                             "Gathering facts about the distro installed")
    assert "Problems (1):" in result.stdout


def test_blocked_engine_port_is_reported(lab_factory) -> None:
    lab = lab_factory([HostSpec("ctl-1", "controller"), HostSpec("wrk-1", "worker")])
    lab.exec("ctl-1", "nft add table inet guard && nft add chain inet guard input "
                      "'{ type filter hook input priority 0; policy accept; }' && "
                      "nft add rule inet guard input tcp dport 9345 drop")
    result = cargoship("plan", "-c", lab.dir / "cluster.yaml")
    assert result.returncode == 1
    assert f"x ctl-1 ({lab.hosts[0].address}): Validate hosts: firewall blocks 9345/tcp" \
        in result.stdout
    assert "Problems (1):" in result.stdout
    # Compact: the host with the problem gets its preflight detail, the other is counted.
    block = phase_block(result.stdout, "Validate hosts")
    assert f"ctl-1 ({lab.hosts[0].address})  root, arch amd64" in block
    assert "wrk-1 (" not in block and "1 other host(s) ok" in block


def test_clock_offset_of_five_minutes_is_reported(lab_factory) -> None:
    lab = lab_factory([HostSpec("ctl-1", "controller"), HostSpec("wrk-1", "worker"),
                       HostSpec("wrk-2", "worker", clock_offset=300)])
    result = cargoship("plan", "-c", lab.dir / "cluster.yaml")
    assert result.returncode == 1
    problems = [line for line in result.stdout.splitlines() if line.startswith("  x ")]
    assert len(problems) == 1, result.stdout
    # +300 s, give or take the time the read took (measured against its midpoint).
    assert re.search(rf"wrk-2 \({re.escape(lab.hosts[2].address)}\): Validate hosts: clock "
                     r"is \+(299\.[5-9]|300\.[0-5])s", problems[0]), problems[0]
    assert "off the median of all hosts (allowed: ±30s)" in problems[0]


def test_an_engine_missing_or_not_as_pinned_is_a_problem_never_an_install(lab_factory) -> None:
    lab = lab_factory([HostSpec("ctl-1", "controller", engine_version="v1.31.1+rke2r1"),
                       HostSpec("wrk-1", "worker", engine_installed=False),
                       HostSpec("wrk-2", "worker", engine_version="v1.29.8+rke2r1")])
    result = cargoship("plan", "-c", lab.dir / "cluster.yaml", "--verbose")
    assert result.returncode == 1
    problems = [line for line in result.stdout.splitlines() if line.startswith("  x ")]
    assert len(problems) == 3, result.stdout
    assert ("Gathering facts about the distro installed: rke2 v1.31.1+rke2r1 is newer than "
            "the pinned v1.30.4+rke2r1: cargoship does not downgrade engines") in problems[0]
    assert ("rke2 is not installed: cargoship configures an installed engine and does not "
            "install one (install rke2 v1.30.4+rke2r1 first)") in problems[1]
    assert ("rke2 v1.29.8+rke2r1 is older than the pinned v1.30.4+rke2r1: cargoship does not "
            "upgrade engines") in problems[2]
    assert "would install" not in result.stdout and "upgrade to" not in result.stdout


def test_mixed_os_releases_pick_their_configurers(lab_factory) -> None:
    oses = ["ubuntu-22.04", "rocky-9", "sles-15", "alpine-3.19", "likedebian-1", "unknownos-1"]
    lab = lab_factory([HostSpec(f"h-{i}", "controller" if i == 0 else "worker", os=o)
                       for i, o in enumerate(oses)])
    result = cargoship("plan", "-c", lab.dir / "cluster.yaml", "--verbose")
    block = phase_block(result.stdout, "Detect host operating systems")
    assert "(debian family)" in block.splitlines()[1]
    assert "(rhel family)" in block.splitlines()[2]
    assert "(suse family)" in block.splitlines()[3]
    assert "(alpine family)" in block.splitlines()[4]
    assert "(debian family)" in block.splitlines()[5]  # via ID_LIKE
    assert result.returncode == 1
    assert "Detect host operating systems: unsupported OS" in result.stdout
    assert "ID=unknownos, ID_LIKE=none" in result.stdout


def test_legacy_and_nft_iptables_rules_are_both_read(lab_factory) -> None:
    """A rule in the kernel's legacy iptables and one in iptables-nft on the same host:
    the plan reads both (iptables-legacy-save runs only where the kernel names a legacy
    table, and iptables-save, the same program as iptables-nft-save here, only once)."""
    lab = lab_factory([HostSpec("ctl-1", "controller"), HostSpec("wrk-1", "worker")])
    wrk = lab.host("wrk-1")
    clean = cargoship("plan", "-c", lab.dir / "cluster.yaml", "--verbose")
    assert clean.returncode == 0, clean.stdout + clean.stderr
    assert f"wrk-1 ({wrk.address})  root, arch amd64, firewall (no firewall) leaves" \
        in clean.stdout
    lab.exec("wrk-1", "iptables-legacy -A INPUT -p tcp --dport 10250 -j DROP && "
                      "iptables-nft -A INPUT -p udp --dport 8472 -j DROP")
    blocked = cargoship("plan", "-c", lab.dir / "cluster.yaml", "--verbose")
    assert blocked.returncode == 1, blocked.stdout + blocked.stderr
    assert (f"x wrk-1 ({wrk.address}): Validate hosts: firewall blocks 10250/tcp (kubelet): "
            "iptables chain INPUT: rule '-A INPUT -p tcp -m tcp --dport 10250 -j DROP'"
            ) in blocked.stdout, blocked.stdout
    assert (f"x wrk-1 ({wrk.address}): Validate hosts: firewall blocks 8472/udp") \
        in blocked.stdout, blocked.stdout

"""Fact parsers against data fixtures: what real hosts print, and what lying hosts print."""

from __future__ import annotations

from pathlib import Path

import pytest

from planner.configurers import UnsupportedOs, pick
from planner.facts.distro import _parse_engine, parse_service_state
from planner.facts.engine_version import EngineVersion, VersionError, parse_version_output
from planner.facts.network import parse_hostname, parse_network
from planner.facts.os_release import parse_init_system, parse_kernel, parse_os_release
from planner.facts.system import parse_epoch, parse_privilege
from planner.hosts.batch import Batch, Fact, FactParseError, Output

FIXTURES = Path(__file__).parent / "fixtures"


def fixture(*parts: str) -> Output:
    return Output(FIXTURES.joinpath(*parts).read_text(), 0)


@pytest.mark.parametrize(
    ("name", "os_id", "family", "version", "pretty"),
    [
        ("ubuntu-22.04", "ubuntu", "debian", "22.04", "Ubuntu 22.04.4 LTS"),
        ("rocky-9", "rocky", "rhel", "9.4", "Rocky Linux 9.4 (Blue Onyx)"),
        ("sles-15", "sles", "suse", "15.5", "SUSE Linux Enterprise Server 15 SP5"),
        ("alpine-3.19", "alpine", "alpine", "3.19.1", "Alpine Linux v3.19"),
        ("pop-22.04", "pop", "debian", "22.04", "Pop!_OS 22.04 LTS"),
        ("derivative-of-debian", "acme", "debian", "7", 'Acme Linux 7 "Roadrunner"'),
    ],
)
def test_os_release_and_configurer(name: str, os_id: str, family: str, version: str,
                                   pretty: str) -> None:
    release = parse_os_release(fixture("os-release", f"{name}.txt"))
    assert (release.id, release.version_id, release.pretty_name) == (os_id, version, pretty)
    assert pick(release).family == family


def test_id_like_fallback_is_used_only_when_id_is_unknown() -> None:
    release = parse_os_release(fixture("os-release", "derivative-of-debian.txt"))
    assert release.id_like == ("debian",)
    assert pick(release).family == "debian"


def test_unknown_os_is_refused_with_what_was_found() -> None:
    release = parse_os_release(fixture("os-release", "unknown.txt"))
    with pytest.raises(UnsupportedOs, match=r"ID=plan9, ID_LIKE=none.*supported families"):
        pick(release)


def test_os_release_quoting_is_shell_like() -> None:
    release = parse_os_release(fixture("os-release", "escapes.txt"))
    assert release.pretty_name == 'Debian "quoted" $HOME `x` edition'


@pytest.mark.parametrize("text", ["", "this is not an os-release file\n<html>\n",
                                  'ID="unterminated\n', "NAME=x\n"])
def test_garbage_os_release_is_a_parse_error(text: str) -> None:
    with pytest.raises(FactParseError):
        parse_os_release(Output(text, 0))


def test_kernel() -> None:
    kernel = parse_kernel(Output("Linux 6.1.0-18-amd64 x86_64\n", 0))
    assert (kernel.release, kernel.machine) == ("6.1.0-18-amd64", "x86_64")
    with pytest.raises(FactParseError):
        parse_kernel(Output("Linux\n", 0))


def test_init_system() -> None:
    assert parse_init_system(Output("runit\n", 0)) == "runit"
    with pytest.raises(FactParseError):
        parse_init_system(Output("upstart\n", 0))


def test_network_default_route_interface_wins() -> None:
    net = parse_network(fixture("ip", "multi-nic.txt"))
    assert net.default_interface == "ens3"
    assert net.private_interface() == "ens3"
    assert net.addresses_of("ens4") == ["10.10.0.15"]
    assert net.addresses_of("vlan10") == ["172.16.10.15"]  # the @parent suffix is dropped


def test_network_lab_host() -> None:
    net = parse_network(fixture("ip", "lab-host.txt"))
    assert (net.private_interface(), net.addresses_of("eth0")) == ("eth0", ["10.203.0.10"])


def test_network_without_default_route_uses_first_global_address() -> None:
    net = parse_network(fixture("ip", "no-default-route.txt"))
    assert net.default_interface is None
    assert net.private_interface() == "eth1"


def test_network_with_only_loopback_has_no_private_interface() -> None:
    assert parse_network(fixture("ip", "loopback-only.txt")).private_interface() is None


def test_network_garbage() -> None:
    with pytest.raises(FactParseError, match="iproute2"):
        parse_network(Output("sh: ip: not found\n", 127))
    with pytest.raises(FactParseError, match="bad address"):
        parse_network(Output("2: eth0 inet 999.1.1.1/16 scope global eth0\n--routes--\n", 0))


def test_hostname() -> None:
    assert parse_hostname(Output("ctl-1\n", 0)) == "ctl-1"
    assert parse_hostname(Output("node_7.example.com\n", 0)) == "node_7.example.com"
    for bad in ("", "two words", "x" * 300, "$(touch${IFS}/tmp/pwned)", "`id`", "a;b", "../etc",
                "ctl-1\x1b[31m", "a..b", "-x"):
        with pytest.raises(FactParseError):
            parse_hostname(Output(bad, 0))


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("rke2 version v1.30.4+rke2r1 (6b4e1a7b)\ngo version go1.22.5 X:boringcrypto\n",
         EngineVersion(1, 30, 4, "rke2", 1)),
        ("k3s version v1.29.8+k3s1 (33fdc35d)\ngo version go1.22.5\n",
         EngineVersion(1, 29, 8, "k3s", 1)),
    ],
)
def test_version_output(text: str, expected: EngineVersion) -> None:
    assert parse_version_output(text) == expected


@pytest.mark.parametrize("text", ["", "rke2 version 1.30\n", "Segmentation fault\n",
                                  "rke2 version v1.30.4+k3s1 (x)\n", "k3s version vX.Y.Z+k3s1\n"])
def test_version_output_that_does_not_parse(text: str) -> None:
    with pytest.raises(VersionError):
        parse_version_output(text)


def test_version_ordering() -> None:
    parse = EngineVersion.parse
    assert parse("v1.30.4+rke2r1") < parse("v1.30.4+rke2r2") < parse("v1.30.5+rke2r1")
    assert parse("v1.30.10+rke2r1") > parse("v1.30.9+rke2r1")  # numeric, not lexical
    assert parse("v1.31.0+rke2r1") > parse("v1.30.99+rke2r9")
    assert str(parse("v1.30.4+k3s1")) == "v1.30.4+k3s1"


@pytest.mark.parametrize(
    ("line", "state"),
    [
        ("systemd active", "running"),
        ("systemd inactive", "stopped"),
        ("systemd failed", "failed"),
        ("runit run: /etc/service/rke2-server: (pid 120) 35s", "running"),
        ("runit starting: run: /etc/service/rke2-server: (pid 120) 0s", "starting"),
        ("runit down: /etc/service/rke2-server: 3s, normally up", "stopped"),
        ("runit fail: /etc/service/rke2-server: runsv not running", "failed"),
        ("openrc  * status: started", "running"),
        ("openrc  * status: crashed", "failed"),
        ("absent", "absent"),
    ],
)
def test_service_state(line: str, state: str) -> None:
    assert parse_service_state(line) == state


def test_engine_facts_installed_and_not() -> None:
    out = Output("binary /usr/local/bin/rke2\nversion rke2 version v1.30.4+rke2r1 (x)\n"
                 "state runit run: /etc/service/rke2-server: (pid 9) 1s\n", 0)
    facts = _parse_engine(out)
    assert facts.installed and facts.version == EngineVersion(1, 30, 4, "rke2", 1)
    assert facts.service_state == "running"
    missing = _parse_engine(Output("other rke2\nstate absent\n", 0))
    assert not missing.installed and missing.other_distro == "k3s"
    lying = _parse_engine(Output("binary /usr/local/bin/rke2\nversion banana\nstate absent\n", 0))
    assert lying.version is None and "banana" in (lying.version_error or "")


def test_privilege_and_clock() -> None:
    assert parse_privilege(Output("uid 0\n", 0)).can_write
    assert parse_privilege(Output("uid 1000\nsudo yes\n", 0)).can_write
    assert not parse_privilege(Output("uid 1000\nsudo no\n", 0)).can_write
    with pytest.raises(FactParseError):
        parse_privilege(Output("uid root\n", 0))
    assert parse_epoch(Output("1764559200.123456789\n", 0)) == pytest.approx(1764559200.1234)
    with pytest.raises(FactParseError):
        parse_epoch(Output("Tue Dec  1\n", 0))


def test_batch_splits_sections_and_exit_codes() -> None:
    facts = [Fact("a", "echo a", lambda o: o), Fact("b", "false", lambda o: o)]
    batch = Batch.of(facts)
    stdout = f"one\ntwo\n\n{batch.token} 0 0\n\n{batch.token} 1 1\n"
    assert batch.split(stdout) == [Output("one\ntwo\n", 0), Output("", 1)]


def test_batch_refuses_truncated_or_forged_output() -> None:
    batch = Batch.of([Fact("a", "true", lambda o: o), Fact("b", "true", lambda o: o)])
    with pytest.raises(FactParseError, match="ended early"):
        batch.split(f"x\n{batch.token} 0 0\n")
    with pytest.raises(FactParseError, match="out of order"):
        batch.split(f"\n{batch.token} 1 0\n\n{batch.token} 0 0\n")
    # A file that contains a boundary from another batch does not split this one.
    other = Batch.of([Fact("a", "true", lambda o: o)])
    assert other.token != batch.token


def test_an_enormous_os_release_is_refused_by_size() -> None:
    with pytest.raises(FactParseError, match="larger than 64 KiB"):
        parse_os_release(Output("ID=ubuntu\n" + "X=y\n" * 20000, 0))

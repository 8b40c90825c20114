"""The engine config fact's shell (planner/facts/sh/engine_config.sh), run for real with a
stub `systemctl`: the unit's ExecStart as `systemctl show` prints it, its environment files
read (never sourced), the config file they move, `.yml` and upper-case drop-ins, in name
order; then parsed as the plan parses it."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from planner.facts.distro import LAYOUTS
from planner.facts.engine_config import MAX_BYTES, SYSTEMD_RUNNING, engine_config_fact
from planner.hosts.batch import Output


def run_fact(tmp_path: Path, exec_line: str, env_text: str) -> Output:
    stub = tmp_path / "bin"
    stub.mkdir()
    (stub / "systemctl").write_text(
        "#!/bin/sh\ncase \"$1\" in cat) exit 0;; show) printf '%s\\n' "
        f"'{{ path=/usr/local/bin/k3s ; argv[]={exec_line} ; ignore_errors=no ; "
        "start_time=[n/a] }'; exit 0;; esac\nexit 1\n")
    (stub / "systemctl").chmod(0o755)
    env_file = tmp_path / "k3s.service.env"
    env_file.write_text(env_text)
    fact = engine_config_fact(LAYOUTS["k3s"], "controller")
    command = fact.command.replace("/etc/systemd/system/k3s.service.env", str(env_file))
    # systemd "runs" here: the fact asks systemctl only where /run/systemd/system is.
    booted = tmp_path / "run-systemd-system"
    booted.mkdir()
    command = command.replace(SYSTEMD_RUNNING, str(booted))
    done = subprocess.run(["sh", "-c", command], capture_output=True, text=True, timeout=30,
                          env={**os.environ, "PATH": f"{stub}:{os.environ['PATH']}"})
    assert done.returncode == 0, done.stderr
    return Output(done.stdout, 0)


def test_systemd_execstart_env_file_and_relocated_config(tmp_path: Path) -> None:
    alt = tmp_path / "alt"
    (alt / "c.yaml.d").mkdir(parents=True)
    (alt / "c.yaml").write_text("node-label: [a=1]\n")
    (alt / "c.yaml.d" / "20-b.YML").write_text("node-label+: [b=2]\n")
    (alt / "c.yaml.d" / "10-a.yaml").write_text("node-label+: [c=3]\n")
    (alt / "c.yaml.d" / "30-c.txt").write_text("node-name: never\n")
    marker = tmp_path / "sourced"
    out = run_fact(tmp_path, "/usr/local/bin/k3s server --node-name Flag-Name "
                             "--data-dir /srv/k3s",
                   f"# a comment\nK3S_CONFIG_FILE='{alt}/c.yaml'\n"
                   f"X=$(touch {marker})\n")
    assert not marker.exists()  # read, never run
    settings = engine_config_fact(LAYOUTS["k3s"]).parse(out)
    assert settings.config_path == f"{alt}/c.yaml"
    assert [p for p, _ in settings.layers] == [
        f"{alt}/c.yaml", f"{alt}/c.yaml.d/10-a.yaml", f"{alt}/c.yaml.d/20-b.YML"]
    assert settings.merged["node-label"] == ["a=1", "c=3", "b=2"]
    assert settings.node_name("host") == "flag-name"  # the command line wins, lowercased
    assert settings.sources["data-dir"] == "ExecStart of k3s.service"
    assert settings.locations(LAYOUTS["k3s"]).manifests_dir == "/srv/k3s/server/manifests"


def test_openrc_command_args(tmp_path: Path) -> None:
    """Alpine's k3s service (OpenRC): the command line is the init script's command_args,
    read (never run), quotes removed; the plan says where a setting came from."""
    if any(Path(d, "k3s", "run").exists() for d in ("/etc/service", "/var/service", "/service")):
        pytest.skip("this machine runs a k3s under runit, which the fact would read first")
    init_d = tmp_path / "init.d"
    init_d.mkdir()
    marker = tmp_path / "ran"
    (init_d / "k3s").write_text(
        "#!/sbin/openrc-run\n"
        f"command=/usr/local/bin/k3s\nstart_pre() {{ touch {marker}; }}\n"
        'command_args="server --node-name Rc-Name --data-dir /srv/rc"\n')
    fact = engine_config_fact(LAYOUTS["k3s"], "controller")
    command = fact.command.replace("/etc/init.d/", f"{init_d}/")
    assert command != fact.command
    # A systemctl is installed but systemd does not run (no /run/systemd/system): it is
    # never asked, even one that would answer (a container's, say).
    command = command.replace(SYSTEMD_RUNNING, str(tmp_path / "not-booted"))
    asked = tmp_path / "asked"
    no_systemd = tmp_path / "bin"
    no_systemd.mkdir()
    (no_systemd / "systemctl").write_text(f"#!/bin/sh\necho \"$*\" >> {asked}\nexit 0\n")
    (no_systemd / "systemctl").chmod(0o755)
    done = subprocess.run(["sh", "-c", command], capture_output=True, text=True, timeout=30,
                          env={**os.environ, "PATH": f"{no_systemd}:{os.environ['PATH']}"})
    assert done.returncode == 0, done.stderr
    assert not marker.exists()
    assert not asked.exists()
    settings = engine_config_fact(LAYOUTS["k3s"]).parse(Output(done.stdout, 0))
    assert settings.node_name("host") == "rc-name"
    assert settings.sources["data-dir"] == f"{init_d}/k3s (command_args)"
    assert settings.locations(LAYOUTS["k3s"]).manifests_dir == "/srv/rc/server/manifests"


def test_sizes_are_counted_only_for_files_that_may_be_too_large(tmp_path: Path) -> None:
    """`wc` runs only where head may have stopped short (a program fewer per file on every
    plan): a file under MAX_BYTES says "-" and the parser counts it; one at MAX_BYTES is
    read whole; one over it is refused with its size."""
    alt = tmp_path / "alt"
    (alt / "c.yaml.d").mkdir(parents=True)
    (alt / "c.yaml").write_text("node-label: [a=1]\n")
    comment = "# " + "x" * (MAX_BYTES - len("node-name: at-max\n# \n")) + "\n"
    (alt / "c.yaml.d" / "10-at-max.yaml").write_text("node-name: at-max\n" + comment)
    assert (alt / "c.yaml.d" / "10-at-max.yaml").stat().st_size == MAX_BYTES
    (alt / "c.yaml.d" / "20-over.yaml").write_text("a: 1\n" + "#" * MAX_BYTES + "\n")
    out = run_fact(tmp_path, "/usr/local/bin/k3s server", f"K3S_CONFIG_FILE={alt}/c.yaml\n")
    sizes = {line.rsplit(" ", 1)[-1]: line.split(" ")[1] for line in out.stdout.splitlines()
             if line.startswith("file ")}
    assert sizes == {f"{alt}/c.yaml": "-", f"{alt}/c.yaml.d/10-at-max.yaml": str(MAX_BYTES),
                     f"{alt}/c.yaml.d/20-over.yaml": str(MAX_BYTES + 6)}
    settings = engine_config_fact(LAYOUTS["k3s"]).parse(out)
    assert [p for p, _ in settings.layers] == [f"{alt}/c.yaml", f"{alt}/c.yaml.d/10-at-max.yaml"]
    assert settings.merged["node-name"] == "at-max"
    assert settings.problems == (f"{alt}/c.yaml.d/20-over.yaml: {MAX_BYTES + 6} bytes, more "
                                 f"than an engine config holds ({MAX_BYTES})",)


def test_runit_run_script_exec_line(tmp_path: Path) -> None:
    """A runit service (the lab's hosts, Void): the command line is the run script's last
    line that is `exec` after any indent, read by the shell itself; comments, other words
    beginning with exec, and a last line without a newline are judged as grep -E
    '^[[:space:]]*exec[[:space:]]' | tail -n 1 judged them."""
    service = tmp_path / "sv" / "rke2-server"
    service.mkdir(parents=True)
    (service / "run").write_text(
        "#!/bin/sh\n# exec /usr/local/bin/rke2 server --node-name Comment\n"
        "exec 2>&1\nexecline-thing --node-name Not-This\n"
        "\t exec\tchpst -u root /usr/local/bin/rke2 server --node-name Run-Name "
        "--data-dir /srv/rn")  # no newline at the end
    fact = engine_config_fact(LAYOUTS["rke2"], "controller")
    command = fact.command.replace("/etc/service /var/service /service", str(service.parent))
    assert command != fact.command
    command = command.replace(SYSTEMD_RUNNING, str(tmp_path / "not-booted"))
    started = tmp_path / "started"
    stubs = tmp_path / "bin"
    stubs.mkdir()
    for program in ("grep", "tail", "sed"):  # none is needed: each would be noted
        (stubs / program).write_text(f"#!/bin/sh\necho {program} >> {started}\nexit 1\n")
        (stubs / program).chmod(0o755)
    done = subprocess.run(["sh", "-c", command], capture_output=True, text=True, timeout=30,
                          env={**os.environ, "PATH": f"{stubs}:{os.environ['PATH']}"})
    assert done.returncode == 0, done.stderr
    assert not started.exists(), started.read_text()
    settings = engine_config_fact(LAYOUTS["rke2"]).parse(Output(done.stdout, 0))
    assert settings.node_name("host") == "run-name"
    assert settings.sources["data-dir"] == f"{service}/run"
    assert settings.locations(LAYOUTS["rke2"]).manifests_dir == "/srv/rn/server/manifests"

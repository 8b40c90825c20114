"""The same reads by `ansible-playbook --check --diff` (tests/bench/playbook.yml) on the
same hosts through the same proxy: forks = host count, OpenSSH with strict host-key
checking against the same known_hosts, pipelining and ControlPersist on (Ansible's own
advice for speed), the desired files rendered by cargoship's own code."""

from __future__ import annotations

import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import yaml

from planner.config import load_config
from planner.desired.engine_files import desired_files, owned_paths
from planner.facts.distro import LAYOUTS

from .fleet import Fleet
from .measure import Run, run

PLAYBOOK = Path(__file__).with_name("playbook.yml")
REQUIREMENT = "ansible-core>=2.18,<2.20"  # as in pyproject's [bench] extra


@dataclass(frozen=True)
class AnsibleResult:
    size: int
    delay_ms: float
    run: Run

    @property
    def ok(self) -> bool:
        return self.run.code == 0


def playbook_command() -> list[str] | None:
    script = Path(sys.executable).with_name("ansible-playbook")
    if script.exists():
        return [str(script)]
    found = shutil.which("ansible-playbook")
    return [found] if found else None


def ensure_ansible(install: bool) -> list[str] | None:
    """ansible-playbook, installed into this Python's environment if missing and allowed."""
    command = playbook_command()
    if command is None and install:
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", REQUIREMENT], check=True)
        command = playbook_command()
    return command


def _write_setup(fleet: Fleet, size: int, delay_ms: float) -> tuple[Path, Path, Path]:
    base = fleet.work / f"ansible-{size}-{delay_ms:g}ms"
    base.mkdir(parents=True, exist_ok=True)
    config_path = fleet.cluster_yaml(size, delay_ms)
    config = load_config(config_path)
    layout = LAYOUTS[config.engine.distro]
    proxy = fleet.proxy(delay_ms)
    groups: dict[str, dict[str, object]] = {}
    for role in ("controller", "worker"):
        files = []
        for number, desired in enumerate(desired_files(config, role)):
            src = base / f"{role}-{number}.yaml"
            src.write_text(desired.content())
            files.append({"src": str(src), "path": desired.path, "mode": f"{desired.mode:04o}"})
        hosts = {h.name: {"ansible_host": "127.0.0.1", "ansible_port": proxy.ports[h.address]}
                 for h in fleet.lab.hosts[:size] if h.role == role}
        groups[f"{role}s"] = {"hosts": hosts, "vars": {
            "engine_service": layout.service(role), "desired_files": files,
            "owned_dirs": list(owned_paths(layout))}}
    inventory = base / "inventory.yml"
    inventory.write_text(yaml.safe_dump({"all": {"vars": {
        "ansible_user": "root", "engine": layout.binary,
        "ansible_python_interpreter": "/usr/bin/python3",
        "ansible_ssh_private_key_file": str(fleet.lab.dir / "id_ed25519")},
        "children": groups}}))
    control = control_dir(size, delay_ms)
    control.mkdir(exist_ok=True)
    cfg = base / "ansible.cfg"
    cfg.write_text(f"""[defaults]
forks = {size}
host_key_checking = True
gathering = explicit
inventory = {inventory}
retry_files_enabled = False
deprecation_warnings = False
local_tmp = {base}/tmp

[ssh_connection]
pipelining = True
control_path_dir = {control}
ssh_args = -o ControlMaster=auto -o ControlPersist=60s -o StrictHostKeyChecking=yes \
-o UserKnownHostsFile={fleet.work / f"known_hosts-{delay_ms:g}ms"} -o IdentitiesOnly=yes
""")
    return base, cfg, inventory


def bench_ansible(fleet: Fleet, command: list[str], size: int, delay_ms: float) -> AnsibleResult:
    base, cfg, inventory = _write_setup(fleet, size, delay_ms)
    env = {"ANSIBLE_CONFIG": str(cfg), "ANSIBLE_HOME": str(base / "home"),
           "ANSIBLE_NOCOLOR": "1"}
    argv = [*command, "-i", str(inventory), "--check", "--diff", "-f", str(size), str(PLAYBOOK)]
    result = run(argv, env=env, timeout=1800)
    close_masters(control_dir(size, delay_ms))
    return AnsibleResult(size, delay_ms, result)


def control_dir(size: int, delay_ms: float) -> Path:
    return Path(f"/tmp/bench-cp-{size}-{delay_ms:g}")  # unix sockets: keep the path short


def close_masters(directory: Path) -> None:
    """ControlPersist masters outlive the run: ask each of ours to exit, by its socket."""
    for sock in directory.glob("*"):
        subprocess.run(["ssh", "-o", f"ControlPath={sock}", "-O", "exit", "bench"],
                       capture_output=True, check=False, timeout=10)
    shutil.rmtree(directory, ignore_errors=True)

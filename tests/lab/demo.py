"""The state the demo starts from, on a running lab: `python -m tests.lab.demo --dir LAB`.

The desired config gains what a real cluster has (a second, nearer mirror in front of the
old one; ingress-nginx values), every host is given the files of that config as if
cargoship had applied it, and then the drift a team meets: workers still on the stale
mirror list, and a chart value somebody changed by hand on a controller.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

import yaml

from planner.config import load_config
from planner.desired.engine_files import desired_files

from .lab import Lab

NEAR_MIRROR = "https://mirror-eu.lab.internal:5000"
STALE_WORKERS = ("wrk-2", "wrk-3")
HAND_EDITED = "ctl-1"


def seed(lab_dir: Path) -> list[str]:
    """Returns what was made to differ, one line each."""
    lab = Lab.load(lab_dir)
    path = lab.dir / "cluster.yaml"
    data = yaml.safe_load(path.read_text())
    engine = data["spec"]["engineConfig"]
    mirrors = engine["registries"]["mirrors"]["docker.io"]["endpoint"]
    engine["registries"]["mirrors"]["docker.io"]["endpoint"] = [NEAR_MIRROR, *mirrors]
    engine["charts"] = {"rke2-ingress-nginx": {"values": {"controller": {"replicaCount": 2}}}}
    data["spec"]["options"].update(readyTimeoutSeconds=30, drain={"timeoutSeconds": 10})
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    config = load_config(path)
    made = []
    for host in lab.hosts:
        for file in desired_files(config, host.role):
            content = file.content()
            if file.kind == "registries" and host.name in STALE_WORKERS:
                made.append(f"{host.name}: {file.path} still lists only the old mirror")
                continue  # the lab's own file: the old mirror list
            if file.kind == "chart" and host.name == HAND_EDITED:
                content = content.replace("replicaCount: 2", "replicaCount: 3")
                made.append(f"{host.name}: {file.path}: replicaCount changed to 3 by hand")
            target = shlex.quote(file.path)
            lab.exec(host.name, f"mkdir -p $(dirname {target}) && cat > {target} && "
                                f"chmod {file.mode:o} {target}", input=content)
    return made


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.lab.demo")
    parser.add_argument("--dir", type=Path, required=True)
    args = parser.parse_args(argv)
    for line in seed(args.dir):
        print(f"  drift: {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

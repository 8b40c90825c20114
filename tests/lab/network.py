"""The lab's network: one bridge per lab in the root namespace, one netns + veth per host.

Each lab gets its own /16 (10.(200+N).0.0/16) so two labs can run at once. N is claimed
atomically with mkdir under /run/cargoship-lab, which also lets `down --all` find labs.
"""

from __future__ import annotations

import ipaddress
import secrets
import subprocess
import time
from pathlib import Path

REGISTRY = Path("/run/cargoship-lab")
MAX_LABS = 50


def run(*argv: str, input: str | None = None, check: bool = True) -> str:
    result = subprocess.run(argv, input=input, capture_output=True, text=True)
    if check and result.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: {result.stderr.strip() or result.returncode}")
    return result.stdout


def _routes() -> list[ipaddress.IPv4Network]:
    found = []
    for line in run("ip", "-4", "route", "show").splitlines():
        first = line.split()[0] if line.split() else ""
        try:
            found.append(ipaddress.IPv4Network(first, strict=False))
        except ValueError:
            continue
    return found


def claim_index(lab_dir: Path) -> int:
    REGISTRY.mkdir(parents=True, exist_ok=True)
    routes = _routes()
    links = run("ip", "-o", "link", "show")
    for index in range(MAX_LABS):
        subnet = ipaddress.IPv4Network(f"10.{200 + index}.0.0/16")
        # Also skip names in use: a lab made by other code may not be registered here.
        if any(subnet.overlaps(r) for r in routes) or f" {bridge_name(index)}:" in links:
            continue
        try:
            (REGISTRY / str(index)).mkdir()
        except FileExistsError:
            continue
        (REGISTRY / str(index) / "dir").write_text(str(lab_dir.resolve()))
        return index
    raise RuntimeError("no free lab subnet (10.200.0.0/16 .. 10.249.0.0/16 all in use)")


def release_index(index: int) -> None:
    entry = REGISTRY / str(index)
    (entry / "dir").unlink(missing_ok=True)
    if entry.exists():
        entry.rmdir()


def registered_dirs() -> list[Path]:
    if not REGISTRY.exists():
        return []
    return [Path((e / "dir").read_text()) for e in REGISTRY.iterdir() if (e / "dir").exists()]


def bridge_name(index: int) -> str:
    return f"cslab{index}"


def gateway(index: int) -> str:
    return f"10.{200 + index}.0.1"


def host_address(index: int, position: int) -> str:
    return f"10.{200 + index}.{1 + position // 200}.{10 + position % 200}"


def create_bridge(index: int) -> None:
    name = bridge_name(index)
    run("ip", "-batch", "-", input=(
        f"link add {name} type bridge\n"
        f"addr add {gateway(index)}/16 dev {name}\n"
        f"link set {name} up\n"))


def new_tag() -> str:
    """A short random name part: link and netns names of two labs (or of other code using
    a similar scheme) never collide, within the 15 characters a link name may have."""
    return secrets.token_hex(3)


def create_hosts(index: int, tag: str, hosts: list[tuple[str, str, int]]) -> None:
    """hosts: (netns, address, position). Batched: `ip` per command costs ~3 ms each."""
    for netns, _, _ in hosts:
        run("ip", "netns", "add", netns)
    root = []
    for netns, _, position in hosts:
        outer, inner = f"c{tag}h{position}", f"c{tag}p{position}"
        root.append(f"link add {outer} type veth peer name {inner} netns {netns}")
        root.append(f"link set {outer} master {bridge_name(index)} up")
    run("ip", "-batch", "-", input="\n".join(root) + "\n")
    for netns, address, position in hosts:
        run("ip", "-n", netns, "-batch", "-", input=(
            f"link set c{tag}p{position} name eth0\n"
            f"addr add {address}/16 dev eth0\n"
            "link set eth0 up\nlink set lo up\n"
            f"route add default via {gateway(index)}\n"))


def destroy(index: int, netns_names: list[str], tag: str | None = None,
            positions: list[int] | None = None) -> None:
    """Remove a lab's network, and return only once its links are gone.

    `ip netns del` only drops the namespace's name: the kernel tears the namespace (and the
    veth pairs inside) down later, asynchronously, once its last process has exited. So
    `down` used to return while the hosts' veth ends were still listed in the root
    namespace. Deleting the root-side veth end removes both ends at once, synchronously;
    then wait until no link of the lab is listed.
    """
    if tag is not None:
        for position in positions or []:
            run("ip", "link", "del", f"c{tag}h{position}", check=False)
    existing = set(run("ip", "netns", "list").split())
    for name in netns_names:
        if name in existing:
            # Anything still running in the namespace (a stray `ip netns exec`, an sshd
            # child not yet reaped) would keep it, and the lab, alive after `down`.
            for pid in run("ip", "netns", "pids", name, check=False).split():
                run("kill", "-9", pid, check=False)
            run("ip", "netns", "del", name, check=False)
    run("ip", "link", "del", bridge_name(index), check=False)
    prefixes = [f" {bridge_name(index)}:"] + ([f" c{tag}h"] if tag is not None else [])
    deadline = time.monotonic() + 10
    while any(p in run("ip", "-o", "link", "show") for p in prefixes):
        if time.monotonic() > deadline:
            raise RuntimeError(f"lab {index}: links still listed 10 s after removing them")
        time.sleep(0.05)

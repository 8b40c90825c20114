"""Client CPU of one SSH handshake and one exec, per client, on lab hosts: how issue 26
chose the client of the one SSH stack. As root, from the checkout:

    python -m tests.bench.ssh_clients [--hosts 8] [--rounds 10]

Each round connects to every host at once, runs `echo hi`, and closes; the figure is the
process CPU per connection (user + system), the first round (imports, key parsing) left
out. cargoship's own stack (libssh2 on one event loop) is measured through
`open_session`; paramiko and asyncssh (when installed: it is not a dependency) as a
minimal client of each would use them.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from tests.lab import HostSpec, Lab


def _cargoship(lab: Lab) -> Callable[[], object]:
    from planner.config.model import SshConfig
    from planner.hosts.ssh import ConnectOptions, open_session

    options = ConnectOptions()
    configs = [SshConfig(h.address, 22, "root", lab.dir / "id_ed25519",
                         lab.dir / "known_hosts") for h in lab.hosts]

    def one(ssh: SshConfig) -> None:
        session = open_session(ssh.address, ssh, options)
        assert session.run("echo hi", 10).stdout == b"hi\n"
        session.close()

    pool = ThreadPoolExecutor(len(configs))
    return lambda: list(pool.map(one, configs))


def _paramiko(lab: Lab) -> Callable[[], object]:
    import paramiko

    known = paramiko.HostKeys(str(lab.dir / "known_hosts"))
    key = paramiko.PKey.from_path(lab.dir / "id_ed25519")

    def one(address: str) -> None:
        client = paramiko.SSHClient()
        for kind, host_key in (known.lookup(address) or {}).items():
            client.get_host_keys().add(address, kind, host_key)
        client.connect(address, username="root", pkey=key, allow_agent=False,
                       look_for_keys=False)
        _, out, _ = client.exec_command("echo hi")
        assert out.read() == b"hi\n"
        client.close()

    pool = ThreadPoolExecutor(len(lab.hosts))
    return lambda: list(pool.map(one, [h.address for h in lab.hosts]))


def _asyncssh(lab: Lab) -> Callable[[], object] | None:
    try:
        import asyncssh
    except ImportError:
        return None

    async def one(address: str) -> None:
        async with asyncssh.connect(address, username="root",
                                    client_keys=[str(lab.dir / "id_ed25519")],
                                    known_hosts=str(lab.dir / "known_hosts"),
                                    agent_path=None, config=None) as conn:
            result = await conn.run("echo hi", check=False)
            assert result.stdout == "hi\n"

    async def round_() -> None:
        await asyncio.gather(*(one(h.address) for h in lab.hosts))

    return lambda: asyncio.run(round_())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hosts", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=10)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="ssh-clients-") as work:
        lab = Lab.up(Path(work), [HostSpec(f"h-{i}", "worker") for i in range(args.hosts)],
                     kube_api=False)
        try:
            print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
            for name, make in (("cargoship (libssh2, one loop)", _cargoship),
                               ("paramiko", _paramiko), ("asyncssh", _asyncssh)):
                round_ = make(lab)
                if round_ is None:
                    print(f"{name:32} not installed")
                    continue
                round_()  # the first round pays for imports and parsing
                cpu, wall = time.process_time(), time.monotonic()
                for _ in range(args.rounds):
                    round_()
                count = args.rounds * args.hosts
                print(f"{name:32} {(time.process_time() - cpu) / count * 1000:6.2f} ms CPU "
                      f"per connection and exec, {(time.monotonic() - wall) / args.rounds:.2f}"
                      f" s wall per round of {args.hosts}")
            print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        finally:
            lab.down()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""A latency proxy: a WAN between cargoship (or Ansible) and the lab hosts, without netem.

One process, one listening port per host on 127.0.0.1, each forwarding to host:22. Every
chunk read in either direction is written out `delay` seconds later, in order: a fixed
one-way delay, not a bandwidth limit. The upstream connection is made 1.5 round trips
after the client's connect, when the server would see a real TCP handshake complete, so
the SSH banners arrive one full round trip later than on a LAN, as over a real WAN.

    python -m tests.bench.proxy --delay-ms 20 --targets targets.json --ports ports.json

targets.json: ["10.200.1.10", ...]; the proxy writes ports.json ({"10.200.1.10": 41234,
...}) once every port listens, then serves until killed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import time
from pathlib import Path

CHUNK = 65536


async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                delay: float) -> None:
    queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

    async def read() -> None:
        try:
            while data := await reader.read(CHUNK):
                queue.put_nowait((time.monotonic() + delay, data))
        except OSError:
            pass
        queue.put_nowait((time.monotonic() + delay, b""))

    async def write() -> None:
        while True:
            due, data = await queue.get()
            wait = due - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            if not data:
                try:
                    writer.write_eof()
                except OSError:
                    pass
                return
            writer.write(data)
            try:
                await writer.drain()
            except OSError:
                return

    await asyncio.gather(read(), write())


def _nodelay(writer: asyncio.StreamWriter) -> None:
    sock = writer.get_extra_info("socket")
    if sock is not None:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


def _handler(target: str, delay: float):  # type: ignore[no-untyped-def]
    async def handle(client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        _nodelay(client_w)
        try:
            if delay:
                await asyncio.sleep(3 * delay)  # SYN, SYN-ACK, ACK
            host_r, host_w = await asyncio.open_connection(target, 22)
        except OSError:
            client_w.close()
            return
        _nodelay(host_w)
        try:
            await asyncio.gather(_pump(client_r, host_w, delay), _pump(host_r, client_w, delay))
        finally:
            for w in (client_w, host_w):
                w.close()
    return handle


async def serve(targets: list[str], delay: float, ports_file: Path) -> None:
    servers = []
    ports: dict[str, int] = {}
    for target in targets:
        server = await asyncio.start_server(_handler(target, delay), "127.0.0.1", 0,
                                            backlog=512)
        servers.append(server)
        ports[target] = server.sockets[0].getsockname()[1]
    tmp = ports_file.with_name(ports_file.name + ".tmp")
    tmp.write_text(json.dumps(ports))
    os.replace(tmp, ports_file)
    await asyncio.Event().wait()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.bench.proxy")
    parser.add_argument("--delay-ms", type=float, required=True, help="one-way delay")
    parser.add_argument("--targets", type=Path, required=True)
    parser.add_argument("--ports", type=Path, required=True)
    args = parser.parse_args(argv)
    targets = json.loads(args.targets.read_text())
    try:
        asyncio.run(serve(targets, args.delay_ms / 1000, args.ports))
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

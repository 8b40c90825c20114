"""A real lab Kubernetes API stand-in on 127.0.0.1 for tests, and the official client on it;
and a real etcd member on 127.0.0.1 for API servers that share one, as a cluster's do.

Used as a fixture by the tests of the stand-in itself and of the executor's drain.
"""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

SERVER = Path(__file__).resolve().parent / "lab" / "kubeapi.py"
TOKEN = "lab-token"


@dataclass
class Kube:
    port: int
    api_client: client.ApiClient
    proc: subprocess.Popen[bytes]

    @property
    def core(self) -> client.CoreV1Api:
        return client.CoreV1Api(self.api_client)

    @property
    def policy(self) -> client.PolicyV1Api:
        return client.PolicyV1Api(self.api_client)

    def call(self, method: str, path: str, body: Any = None, content_type: str =
             "application/json", response_type: str | None = None) -> Any:
        """A request the typed methods cannot make (other content types, unknown paths):
        the answer as `response_type` (None: nothing), ApiException outside 2xx."""
        request = self.api_client.param_serialize(
            method, path, header_params={"Content-Type": content_type,
                                         "Accept": "application/json"},
            body=body, auth_settings=["BearerToken"])
        response = self.api_client.call_api(*request)
        response.read()
        return self.api_client.response_deserialize(
            response, {"2XX": response_type} if response_type else {}).data


def connect(port: int, token: str = TOKEN) -> client.ApiClient:
    config = client.Configuration(host=f"http://127.0.0.1:{port}",
                                  api_key={"authorization": f"Bearer {token}"})
    return client.ApiClient(config)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def poll(check: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "condition not reached before the deadline"
        time.sleep(0.02)


@dataclass
class Etcd:
    port: int
    proc: subprocess.Popen[bytes]
    start: Callable[[], None]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait()


@pytest.fixture
def start_etcd(tmp_path: Path) -> Iterator[Callable[[], Etcd]]:
    """A one-member etcd cluster on 127.0.0.1 (plain HTTP: the lab's members speak TLS,
    the storage on top is the same); `start` on the result starts it again after a stop,
    with its data."""
    running: list[Etcd] = []

    def start() -> Etcd:
        client_port, peer_port = free_port(), free_port()
        data = tmp_path / f"etcd-{client_port}"
        peer = f"http://127.0.0.1:{peer_port}"
        argv = ["/usr/bin/etcd", "--name", "lab", "--data-dir", str(data),
                "--listen-client-urls", f"http://127.0.0.1:{client_port}",
                "--advertise-client-urls", f"http://127.0.0.1:{client_port}",
                "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
                "--initial-cluster", f"lab={peer}", "--log-level", "warn", "--logger", "zap"]

        def launch() -> subprocess.Popen[bytes]:
            with (tmp_path / f"etcd-{client_port}.log").open("ab") as log:
                proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=log)

            def healthy() -> bool:
                assert proc.poll() is None, "etcd exited"
                try:
                    with socket.create_connection(("127.0.0.1", client_port), timeout=1) as s:
                        s.sendall(b"GET /health HTTP/1.0\r\n\r\n")
                        return b'"health":"true"' in s.recv(4096)
                except OSError:
                    return False

            poll(healthy)
            return proc

        etcd = Etcd(client_port, launch(), lambda: setattr(etcd, "proc", launch()))
        running.append(etcd)
        return etcd

    yield start
    for etcd in running:
        etcd.stop()


@pytest.fixture
def start_kubeapi(tmp_path: Path) -> Iterator[Callable[..., Kube]]:
    """Start servers (extra CLI arguments allowed); all are killed when the test ends."""
    running: list[tuple[subprocess.Popen[bytes], client.ApiClient]] = []

    def start(*args: str, port: int | None = None) -> Kube:
        port = port or free_port()
        log = tmp_path / f"kubeapi-{port}.log"
        with log.open("wb") as stderr:
            proc = subprocess.Popen(["/usr/bin/python3", str(SERVER), "--listen",
                                     f"127.0.0.1:{port}", "--token", TOKEN, *args],
                                    stdout=subprocess.DEVNULL, stderr=stderr)
        kube = Kube(port, connect(port), proc)
        running.append((proc, kube.api_client))

        def accepting() -> bool:
            assert proc.poll() is None, f"kubeapi exited: {log.read_text()}"
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
            except OSError:
                return False
            return True

        poll(accepting)
        return kube

    yield start
    for proc, api_client in running:
        api_client.close()
        proc.kill()
        proc.wait()

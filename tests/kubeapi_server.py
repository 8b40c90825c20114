"""A real lab Kubernetes API stand-in on 127.0.0.1 for tests, and the official client on it.

Used as a fixture by the tests of the stand-in itself and of the executor's drain.
"""

from __future__ import annotations

import socket
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from tests.waiting import poller

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


poll = poller(timeout=10, every=0.02)


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

"""planner.kube.official_client against a real TLS API server (the lab's front end, in front
of its datastore): every connection shares one TLS context, and that context still checks
the server's certificate and name as the client's own would."""

from __future__ import annotations

import base64
import ssl
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException
from urllib3.exceptions import MaxRetryError

from executor.drain import NodeOps
from planner.kube import official_client
from tests.kubeapi_server import Kube
from tests.lab import pki


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def kubeconfig(port: int, ca: pki.Pair, user: pki.Pair) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Config", "current-context": "lab",
            "clusters": [{"name": "lab", "cluster": {
                "server": f"https://127.0.0.1:{port}",
                "certificate-authority-data": b64(ca.cert_pem)}}],
            "users": [{"name": "admin", "user": {
                "client-certificate-data": b64(user.cert_pem),
                "client-key-data": b64(user.key_pem)}}],
            "contexts": [{"name": "lab", "context": {"cluster": "lab", "user": "admin"}}]}


@pytest.fixture
def tls_api(start_kubeapi: Callable[..., Kube], tmp_path: Path
            ) -> Callable[[tuple[str, ...]], tuple[int, pki.Pair, pki.Pair]]:
    """A datastore and a TLS front end whose serving certificate names `ips`: (port,
    server CA, admin client pair)."""
    def start(ips: tuple[str, ...]) -> tuple[int, pki.Pair, pki.Pair]:
        server_ca, client_ca = pki.make_ca("server-ca"), pki.make_ca("client-ca")
        admin = pki.issue(client_ca, "system:admin", org="system:masters", client=True)
        serving = pki.issue(server_ca, "kube-apiserver", ips=ips)
        serving.save(tmp_path, "serving")
        client_ca.save(tmp_path, "client-ca")
        store = start_kubeapi()
        front = start_kubeapi("--upstream", f"http://127.0.0.1:{store.port}",
                              "--tls-cert", str(tmp_path / "serving.crt"),
                              "--tls-key", str(tmp_path / "serving.key"),
                              "--client-ca", str(tmp_path / "client-ca.crt"))
        store.core.create_node(client.V1Node(metadata=client.V1ObjectMeta(name="wrk-1")))
        return front.port, server_ca, admin
    return start


def test_connections_share_one_tls_context_and_authenticate_with_the_client_certificate(
        tls_api: Callable[[tuple[str, ...]], tuple[int, pki.Pair, pki.Pair]]) -> None:
    port, server_ca, admin = tls_api(("127.0.0.1",))
    api = official_client(kubeconfig(port, server_ca, admin))
    pool = api.api_client.rest_client.pool_manager
    shared = pool.connection_pool_kw["ssl_context"]
    assert isinstance(shared, ssl.SSLContext) and shared.verify_mode == ssl.CERT_REQUIRED
    # The files urllib3 would load again for each new connection are not handed to it.
    assert not {"ca_certs", "cert_file", "key_file"} & {
        k for k, v in pool.connection_pool_kw.items() if v}
    # Eight requests at once: eight connections, all through the one context, each one
    # authenticated by the client certificate (the front end answers 401 otherwise).
    with ThreadPoolExecutor(8) as workers:
        names = list(workers.map(lambda _: api.read_node("wrk-1")["metadata"]["name"], range(8)))
    assert names == ["wrk-1"] * 8
    assert pool.connection_from_url(f"https://127.0.0.1:{port}").num_connections >= 2


@pytest.mark.parametrize("why", ["another CA", "a name the certificate does not cover"])
def test_a_server_the_kubeconfig_does_not_vouch_for_is_refused(
        tls_api: Callable[[tuple[str, ...]], tuple[int, pki.Pair, pki.Pair]],
        why: str) -> None:
    port, server_ca, admin = tls_api(("127.0.0.1",) if why == "another CA"
                                     else ("10.99.99.99",))
    ca = pki.make_ca("not-the-server-ca") if why == "another CA" else server_ca
    api = official_client(kubeconfig(port, ca, admin))
    with pytest.raises((MaxRetryError, ApiException)) as refused:
        api.read_node("wrk-1")
    assert "CERTIFICATE_VERIFY_FAILED" in str(refused.value)
    assert ("IP address mismatch" in str(refused.value)) == (why != "another CA")


def test_connections_opened_ahead_are_there_for_a_wave(
        tls_api: Callable[[tuple[str, ...]], tuple[int, pki.Pair, pki.Pair]]) -> None:
    """NodeOps.warm opens exactly as many connections as asked (each answer held until all
    came), and a wave of that many requests at once then opens none."""
    port, server_ca, admin = tls_api(("127.0.0.1",))
    api = official_client(kubeconfig(port, server_ca, admin))
    pool = api.api_client.rest_client.pool_manager.connection_from_url(
        f"https://127.0.0.1:{port}")
    NodeOps(api).warm(8)
    assert pool.num_connections == 8
    with ThreadPoolExecutor(8) as workers:
        names = list(workers.map(lambda _: api.read_node("wrk-1")["metadata"]["name"], range(8)))
    assert names == ["wrk-1"] * 8
    assert pool.num_connections == 8  # all eight served on connections opened ahead


@pytest.mark.filterwarnings("error")  # an exception left in one of its threads fails it
def test_opening_connections_ahead_against_an_api_that_is_down_is_harmless(
        start_kubeapi: Callable[..., Kube], tmp_path: Path) -> None:
    port = start_kubeapi().port  # plain HTTP: a TLS client's handshake fails at once
    api = official_client(kubeconfig(port, pki.make_ca("ca"), pki.issue(
        pki.make_ca("client-ca"), "admin", client=True)))
    NodeOps(api).warm(4)  # only logged, nothing raised, nothing left waiting

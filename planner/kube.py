"""The cluster's admin credentials and the Kubernetes API client built from them.

The engine writes an admin kubeconfig on every controller, pointing at 127.0.0.1; cargoship
reads it from the first reachable controller (over SSH, read-only) and points it at an
address the API certificate covers (api_server). The official client is created through a
factory held by the plan context, so tests can hand in another transport.
"""

from __future__ import annotations

import copy
import urllib.parse
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import yaml

from .credentials import is_credential_key
from .facts.distro import LAYOUTS
from .safeyaml import safe_load

# Keys of a kubeconfig user entry that are credentials: never shown, never in a plan.
CREDENTIAL_KEYS = frozenset({"token", "client-key-data", "client-key", "password",
                             "client-certificate-data"})

if TYPE_CHECKING:
    from .kube_bounds import BoundedPoolManager
    from .kube_core import CoreV1

ApiFactory = Callable[[dict[str, Any]], "CoreV1"]


def official_client(kubeconfig: dict[str, Any]) -> CoreV1:
    # Imported here: the client is slow to import and to build (tests/bench/FINDINGS.md,
    # "kubernetes client 37") and most plans never call the API.
    import kubernetes

    configuration = kubernetes.client.Configuration()
    kubernetes.config.load_kube_config_from_dict(  # type: ignore[no-untyped-call]
        kubeconfig, client_configuration=configuration)
    # No silent re-tries inside the client (each logs a warning and takes the time of a
    # request): every caller polls with its own deadline, an API restarting included.
    configuration.retries = 0
    # Connections are opened as needed; the client's default pool (5 per CPU of *this*
    # machine) is smaller than a rollout's needs (a request and a watch per worker in
    # flight), and a connection that finds the pool full is closed after one request:
    # a new TLS handshake for nearly every call.
    configuration.connection_pool_maxsize = 64
    api_client = kubernetes.client.ApiClient(configuration)
    api_client.rest_client.pool_manager = bounded_pool(configuration)
    from .kube_core import CoreV1  # not the generated CoreV1Api: kube_core.py says why

    return CoreV1(api_client)


def raw_get(api_client: Any, path: str, *, timeout: int | float,
            query: list[tuple[str, str]] | None = None,
            headers: dict[str, str] | None = None) -> Any:
    """GET a path no typed method covers (/readyz, /version) with the client's credentials
    and pool: urllib3's response, unread, as a typed method's with `_preload_content=False`;
    an answer outside 2xx raises the client's ApiException, as the typed methods do.

    Written against the client's generated-code API (major 37: `param_serialize`, then
    `call_api` with the URL built; it raises nothing on a status), in this one place."""
    from kubernetes.client.exceptions import ApiException

    method, url, header_params, body, post_params = api_client.param_serialize(
        "GET", path, query_params=query, header_params=dict(headers or {}),
        auth_settings=["BearerToken"])
    response = api_client.call_api(method, url, header_params, body, post_params,
                                   _request_timeout=timeout)
    if not 200 <= response.status <= 299:
        response.read()  # the body, for the exception's message
        raise ApiException.from_response(http_resp=response, body=None, data=None)
    return response.response


def bounded_pool(configuration: Any) -> BoundedPoolManager:
    """The client's connection pool: every answer bounded in time and bytes (kube_bounds),
    its connections sharing one TLS context.

    The client hands urllib3 the CA and client certificate as files, and urllib3 then
    builds a context and reads those files for every new connection: 6.5-8 ms of CPU per
    connection here, 3-3.7 ms with one context. A rollout at concurrency 8 opens most of
    its connections (a request and a watch per host) in the same instant, as its first
    wave of workers begins. The context is urllib3's own default one (hostname checked by
    OpenSSL, CERT_REQUIRED), loaded once. A proxy is never used: the kubeconfig comes from
    a host, and a host must not choose where cargoship's credentials go."""
    import ssl

    from urllib3.util.ssl_ import create_urllib3_context

    from .kube_bounds import BoundedPoolManager

    common: dict[str, Any] = {"num_pools": 4, "maxsize": configuration.connection_pool_maxsize,
                              "retries": configuration.retries}
    if not configuration.verify_ssl:
        return BoundedPoolManager(cert_reqs=ssl.CERT_NONE, **common)
    context = create_urllib3_context(cert_reqs=ssl.CERT_REQUIRED)
    if configuration.ssl_ca_cert:
        context.load_verify_locations(configuration.ssl_ca_cert)
    else:
        context.load_default_certs()
    if configuration.cert_file:
        context.load_cert_chain(configuration.cert_file, configuration.key_file)
    extra: dict[str, Any] = {}
    if configuration.assert_hostname is not None:
        extra["assert_hostname"] = configuration.assert_hostname
    if configuration.tls_server_name:
        extra["server_hostname"] = configuration.tls_server_name
    return BoundedPoolManager(cert_reqs=ssl.CERT_REQUIRED, ssl_context=context, **common,
                              **extra)


def admin_kubeconfig_path(distro: str) -> str:
    return f"{LAYOUTS[distro].config_dir}/{distro}.yaml"


class KubeconfigError(ValueError):
    pass


# What cargoship takes from a host's admin kubeconfig; everything else is dropped. A
# kubeconfig is a program as much as a file: `exec` and `auth-provider` run commands on the
# machine that loads it, `proxy-url` sends the credentials elsewhere, file references read
# the operator's own files, `insecure-skip-tls-verify` drops the server check. The admin
# kubeconfig comes from a controller, and root on one controller must not gain the
# operator's machine (where SSH keys to every host live) through it.
CLUSTER_KEYS = ("server", "certificate-authority-data")
USER_KEYS = ("client-certificate-data", "client-key-data", "token")
_B64 = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=\n\r")


def parse_admin(text: str) -> dict[str, Any]:
    """The admin kubeconfig as the engine wrote it, reduced to what cargoship uses (see
    CLUSTER_KEYS, USER_KEYS): one cluster, one user, one context, all named `default`."""
    try:
        data = safe_load(text)
    except yaml.YAMLError:
        raise KubeconfigError("admin kubeconfig is not valid YAML") from None
    try:
        cluster = data["clusters"][0]["cluster"]
        user = data["users"][0]["user"]
        data["contexts"][0]["context"]
        server = urllib.parse.urlsplit(cluster["server"])
    except (KeyError, IndexError, TypeError, ValueError, AttributeError):
        raise KubeconfigError("admin kubeconfig lacks a cluster, user or context") from None
    if server.scheme != "https" or not server.hostname:
        raise KubeconfigError(f"admin kubeconfig's server is not an https URL: "
                              f"{str(cluster['server'])[:80]!r}")
    kept_cluster = _kept(cluster, CLUSTER_KEYS, "cluster")
    kept_user = _kept(user, USER_KEYS, "user")
    if "certificate-authority-data" not in kept_cluster:
        raise KubeconfigError("admin kubeconfig has no inline CA (certificate-authority-"
                              "data): the API server could not be checked")
    if "token" not in kept_user and not {"client-certificate-data",
                                         "client-key-data"} <= kept_user.keys():
        dropped = sorted(k for k in user if k not in USER_KEYS)
        raise KubeconfigError("admin kubeconfig has no inline client certificate and key, "
                              "nor a token" + (f" (not used: {', '.join(dropped)})"
                                               if dropped else ""))
    return {"apiVersion": "v1", "kind": "Config", "preferences": {},
            "clusters": [{"name": "default", "cluster": kept_cluster}],
            "users": [{"name": "default", "user": kept_user}],
            "contexts": [{"name": "default",
                          "context": {"cluster": "default", "user": "default"}}],
            "current-context": "default"}


def _kept(entry: Any, keys: tuple[str, ...], what: str) -> dict[str, str]:
    if not isinstance(entry, dict):
        raise KubeconfigError(f"admin kubeconfig's {what} entry is not a mapping")
    kept: dict[str, str] = {}
    for key in keys:
        value = entry.get(key)
        if value is None:
            continue
        if not isinstance(value, str) or not value or len(value) > 1_000_000 or (
                key.endswith("-data") and not set(value) <= _B64):
            raise KubeconfigError(f"admin kubeconfig's {what}.{key} is not "
                                  + ("base64 data" if key.endswith("-data") else "a string"))
        kept[key] = value
    return kept


def _is_loopback(host: str | None) -> bool:
    return host in ("127.0.0.1", "localhost", "::1")


def own_address(ssh_address: str, addresses: list[str], node_ips: list[str],
                private_address: str | None) -> str:
    """A controller's own address, one its API certificate covers (the engines list the
    node's addresses in it): the SSH address when it is one of the host's, else the
    engine's node-ip, else the private address. An SSH address the host does not have (a
    NAT, a port forward, a loopback) is never taken for the API's."""
    if ssh_address in addresses and not _is_loopback(ssh_address):
        return ssh_address
    if node_ips:
        return node_ips[0]
    return private_address or ssh_address


def api_server(admin: dict[str, Any], configured: str | None, tls_sans: list[str],
               own: str) -> tuple[str, str]:
    """The API server URL to use for the cluster, and where it came from.

    The admin kubeconfig says https://127.0.0.1:6443: right on the controller, wrong
    anywhere else. Its certificate covers the tls-san entries and the node's own
    addresses, so the URL is (in this order) the configured one, the admin kubeconfig's
    when it is not a loopback address, the first tls-san, the controller's own address."""
    if configured:
        return configured.rstrip("/"), "options.kubeconfig.server"
    server = urllib.parse.urlsplit(str(admin["clusters"][0]["cluster"]["server"]))
    if not _is_loopback(server.hostname):
        return urllib.parse.urlunsplit(server), "the admin kubeconfig"
    if tls_sans:
        return _with_host(server, tls_sans[0]), "the engine's tls-san"
    return _with_host(server, own), "the controller's own address"


def _with_host(server: urllib.parse.SplitResult, host: str) -> str:
    host = f"[{host}]" if ":" in host else host
    netloc = f"{host}:{server.port}" if server.port else host
    return urllib.parse.urlunsplit(server._replace(netloc=netloc))


def with_server(admin: dict[str, Any], server: str) -> dict[str, Any]:
    config = copy.deepcopy(admin)
    config["clusters"][0]["cluster"]["server"] = server
    return config


# Values of a user entry shown as they are. Everything else in a user entry is masked:
# besides the keys above, credentials hide in auth-provider configs (id-token,
# refresh-token, client-secret), exec plugin env values and args, and names we can't know.
USER_PLAIN_KEYS = frozenset({"username", "as", "name", "command", "apiVersion",
                             "interactiveMode", "provideClusterInfo"})


def masked(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: ("***" if k in CREDENTIAL_KEYS or is_credential_key(k) else
                    [_masked_user_entry(u) for u in v] if k == "users" and isinstance(v, list)
                    else masked(v)) for k, v in value.items()}
    if isinstance(value, list):
        return [masked(v) for v in value]
    return value


def _masked_user_entry(entry: Any) -> Any:
    if not isinstance(entry, dict):
        return masked(entry)
    return {k: (_masked_user(v) if k == "user" else masked(v)) for k, v in entry.items()}


def _masked_user(value: Any, key: str | None = None) -> Any:
    if isinstance(value, dict):
        return {k: _masked_user(v, str(k)) for k, v in value.items()}
    if isinstance(value, list):
        return [_masked_user(v, key) for v in value]
    return value if value is None or key in USER_PLAIN_KEYS else "***"


def named_entries(admin: dict[str, Any], name: str) -> dict[str, dict[str, Any]]:
    """The cluster, user and context entries to merge, all under one name."""
    return {
        "clusters": {"name": name, "cluster": copy.deepcopy(admin["clusters"][0]["cluster"])},
        "users": {"name": name, "user": copy.deepcopy(admin["users"][0]["user"])},
        "contexts": {"name": name, "context": {"cluster": name, "user": name}},
    }


def merge(local: dict[str, Any] | None, entries: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """kubectl-compatible merge: replace same-named entries, keep every other one."""
    merged: dict[str, Any] = copy.deepcopy(local) if local else {
        "apiVersion": "v1", "kind": "Config", "preferences": {}}
    for section, entry in entries.items():
        kept = [e for e in merged.get(section) or [] if e.get("name") != entry["name"]]
        merged[section] = [*kept, entry]
    merged.setdefault("current-context", entries["contexts"]["name"])
    return merged

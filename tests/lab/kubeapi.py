"""The lab's stand-in for the Kubernetes REST API (core/v1 nodes and pods, policy/v1 PDBs).

No real API server can run in the lab. Every controller serves the API itself (a front
end), over TLS with the lab's CA and client-certificate authentication, as the real
kube-apiserver does (bearer tokens are accepted too). One more process on the first
controller, the lab's datastore (plain HTTP with a bearer token), is the lab's own view:
the tests and the kubelets read and write through it, and it keeps the injected faults.
Where the objects live depends on the lab's topology:

- etcd members (the default): in etcd. Each front end keeps a cache of its own member
  (--etcd-servers https://127.0.0.1:2379, kubeapi_etcdstore.py) and serves from it; the
  datastore is an etcd client of every member (--etcd-servers URL,URL,...) and holds
  nothing itself.
- an external datastore (--no-etcd): in the datastore's memory (--state-file to keep
  them), and the front ends forward every request to it (--upstream without
  --etcd-servers).

    /usr/bin/python3 kubeapi.py --listen 0.0.0.0:6444 --token TOKEN [--state-file PATH]
                                [--stale-after SECONDS] [--verbose]
                                [--etcd-servers URL,... --etcd-cafile CA
                                 --etcd-certfile CRT --etcd-keyfile KEY]
    /usr/bin/python3 kubeapi.py --listen 0.0.0.0:6443 --token TOKEN --upstream URL
                                --tls-cert CRT --tls-key KEY --client-ca CA
                                [--apiserver-args PATH] [--pod-log-dir DIR]
                                [--node-name NAME] [--stale-after SECONDS]
                                [--etcd-servers URL --etcd-cafile CA --etcd-certfile CRT
                                 --etcd-keyfile KEY]

A front end answers /readyz, /livez and /healthz itself (anonymous, as the real
system:public-info-viewer role allows). With --apiserver-args (a JSON
list of the kube-apiserver flags the engine built, engine_config.apiserver_args) it
first checks the API server's own config files (audit policy, admission configuration) and
exits 1 when they are invalid, as kube-apiserver does; runit then restarts it: a crash
loop. With --pod-log-dir its log goes to DIR/<restart count>.log, as the kubelet keeps a
static pod's logs. With --etcd-servers its /readyz etcd check, its writes and its reads of
the latest state go through the controller's own etcd member (kubeapi_etcd.py): no quorum
there, no readiness, no writes and no fresh reads.

This module is the HTTP side (auth, routing, discovery, framing); kubeapi_lang.py parses
selectors and patches; kubeapi_store.py holds the objects and their semantics, and
kubeapi_etcdstore.py the same over etcd; kubeapi_watch.py streams watches (`?watch=1`),
and relays them through front ends that forward;
kubeapi_views.py holds discovery and Tables; kubeapi_hostile.py holds injected faults
(errors, and hostile answers: wrong shapes, slow, endless, huge), which
kubeapi_hostile_serve.py serves on a front end. All run on the system Python with the
standard library only and import nothing from the repository, so the lab can copy them
onto a host.
"""

from __future__ import annotations

import argparse
import hmac
import http.client
import json
import ssl
import sys
import threading
import time
import traceback
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

# Run as a script, so its own directory is on sys.path and the siblings import by name.
from kubeapi_hostile import (
    CHECK,
    FRONT_END,
    HOSTILE,
    Faults,
    datastore_answer,
    event_shaper,
    faults_endpoint,
    unwritten,
)
from kubeapi_hostile_serve import serve as serve_hostile
from kubeapi_lang import patcher, selector
from kubeapi_store import KINDS, NODES, PODS, ApiError, Kind, Obj, Store, bad_request
from kubeapi_views import DISCOVERY, node_table
from kubeapi_watch import forward_watch, serve_watch, wants_watch


def no_such_path() -> ApiError:
    return ApiError(404, "NotFound", "the server could not find the requested resource", {})


def parse_path(path: str) -> tuple[Kind, str | None, str | None, str | None]:
    """/api/v1/... and /apis/policy/v1/..., optionally under namespaces/{ns}/, then
    {resource}[/{name}[/{subresource}]]: (kind, ns, name, subresource)."""
    parts = [unquote(p) for p in path.strip("/").split("/")]
    if parts[:2] == ["api", "v1"]:
        group, rest = "", parts[2:]
    elif parts[:3] == ["apis", "policy", "v1"]:
        group, rest = "policy", parts[3:]
    elif parts[:3] == ["apis", "helm.cattle.io", "v1"]:
        group, rest = "helm.cattle.io", parts[3:]
    elif parts[:3] == ["apis", "coordination.k8s.io", "v1"]:
        group, rest = "coordination.k8s.io", parts[3:]
    else:
        raise no_such_path()
    ns = None
    if len(rest) >= 3 and rest[0] == "namespaces":
        ns, rest = rest[1], rest[2:]
    kind = KINDS.get((group, rest[0])) if rest else None
    if kind is None or len(rest) > 3 or (ns is not None and not kind.namespaced):
        raise no_such_path()
    return kind, ns, rest[1] if len(rest) > 1 else None, rest[2] if len(rest) > 2 else None


def route(store: Store, method: str, path: str, query: dict[str, str], body: Any,
          ctype: str) -> tuple[int, Obj]:
    """Map a request onto the store."""
    kind, ns, name, sub = parse_path(path)
    # No resourceVersion: the latest state, a quorum read (kube-apiserver 1.30: storage/
    # etcd3/store.go Get and GetList); one given ("0": any) is served from the cache.
    fresh = query.get("resourceVersion", "") == ""
    if name is None:
        if method == "GET":  # a namespaced kind without a namespace lists all namespaces
            limit = int(query["limit"]) if query.get("limit", "").isdigit() else 0
            return 200, store.list_objects(kind, ns, selector(kind, query), limit,
                                           query.get("continue", ""), fresh)
        if method == "POST" and (ns is not None or not kind.namespaced):
            return 201, store.create(kind, ns or "", body)
    elif kind.namespaced and ns is None:
        raise no_such_path()
    elif sub is None or (sub == "status" and kind in (NODES, PODS)):
        if method == "GET":
            return 200, store.get(kind, ns or "", name, fresh)
        if method == "PATCH":
            return 200, store.patch(kind, ns or "", name, patcher(ctype, body),
                                    status=sub == "status")
        if method == "DELETE" and sub is None:
            return 200, store.delete(kind, ns or "", name)
    elif sub == "eviction" and kind is PODS:
        if method == "POST":
            code, answer = store.evict(ns or "", name, body)
            return int(code), answer
    else:
        raise no_such_path()
    raise ApiError(405, "MethodNotAllowed",
                   "the server does not allow this method on the requested resource")


class KubeServer(ThreadingHTTPServer):
    daemon_threads = True  # idle keep-alive connections must not hold the process open
    block_on_close = False
    request_queue_size = 128  # a burst of engines connecting at once must not hit SYN retries

    def __init__(self, address: tuple[str, int], store: Store | None, token: str,
                 verbose: bool, upstream: str | None = None,
                 tls: ssl.SSLContext | None = None):
        self.store, self.token, self.verbose = store, token.encode(), verbose
        self.upstream = urlsplit(upstream) if upstream else None
        self.tls = tls is not None
        self.faults = Faults()  # lab-injected errors and hostile answers (datastore only)
        self.node_name = ""  # a front end's controller (faults of kind readyz name it)
        self.ready_at = 0.0  # monotonic time from which /readyz may pass
        self.engine_state: Path | None = None  # the engine's READY file, if any
        self.etcd: Any = None  # kubeapi_etcd.LocalMember: the controller's own member
        self._engine_seen = False
        self.closing = threading.Event()  # open watches end when it is set
        # Idle keep-alive connections to the datastore. kube-apiserver holds its etcd
        # connections open; a new TCP connection (and a datastore thread) per request made
        # each request cost the machine the lab shares with the client about twice as much.
        self._upstream_idle: list[http.client.HTTPConnection] = []
        self._upstream_lock = threading.Lock()
        super().__init__(address, Handler)
        if tls is not None:
            # The handshake happens in the request's thread, not in accept().
            self.socket = tls.wrap_socket(self.socket, server_side=True,
                                          do_handshake_on_connect=False)

    def shutdown(self) -> None:
        self.closing.set()
        if self.store is not None:
            self.store.close()  # wakes the watches waiting for a change
        super().shutdown()

    def upstream_request(self, method: str, path: str, body: bytes | None,
                         headers: dict[str, str]) -> tuple[int, str, bytes, str | None]:
        """One request to the datastore on a kept-alive connection: (status, content type,
        body, X-Lab-Hostile header). A kept connection the datastore has closed meanwhile
        (it restarted) fails before any answer and is retried once on a new one; OSError
        when that fails too."""
        assert self.upstream is not None
        for attempt in (0, 1):
            with self._upstream_lock:
                conn = self._upstream_idle.pop() if self._upstream_idle and not attempt \
                    else None
            reused = conn is not None
            if conn is None:
                conn = http.client.HTTPConnection(self.upstream.hostname or "",
                                                  self.upstream.port, timeout=10)
            try:
                conn.request(method, path, body=body, headers=headers)
                response = conn.getresponse()
                data = response.read()
            except (OSError, http.client.HTTPException) as exc:
                conn.close()
                # A reset or EOF on a kept connection: the datastore closed it while idle.
                if reused and isinstance(exc, (ConnectionResetError, BrokenPipeError)):
                    continue
                raise OSError(str(exc) or type(exc).__name__) from None
            result = (response.status, response.getheader("Content-Type", "application/json"),
                      data, response.getheader(HOSTILE))
            if response.will_close:
                conn.close()
            else:
                with self._upstream_lock:
                    self._upstream_idle.append(conn)
            return result
        raise AssertionError("unreachable")

    def engine_ready(self) -> bool:
        if not self._engine_seen and self.engine_state is not None:
            self._engine_seen = self.engine_state.exists()
        return self._engine_seen or self.engine_state is None

    def handle_error(self, request: Any, client_address: Any) -> None:
        if self.verbose:  # mostly clients hanging up mid-request: noise unless asked for
            super().handle_error(request, client_address)

    def etcd_ok(self, faults: bool = False) -> tuple[bool, str, Obj | None]:
        """The API server's etcd check: can it reach its datastore? With `faults`, also the
        hostile fault the datastore has for this /readyz, if any."""
        if self.upstream is None:
            return True, "", None
        if self.etcd is not None:
            ok, why = self.etcd.check()
            if not ok:
                return False, why, None
        if self.store is not None:  # its objects are in its member; the datastore has faults
            return True, "", self.take_faults("GET", "/readyz", {}, None, "readyz")[1] \
                if faults else None
        try:
            conn = http.client.HTTPConnection(self.upstream.hostname or "", self.upstream.port,
                                              timeout=2)
            conn.request("GET", "/version", headers={
                "Authorization": f"Bearer {self.token.decode()}",
                **({FRONT_END: self.node_name, CHECK: "readyz"} if faults else {})})
            response = conn.getresponse()
            ok, hostile = response.status == 200, response.getheader(HOSTILE)
            conn.close()
            return ok, "" if ok else "etcd answered with an error", \
                json.loads(hostile) if hostile else None
        except (OSError, ValueError) as exc:
            return False, f"etcd unreachable: {exc}", None

    def take_faults(self, method: str, path: str, query: dict[str, str], payload: Any,
                    check: str | None = None) -> tuple[Obj | None, Obj | None]:
        """The error fault, else the hostile fault, this request meets (each used up once):
        the datastore's own, or (a front end serving from its member) asked of the
        datastore, which keeps the lab's faults. A datastore that does not answer has
        none to give."""
        if self.upstream is None:
            error = self.faults.take_error(method, path, payload)
            return error, None
        body = json.dumps({"method": method, "path": path, "query": query,
                           "payload": payload, "check": check}).encode()
        try:
            code, _, data, _ = self.upstream_request(
                "POST", "/lab/v1/faults/take", body,
                {"Authorization": f"Bearer {self.token.decode()}",
                 "Content-Type": "application/json", FRONT_END: self.node_name})
            taken = json.loads(data) if code == 200 else {}
        except (OSError, ValueError):
            taken = {}
        return taken.get("error"), taken.get("hostile")


HEALTH = ("/readyz", "/livez", "/healthz")


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive; every response carries a Content-Length
    # StreamRequestHandler.setup() sets TCP_NODELAY on the accepted socket when this is
    # true: without it a small request/response exchange can stall on delayed ACKs (~40 ms).
    disable_nagle_algorithm = True
    wbufsize = -1  # headers and body leave in one write (flushed after each request)
    server: KubeServer

    def _serve(self) -> None:
        # The body is read first, whatever happens next: an unread body would be parsed as
        # the next request on this keep-alive connection.
        try:
            body = self._read_body()
        except ValueError:
            self.close_connection = True  # the framing is unknown, so is the next request
            self._send(400, bad_request("invalid request body framing").status())
            return
        url = urlsplit(self.path)
        if self.command == "GET" and url.path.rstrip("/") in HEALTH:
            self._health(url.path.rstrip("/"), "verbose" in url.query)
            return
        hostile = None  # the hostile fault this request (from a front end) meets
        try:
            if not self._authenticated():
                raise ApiError(401, "Unauthorized", "Unauthorized")
            # A front end either forwards to the datastore (servers sharing an external
            # datastore) or serves from its own etcd member (store), as the datastore does.
            front = self.server.upstream is not None
            if front and self.server.store is None:
                self._forward(body)
                return
            query = {k: v[-1] for k, v in parse_qs(url.query, keep_blank_values=True).items()}
            if url.path == "/lab/v1/faults" and not front:
                self._send(*faults_endpoint(self.server.faults, self.command, body))
                return
            if url.path == "/lab/v1/faults/take" and not front and self.command == "POST":
                self._send(200, self._take(body))
                return
            if self.command == "GET" and url.path.rstrip("/") in {*DISCOVERY, "/api"}:
                if self.headers.get(CHECK) == "readyz":  # a front end's /readyz etcd check
                    hostile = self.server.faults.take_hostile("GET", "/readyz", {},
                                                              self.headers, None)
                self._send(200, self._discovery(url.path.rstrip("/")), hostile)
                return
            if "dryRun" in query:  # never pretend: a dry run here would really write
                raise bad_request("dryRun is not supported by the lab API")
            try:
                payload = json.loads(body) if body.strip() else None
            except ValueError as exc:
                raise bad_request(f"json parse error: {exc}") from None
            fault, hostile = self.server.take_faults(self.command, url.path, query, payload)
            if fault is not None:
                code = int(fault.get("code", 503))
                raise ApiError(code, str(fault.get("reason", "ServiceUnavailable")),
                               str(fault.get("message", "lab fault: the API is unavailable")))
            ctype = self.headers.get("Content-Type", "application/json").split(";")[0].strip()
            assert self.server.store is not None
            kind, ns, name, _ = parse_path(url.path)
            if not front:  # (a front end was given its hostile fault with the error)
                hostile = self.server.faults.take_hostile(self.command, url.path, query,
                                                          self.headers, self.server.store)
            if wants_watch(self.command, query) and name is None and (
                    hostile is None or hostile["mode"] == "shape"):
                # kubectl get nodes --watch asks for Tables: each event's object one then.
                tables = "as=Table" in self.headers.get("Accept", "") and kind is NODES
                serve_watch(self, self.server.store, kind, ns, query, self.server.closing,
                            node_table if tables else None, event_shaper(hostile))
                return
            # (A hostile watch: the list is the real answer the front end starts from.)
            if hostile is not None and hostile["params"].get("write") is False and \
                    hostile["kind"] in ("patch-node", "evict"):
                code, obj = unwritten(self.server.store, hostile, kind, ns, name)
            else:
                code, obj = route(self.server.store, self.command, url.path, query, payload,
                                  ctype)
            if "as=Table" in self.headers.get("Accept", "") and obj.get("kind") == "NodeList":
                obj = node_table(obj)
        except ApiError as exc:
            code, obj = exc.code, exc.status()
        except OSError as exc:  # the etcd member(s) the objects are in did not answer
            code, obj = 503, ApiError(503, "ServiceUnavailable", f"etcd unreachable: {exc}",
                                      {}).status()
        except Exception as exc:  # a bug here must not kill the connection or the server
            traceback.print_exc(file=sys.stderr)
            code, obj = 500, ApiError(500, "InternalError", f"Internal error occurred: {exc}",
                                      {}).status()
        self._send(code, obj, hostile)

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _serve

    def _authenticated(self) -> bool:
        # A client certificate the TLS layer verified against the lab CA is an identity
        # (the real API takes the user from its CN); otherwise a bearer token is needed.
        if self.server.tls and getattr(self.connection, "getpeercert", None) and \
                self.connection.getpeercert():
            return True
        scheme, _, token = self.headers.get("Authorization", "").partition(" ")
        return scheme.lower() == "bearer" and hmac.compare_digest(
            token.strip().encode(), self.server.token)

    def _health(self, path: str, verbose: bool) -> None:
        # The engine's own wait for its API server (from the host itself) meets no fault.
        ok, why, hostile = self.server.etcd_ok(not self.client_address[0].startswith(
            "127.")) if path == "/readyz" else (True, "", None)
        checks = ["[+]ping ok", "[+]log ok"]
        if path == "/readyz":
            checks.append("[+]etcd ok" if ok else f"[-]etcd failed: {why}")
            # A starting kube-apiserver serves, but its post-start hooks take a while.
            starting = time.monotonic() < self.server.ready_at
            checks.append("[-]poststarthook/start-apiextensions-controllers failed: "
                          "not finished" if starting else
                          "[+]poststarthook/start-apiextensions-controllers ok")
            ok = ok and not starting
            # The lab's own hook, so that the engine's "ready" event (written on its
            # READY) precedes any client seeing this API server ready: it passes once the
            # engine that started this API server has been READY (latched: the API server
            # outlives a later stop of an rke2 engine).
            engine = self.server.engine_ready()
            checks.append("[+]poststarthook/lab-engine-ready ok" if engine else
                          "[-]poststarthook/lab-engine-ready failed: not finished")
            ok = ok and engine
        name = path.strip("/")
        tail = f"{name} check passed" if ok else f"{name} check failed"
        text = ("\n".join([*checks, tail]) if verbose or not ok else "ok") + "\n"
        if hostile is not None:
            serve_hostile(self, hostile, {"code": 200 if ok else 500, "body": text,
                                          "content_type": "text/plain; charset=utf-8"},
                          self.server.closing)
            return
        data = text.encode()
        self.send_response(200 if ok else 500)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _forward(self, body: bytes) -> None:
        """Pass the request on to the datastore and its answer back, as it came."""
        upstream = self.server.upstream
        assert upstream is not None
        headers = {"Authorization": f"Bearer {self.server.token.decode()}",
                   "Content-Type": self.headers.get("Content-Type", "application/json"),
                   "Accept": self.headers.get("Accept", "application/json"),
                   "Host": self.headers.get("Host", ""), FRONT_END: self.server.node_name}

        def divert(hostile: str | None, data: bytes) -> bool:
            if hostile is None:
                return False
            serve_hostile(self, json.loads(hostile), data, self.server.closing)
            return True

        try:
            query = {k: v[-1] for k, v in parse_qs(urlsplit(self.path).query).items()}
            if wants_watch(self.command, query):  # streamed through, never buffered
                forward_watch(self, upstream.hostname or "", upstream.port or 80, headers,
                              self.server.closing, divert)
                return
            code, ctype, data, hostile = self.server.upstream_request(
                self.command, self.path, body or None, headers)
        except OSError as exc:
            self._send(503, ApiError(503, "ServiceUnavailable",
                                     f"etcd unreachable: {exc}", {}).status())
            return
        if divert(hostile, data):
            return
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def handle_expect_100(self) -> bool:
        ok = super().handle_expect_100()
        self.wfile.flush()  # the buffered writer would otherwise hold "100 Continue" back
        return ok

    def _discovery(self, path: str) -> Obj:
        if path == "/api":  # the address the client reached us on, as the real one says
            host = self.headers.get("Host") or "{}:{}".format(*self.server.server_address[:2])
            return {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs":
                    [{"clientCIDR": "0.0.0.0/0", "serverAddress": host}]}
        return DISCOVERY[path]

    def _read_body(self) -> bytes:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            chunks = []  # int() raises ValueError on a malformed size line
            while size := int(self.rfile.readline().split(b";")[0], 16):
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
            while self.rfile.readline().strip():
                pass  # trailer fields, up to the blank line
            return b"".join(chunks)
        length = int(self.headers.get("Content-Length") or 0)
        if length < 0:
            raise ValueError(length)
        return self.rfile.read(length)

    def _take(self, body: bytes) -> Obj:
        """/lab/v1/faults/take: the faults a front end's request meets (take_faults)."""
        try:
            request = json.loads(body)
            method, path = str(request["method"]), str(request["path"])
            query, payload, check = dict(request["query"]), request["payload"], \
                request.get("check")
        except (ValueError, KeyError, TypeError) as exc:
            raise bad_request(f"a fault take is not valid: {exc}") from None
        headers = {FRONT_END: self.headers.get(FRONT_END, ""),
                   **({CHECK: str(check)} if check else {})}
        faults = self.server.faults
        error = None if check else faults.take_error(method, path, payload)
        hostile = None if error is not None else faults.take_hostile(
            method, path, query, headers, self.server.store)
        return {"error": error, "hostile": hostile}

    def _send(self, code: int, obj: Obj, hostile: Obj | None = None) -> None:
        extra: dict[str, str] = {}
        if hostile is not None:
            obj, extra = datastore_answer(hostile, obj)
            if HOSTILE in extra and self.server.upstream is not None:
                # A front end serving from its member serves the hostile answer itself.
                serve_hostile(self, hostile, obj, self.server.closing)
                return
        data = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        for name, value in extra.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        if self.server.verbose:
            sys.stderr.write(f"{self.address_string()} - {format % args}\n")


def tls_context(cert: Path, key: Path, client_ca: Path) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    context.load_verify_locations(client_ca)
    context.verify_mode = ssl.CERT_OPTIONAL  # no certificate: a bearer token may do
    return context


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="kubeapi.py", description=__doc__.splitlines()[0])
    parser.add_argument("--listen", required=True, metavar="HOST:PORT")
    parser.add_argument("--token", required=True, help="the bearer token every request needs")
    parser.add_argument("--state-file", type=Path, help="persist objects here (JSON)")
    parser.add_argument("--stale-after", type=float, default=4.0, metavar="SECONDS",
                        help="a node with no status patch for this long reads Ready Unknown "
                             "(0: never)")
    parser.add_argument("--upstream", help="serve as a front end of this datastore URL")
    parser.add_argument("--tls-cert", type=Path)
    parser.add_argument("--tls-key", type=Path)
    parser.add_argument("--client-ca", type=Path)
    parser.add_argument("--apiserver-args", type=Path,
                        help="check the API server files these flags (JSON) name first")
    parser.add_argument("--pod-log-dir", type=Path)
    parser.add_argument("--node-name", default="", help="a front end's controller: faults "
                        "of kind readyz with this node meet its /readyz")
    parser.add_argument("--engine-state", type=Path, help="/readyz passes once this file "
                        "(the engine's READY) has existed")
    parser.add_argument("--timing-file", type=Path, help="lab-timing.json: its "
                        "apiserver_start is how long /readyz fails after start-up")
    parser.add_argument("--container-state", type=Path, help="rke2's static pod: record "
                        "its start here, as the container runtime does (engine_mirror.py)")
    parser.add_argument("--manifest", type=Path, help="the static pod's manifest (its uid)")
    parser.add_argument("--etcd-servers", help="the controller's own etcd member (https)")
    parser.add_argument("--etcd-cafile")
    parser.add_argument("--etcd-certfile")
    parser.add_argument("--etcd-keyfile")
    parser.add_argument("--verbose", action="store_true", help="log requests to stderr")
    return parser.parse_args(argv)


def check_apiserver_args(args_file: Path) -> None:
    """Raises engine_config.ConfigError when kube-apiserver would refuse to start with the
    flags the engine gave it."""
    import engine_config  # a sibling only the front ends need

    try:
        args = json.loads(args_file.read_text())
    except (OSError, ValueError):
        args = []  # the engine has not written them: no config files to check
    engine_config.check_apiserver_files(engine_config.apiserver_files(args))


def make_server(args: argparse.Namespace) -> KubeServer:
    host, _, port = args.listen.rpartition(":")
    tls = tls_context(args.tls_cert, args.tls_key, args.client_ca) if args.tls_cert else None
    store: Store | None = None
    members = None
    if args.etcd_servers:
        # The objects live in etcd: a front end's in its own member only, the lab's own
        # view's in whichever member answers.
        from kubeapi_etcd import REQUEST_TIMEOUT, Members
        from kubeapi_etcdstore import VIEW_TIMEOUT, EtcdStore

        urls = args.etcd_servers.split(",")
        members = Members(urls, args.etcd_cafile, args.etcd_certfile, args.etcd_keyfile,
                          VIEW_TIMEOUT if len(urls) > 1 else REQUEST_TIMEOUT)
        store = EtcdStore(args.stale_after, members, kubelets=not args.upstream)
    elif not args.upstream:
        store = Store(args.stale_after, args.state_file)
    server = KubeServer((host, int(port)), store.start() if store else None, args.token,
                        args.verbose, args.upstream, tls)
    server.engine_state = args.engine_state
    server.node_name = args.node_name
    server.etcd = members
    if args.timing_file:
        try:
            delay = float(json.loads(args.timing_file.read_text()).get("apiserver_start", 0))
        except (OSError, ValueError, AttributeError):
            delay = 0.0
        server.ready_at = time.monotonic() + delay
    return server


def _pod_log(directory: Path) -> None:
    """stderr to DIR/<n>.log, n counting the container's restarts, as the kubelet does. The
    kubelet's container garbage collection keeps one dead container per container name
    (MaxPerPodContainer 1: kubernetes pkg/kubelet/kuberuntime/kuberuntime_gc.go), and its
    log with it: only the last dead container's log stays beside the running one's."""
    directory.mkdir(parents=True, exist_ok=True)
    numbers = sorted(int(f.stem) for f in directory.glob("*.log") if f.stem.isdigit())
    count = numbers[-1] + 1 if numbers else 0
    for old in numbers[:-1]:
        (directory / f"{old}.log").unlink(missing_ok=True)
    log = open(directory / f"{count}.log", "a", buffering=1)
    sys.stderr = log


def _log(level: str, message: str) -> None:
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    print(f"{now} {level} kube-apiserver: {message}", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.pod_log_dir:
        _pod_log(args.pod_log_dir)
    if args.container_state and args.manifest:
        from engine_mirror import record_container_start  # the engine's modules are there

        record_container_start(args.container_state, args.manifest)
    if args.apiserver_args:
        try:
            check_apiserver_args(args.apiserver_args)
        except Exception as exc:
            _log("F", f"Error: {exc}")
            return 1
    server = make_server(args)
    if args.timing_file:
        import engine_config  # rke2's static pod, on a controller: the engine's modules are there

        # Its own process (rke2): the delay counts from the process's start, as the engine
        # counts its own, so the stand-in's Python start-up (~0.3 s while a rollout loads the
        # lab) is part of it rather than added. k3s's, inside the engine, starts counting
        # when the engine starts it.
        server.ready_at -= engine_config.process_age()
    _log("I", f"serving on {'https' if args.tls_cert else 'http'}://{args.listen}")
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())

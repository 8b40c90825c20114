"""The node operations' requests to the Kubernetes API: each bounded in time, a failure a
DrainError naming the node and what was asked, every wait cut short by a second
interrupt, and connections opened ahead of a wave of hosts. NodeOps (drain.py) is a
NodeApi that cordons, drains and uncordons.

The API object is the official client's `CoreV1Api`, handed in by the caller, with the
other controllers' API servers behind it: a request that one cannot carry (no connection,
or a 5xx such as an etcd member without quorum answers with) is sent to the next, and the
one that answered is asked first from then on. A node cordoned through a controller whose
member has just lost its quorum is then still uncordoned through another. Its answers
are read as plain JSON (`_preload_content=False`), as the watches read theirs: building the
client's model objects costs 2-3 ms of CPU per node or pod list, more than the request
itself, and a rollout's first wave sends some thirty requests at once.
"""

from __future__ import annotations

import json
import logging
import math
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import urllib3
from kubernetes.client.exceptions import ApiException

from planner.errors import CargoshipError
from planner.kube import raw_get
from planner.kube_bounds import HOLD, AnswerRefused
from planner.threads import start

from .api_shape import Obj

log = logging.getLogger("cargoship.executor")

# Bounds every single API request, in all (planner/kube_bounds.py): without it a stalled
# connection blocks forever and no drain or readiness timeout could fire.
REQUEST_TIMEOUT = 10
# Transport failures of the client (connection refused, read timeout, ...).
_UNREACHABLE = (urllib3.exceptions.HTTPError, OSError)
# What an API server says when it, not the request, is the problem: its storage failed
# (kube-apiserver: 500 for "etcdserver: request timed out", 504 for a deadline) or it is
# not serving (503); another controller's API server may carry the request.
_SERVER_TROUBLE = (500, 502, 503, 504)


class DrainError(CargoshipError):
    """Cordon, drain or uncordon failed; the message names the node, the pod(s) and why."""

    def __init__(self, node: str, message: str) -> None:
        self.node = node
        super().__init__(f"node {node}: {message}")


def api_message(exc: ApiException) -> str:
    """The Status message the API sent, with its causes (a PDB names itself only there)."""
    try:
        body = json.loads(exc.body or "")
    except (TypeError, ValueError):
        return f"HTTP {exc.status} {exc.reason}"
    if not isinstance(body, dict):
        return f"HTTP {exc.status} {exc.reason}"
    causes = [str(c.get("message")) for c in (body.get("details") or {}).get("causes") or []
              if isinstance(c, dict) and c.get("message")]
    message = str(body.get("message") or f"HTTP {exc.status} {exc.reason}")
    return f"{message} ({'; '.join(causes)})" if causes else message


class NodeApi:
    """The node operations' requests, through the official client's CoreV1Api `api`;
    `clock` and `sleep` pace their waits (tests pass their own)."""

    def __init__(self, api: Any, *, others: Sequence[Any] = (),
                 clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self._clock, self._sleep = clock, sleep
        # `api` first, then the other controllers' API servers (`others`); a request goes
        # to the one that last answered first (_in_turn).
        self._apis = [api, *others]
        self._answered = 0
        # Set by a second interrupt: drains stop waiting at once (the host fails, nothing
        # stopped on it). Requests in flight are ended too (kube_bounds).
        self.aborted = threading.Event()
        self._watchers: dict[int, Any] = {}  # by id: a Watcher is not hashable
        self._watchers_lock = threading.Lock()

    def interrupt(self) -> None:
        """End every drain's wait and every API request in flight now."""
        self.aborted.set()
        with self._watchers_lock:
            watchers = list(self._watchers.values())
        for watcher in watchers:
            watcher.close()
        for api in self._apis:
            client = getattr(api, "api_client", None)
            pool = getattr(getattr(client, "rest_client", None), "pool_manager", None)
            interrupt = getattr(pool, "interrupt", None)
            if interrupt is not None:
                interrupt()

    def _pause(self, node: str, seconds: float) -> None:
        """Sleep, in slices short enough that a second interrupt is heard within one."""
        slices = max(1, math.ceil(seconds / 0.5))
        for _ in range(slices):
            self._check_aborted(node)
            self._sleep(seconds / slices)
        self._check_aborted(node)

    def _check_aborted(self, node: str) -> None:
        if self.aborted.is_set():
            raise DrainError(node, "drain stopped: interrupted again")

    @property
    def api(self) -> Any:
        """The official client's CoreV1Api these operations use: the API server that
        answered last."""
        return self._apis[self._answered]

    def warm(self, count: int) -> None:
        """Open up to `count` connections to the API ahead of need, by as many requests
        at the same moment (GET /version: no object is read); they stay in the client's
        pool. A wave of hosts that begins together then spends no TLS handshake on its
        cordons and evictions (a new connection: 3-4 ms of CPU here, and a round trip or
        two on a real network). Best effort: a failure is only logged."""
        client = getattr(self.api, "api_client", None)
        if client is None or count <= 0:
            return
        # Each answer is held unread until all have come, so that no request can reuse
        # another's connection: `count` connections, not as many as happened to overlap.
        together = threading.Barrier(count)
        opened = time.monotonic()

        def one() -> None:
            try:
                # HOLD: handed over unread (kube_bounds), so each answer keeps its
                # connection until all have come.
                response = raw_get(client, "/version", headers={HOLD: "1"},
                                   timeout=REQUEST_TIMEOUT)
            except (ApiException, *_UNREACHABLE) as exc:
                together.abort()
                log.debug("opening an API connection ahead failed: %s", exc)
                return
            try:
                together.wait(REQUEST_TIMEOUT)
            except threading.BrokenBarrierError:
                pass
            try:
                # Read to its end, the connection is kept; a version that is no version
                # (more than 64 KiB) is not read on, and its connection is dropped.
                response.read(65536)
                if response.read(1):
                    response.close()
            except _UNREACHABLE as exc:
                log.debug("reading an answer on a connection opened ahead failed: %s", exc)
            finally:
                response.release_conn()

        threads = [start(one, name="cargoship-warm") for _ in range(count)]
        for thread in threads:
            thread.join(2 * REQUEST_TIMEOUT + 1)
        log.debug("%d API connection(s) opened ahead in %.3f s", count,
                  time.monotonic() - opened)

    def _in_turn(self) -> list[Any]:
        first = self._answered
        return self._apis[first:] + self._apis[:first]

    def _call(self, node: str, what: str, method: str, *args: Any,
              allow: tuple[int, ...] = (), read: bool = False, **kwargs: Any) -> Any:
        """One request (`method` of the CoreV1Api), bounded in time; failures become a
        DrainError naming `what`, except the HTTP codes in `allow`, which the caller
        handles. An API server that cannot carry it hands it to the next (see above).
        `read`: the answer's body, read here (a broken read is a failure of this server)."""
        apis = self._in_turn()
        failed: list[str] = []
        for turn, api in enumerate(apis):
            last = turn == len(apis) - 1
            try:
                answer = self._ask(getattr(api, method), read, args, kwargs)
            except ApiException as exc:
                if exc.status in allow:
                    raise
                failed.append(api_message(exc))
                if exc.status in _SERVER_TROUBLE and not last and not self.aborted.is_set():
                    self._next_server(node, what, api, failed[-1])
                    continue
                raise DrainError(node, f"{what} failed: {_said(failed)}") from exc
            except AnswerRefused as exc:
                self._check_aborted(node)  # cut off by a second interrupt: say that
                raise DrainError(node, f"{what} failed: the API's answer was cut off: "
                                       f"{exc}") from exc
            except _UNREACHABLE as exc:
                failed.append(f"API unreachable: {exc}")
                if not last and not self.aborted.is_set():
                    self._next_server(node, what, api, failed[-1])
                    continue
                raise DrainError(node, f"{what} failed: {_said(failed)}") from exc
            self._answered = self._apis.index(api)
            return answer
        raise AssertionError("unreachable: the last API server's failure is raised")

    @staticmethod
    def _ask(method: Callable[..., Any], read: bool, args: tuple[Any, ...],
             kwargs: dict[str, Any]) -> Any:
        if not read:
            return method(*args, _request_timeout=REQUEST_TIMEOUT, **kwargs)
        response = method(*args, _request_timeout=REQUEST_TIMEOUT, _preload_content=False,
                          **kwargs)
        try:
            return bytes(response.data)
        finally:
            response.release_conn()

    @staticmethod
    def _next_server(node: str, what: str, api: Any, why: str) -> None:
        log.warning("node %s: %s through the API server at %s failed (%s); asking the next "
                    "controller's", node, what, server_of(api), why)

    def _json(self, node: str, what: str, method: str, *args: Any,
              allow: tuple[int, ...] = (), **kwargs: Any) -> Obj:
        """_call, with the answer read as a JSON object (see the module's docstring)."""
        data = self._call(node, what, method, *args, allow=allow, read=True, **kwargs)
        try:
            obj = json.loads(data)
        except ValueError:
            obj = None
        if not isinstance(obj, dict):
            raise DrainError(node, f"{what} failed: the API's answer is not a JSON object")
        return obj


def server_of(api: Any) -> str:
    """The URL a CoreV1Api talks to, for messages."""
    configuration = getattr(getattr(api, "api_client", None), "configuration", None)
    return str(getattr(configuration, "host", None) or "?")


def _said(failed: list[str]) -> str:
    """The first API server's failure, and the last other one's when more were asked."""
    if len(failed) == 1:
        return failed[0]
    return f"{failed[0]} (and through {len(failed) - 1} other API server(s): {failed[-1]})"

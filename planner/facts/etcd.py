"""A controller's own etcd member and API server, as read on the host (planner/facts/sh/
etcd_look.sh): the member's status, the member list and /health from etcd's JSON gateway
on 127.0.0.1:2379 with the engine's own etcd client certificate, and the API server's
/readyz?verbose with the admin's. What the quorum gate (etcd_gate.py) decides from.

etcd 3.4's gateway (grpc-gateway over etcdserverpb) writes 64-bit numbers as strings:
member ids, raft indices. A status whose member has no leader carries
`"errors": ["etcdserver: no leader"]` and no `leader`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from ..hosts.batch import Fact, FactParseError, Output
from ..hosts.shell import script
from ..safetext import decimal
from .bounds import check_size
from .distro import DistroLayout

PART_BYTES = 16 << 10  # one answer: a member list of a few members is ~1 KiB
MAX_OUTPUT = 5 * (PART_BYTES + 64)
TIMEOUT = 2  # seconds per request to the member: a paused member answers nothing, ever
# /readyz's own etcd check may take kube-apiserver's 2 s before it answers that it failed.
READYZ_TIMEOUT = 5
_MAX_DIGITS = 20  # a uint64 in decimal


@dataclass(frozen=True)
class Member:
    id: str
    name: str
    peer_urls: tuple[str, ...]
    learner: bool = False


@dataclass(frozen=True)
class MemberStatus:
    member_id: str
    leader: str | None  # None: the member knows no leader
    raft_index: int
    applied_index: int
    errors: tuple[str, ...] = ()


@dataclass(frozen=True)
class EtcdLook:
    """`certs`: the member's client certificates are on the host (False: no embedded
    etcd here). Each part None when not read; its error says why."""

    certs: bool
    curl: bool = True
    status: MemberStatus | None = None
    status_error: str = ""
    members: tuple[Member, ...] | None = None
    members_error: str = ""
    healthy: bool | None = None
    health_error: str = ""
    readyz_ok: bool | None = None
    readyz_detail: str = ""


def etcd_fact(layout: DistroLayout, data_dir: str | None = None) -> Fact[EtcdLook]:
    """`data_dir`: where the engine keeps its data when its config moves it (`data-dir`);
    its etcd client certificates are there, not in the default place."""
    command = script("planner.facts", ("etcd_look.sh",), {
        "TLS_DIR": f"{data_dir or layout.data_dir}/server/tls", "TIMEOUT": TIMEOUT,
        "READYZ_TIMEOUT": READYZ_TIMEOUT,
        "PART_BYTES": PART_BYTES})
    return Fact("etcd", command, parse_etcd)


def _uint(value: Any, what: str) -> int:
    text = str(value) if value is not None else "0"
    number = decimal(text, _MAX_DIGITS)
    if number is None:
        raise FactParseError(f"etcd {what} is not a number: {text[:40]!r}")
    return number


def _id(value: Any, what: str) -> str:
    return str(_uint(value, what))


def _json(text: str, what: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        raise FactParseError(f"etcd {what} is not JSON: {text[:80]!r}") from None
    if not isinstance(value, dict):
        raise FactParseError(f"etcd {what} is not a JSON object")
    return value


def parse_status(text: str) -> MemberStatus:
    data = _json(text, "status")
    header = data.get("header")
    if not isinstance(header, dict):
        raise FactParseError("etcd status has no header")
    errors = data.get("errors") or []
    if not isinstance(errors, list):
        raise FactParseError("etcd status errors is not a list")
    leader = data.get("leader")
    leader_id = _id(leader, "leader") if leader not in (None, "", "0", 0) else None
    return MemberStatus(_id(header.get("member_id"), "member id"), leader_id,
                        _uint(data.get("raftIndex"), "raft index"),
                        # 3.4 reports the applied index; an older one only the committed.
                        _uint(data.get("raftAppliedIndex", data.get("raftIndex")),
                              "applied index"),
                        tuple(str(e)[:200] for e in errors[:5]))


def parse_members(text: str) -> tuple[Member, ...]:
    data = _json(text, "member list")
    listed = data.get("members")
    if not isinstance(listed, list) or not listed:
        raise FactParseError("etcd member list has no members")
    out = []
    for item in listed:
        if not isinstance(item, dict):
            raise FactParseError("etcd member list holds a non-object")
        urls = item.get("peerURLs") or []
        out.append(Member(_id(item.get("ID"), "member id"), str(item.get("name") or "")[:100],
                          tuple(str(u)[:200] for u in urls[:5]) if isinstance(urls, list)
                          else (), bool(item.get("isLearner"))))
    return tuple(out)


def _readyz(text: str) -> tuple[bool, str]:
    failed = [p.strip() for p in text.split("[-]")[1:]]
    if "readyz check passed" in text and not failed:
        return True, "ok"
    # kube-apiserver names its etcd check `etcd`, and since 1.26 also `etcd-readiness`.
    checks = [f"[-]{p.split(' [+]')[0].strip()[:160]}" for p in failed]
    return False, "; ".join(checks[:4]) or text.strip()[:160] or "no answer"


def parse_etcd(out: Output) -> EtcdLook:
    text = check_size(out, MAX_OUTPUT, "the etcd look")
    lines = text.splitlines()
    head = lines[0].strip() if lines else ""
    if head not in ("etcd certs", "etcd none", "etcd no-curl"):
        raise FactParseError(f"unreadable etcd look: {head[:80]!r}")
    parts: dict[str, tuple[str, int | None]] = {}
    for line in lines[1:]:
        if not line.startswith("== "):
            continue
        name, _, rest = line[3:].partition(" ")
        body, marker, rc = rest.rstrip().rpartition(" cs-rc=")
        parts[name] = (body.strip(), decimal(rc, 3) if marker else None)
    # `no-curl`: the certificates are there, the program to read the member with is not.
    look: dict[str, Any] = {"certs": head != "etcd none", "curl": head != "etcd no-curl"}

    def read(name: str) -> tuple[str | None, str]:
        """(answer, "") or (None, why not)."""
        if name not in parts:
            return None, "not read"
        body, code = parts[name]
        if code is None:
            return None, f"answer longer than {PART_BYTES} bytes"
        if code != 0:
            return None, _curl_error(body, code)
        return body, ""

    answer, look["status_error"] = read("status")
    if answer is not None:
        look["status"] = parse_status(answer)
    answer, look["members_error"] = read("members")
    if answer is not None:
        look["members"] = parse_members(answer)
    answer, look["health_error"] = read("health")
    if answer is not None:
        look["healthy"] = _json(answer, "health").get("health") in ("true", True)
    if "readyz" in parts:
        text, code = parts["readyz"]
        # curl -sS without --fail: a 500 from /readyz is its body, status 0.
        look["readyz_ok"], look["readyz_detail"] = _readyz(text) if code == 0 else (
            False, _curl_error(text, code) if code is not None else "answer too long")
    return EtcdLook(**look)


def _curl_error(body: str, code: int) -> str:
    if code == 28:
        return f"no answer within {TIMEOUT} s"
    if code == 7:
        return "connection refused (not running)"
    return (body.removeprefix("curl: ").strip()[:160] or f"curl exited {code}")

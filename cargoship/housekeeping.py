"""Commands around plan and apply: validate (offline), history and force-unlock. Each
reads only what it uses: validate no secret and no key, force-unlock no secret, history
secrets only to tell whether the hosts still match."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from cargoship import json_output
from planner import history
from planner.config import ClusterConfig, load_config
from planner.config.secrets import Unresolved
from planner.errors import CargoshipError, ConfigError
from planner.facts.lock_holder import LockState
from planner.hosts.ssh import ConnectOptions
from planner.make import connected, make_plan
from planner.plan import codec
from planner.plan.desired import from_desired
from planner.plan.model import HostRef
from planner.render import printable
from planner.safetext import tcp_port


def _unresolved(value: Any) -> list[str]:
    if isinstance(value, Unresolved):
        return [value.source] if value.source != "inline" else []
    if isinstance(value, dict):
        return [s for v in value.values() for s in _unresolved(v)]
    if isinstance(value, list):
        return [s for v in value for s in _unresolved(v)]
    return []


def validate(path: Path) -> int:
    config = load_config(path, secrets=False, keys=False)
    print(f"{path}: valid ({len(config.hosts)} host(s), "
          f"{config.engine.distro} {config.engine.version})")
    # Offline: nothing was read; say what plan and apply will need, so a missing variable
    # shows up now rather than on the CI runner.
    needs = sorted({s.replace("env:", "environment variable ").replace("file:", "secret file ")
                    for s in _unresolved(config.engine_config)})
    keys = sorted({str(h.ssh.key_path) for h in config.hosts if h.ssh.key_path})
    if needs:
        print("plan and apply will read: " + ", ".join(needs))
    if keys:
        print("and connect with the SSH key(s): " + ", ".join(keys))
    return 0


def validate_json(path: Path) -> int:
    try:
        config = load_config(path, secrets=False, keys=False)  # offline, like validate
    except ConfigError as exc:
        json_output.emit(json_output.validate(path, None, list(exc.problems)))
        raise
    json_output.emit(json_output.validate(path, config, []))
    return 0


def history_command(path: Path, as_json: bool = False,
                    allowed_signers: Path | None = None) -> int:
    config = load_config(path, secrets=False)
    if allowed_signers is not None and not allowed_signers.is_file():
        raise CargoshipError(f"{allowed_signers}: no such allowed-signers file")
    options = ConnectOptions(connect_timeout=config.options.connect_timeout)
    with connected(config, options) as ctx:
        entries = history.collect(ctx, _signature_check(allowed_signers))
    pending, still, unread = _still_match(path, options)
    if as_json:
        problems = unread + [f"{ctx.label(p) or ''}: {p.text}" for p in ctx.problems]
        json_output.emit(json_output.history(config, entries, pending, problems))
        return 0
    lines: list[str] = []
    if ctx.problems:
        lines += [f"  x {ctx.label(problem) or ''}: {problem.text}" for problem in ctx.problems]
        lines.append("  (some hosts could not be read)")
    if not entries:
        lines.append("No apply records on these hosts.")
    for entry in entries:
        if entry.signers:
            signed = f", signed by {', '.join(entry.signers)} (verified)"
        elif entry.signatures:
            signed = (f", {entry.signatures} signature(s) not verified"
                      + ("" if allowed_signers else " (history --allowed-signers FILE)"))
        else:
            signed = ""
        lines.append(f"plan {entry.plan_id}  {entry.state}  applied {entry.applied_at} by "
                     f"{entry.applied_by}{signed}")
        lines += [f"    unverified: {why}" for why in entry.unverified_because]
        lines += [f"    {host}: {status}" for host, status in sorted(entry.outcomes.items(),
                                                                     key=lambda i: i[0].key)]
        lines += [f"    {where_of(c.get('host'))}: {c.get('action')} {c.get('target') or ''}: "
                  f"{c.get('status')}" for c in entry.changes]
    lines.append("\n" + still)
    # Records come from the hosts: their text is shown, never obeyed by a terminal.
    print(printable("\n".join(lines)))
    return 0


def _signature_check(allowed: Path | None) -> history.SignatureCheck | None:
    """digest, a record's signature -> the principal an allowed-signers file vouches for."""
    if allowed is None:
        return None
    from planner.plan import signing
    from planner.plan.model import Signature

    def check(digest: str, raw: dict[str, Any]) -> str | None:
        try:
            signature = Signature(str(raw["key"]), "", str(raw.get("signed_at", "")),
                                  str(raw["signature"]))
        except KeyError:
            return None
        verdict = signing.verify(digest, signature, allowed)
        return verdict.principal if verdict.valid else None

    return check


def where_of(host: Any) -> str:
    """A host of a record ({name, address, port}) as people read it; null is local. A
    record is any host's or editor's text: a port that is no port is shown as it is, and
    never stops the listing of the others (history reads every host's records)."""
    if not isinstance(host, dict):
        return "local"
    if "address" not in host:
        return str(host.get("name"))
    name, address, given = str(host.get("name")), str(host["address"]), host.get("port")
    number = tcp_port(given)
    if number is not None:
        return str(HostRef(name, address, number))
    return f"{name} ({address}, port {str(given)[:20]!r}: not a port)"


def _still_match(path: Path, options: ConnectOptions) -> tuple[int | None, str, list[str]]:
    """(changes pending or None if unknown, a sentence, why unknown). Whether the hosts
    match the config needs its secrets (registries.yaml holds them): without them the
    records are still listed."""
    try:
        full = load_config(path)
    except ConfigError as exc:
        return None, (f"Whether the hosts still match the desired config was not checked: "
                      f"{exc.problems[0]}"), [str(exc.problems[0])]
    now = make_plan(full, options).plan
    if now.problems:
        return None, "Whether the hosts still match is unknown: some hosts could not be read.", \
            [str(n) for n in now.problems]
    if not now.changes:
        return 0, "The hosts match the desired config now.", []
    return len(now.changes), (f"The hosts differ from the desired config ({len(now.changes)} "
                              "change(s) pending) now."), []


def _lock_config(path: Path) -> ClusterConfig:
    """force-unlock -c takes the cluster config, or a plan file (apply's hint names the
    plan: an apply may run where the cluster.yaml is not)."""
    head = path.read_bytes()[:4096] if path.is_file() else b""
    if head.lstrip().startswith(b"{"):
        plan = codec.read(path)
        return from_desired(plan.desired, bytes.fromhex(plan.salt), str(path), secrets=False)
    return load_config(path, secrets=False)


def force_unlock_command(path: Path, lock_id: str, confirmed: bool) -> int:
    from executor.unlock import force_unlock_all

    def confirm(holders: list[tuple[str, LockState]]) -> bool:
        names = ", ".join(label for label, _ in holders)
        print(printable(f"Lock {lock_id} on {len(holders)} host(s) ({names}): "
                        f"{holders[0][1].describe()}"))
        if confirmed:
            return True
        if not sys.stdin.isatty():
            raise CargoshipError("refusing to remove the lock without --confirm (stdin is not "
                                 "a terminal to ask on); nothing was removed")
        print("Remove it only if that run is dead: a live run would go on unprotected.")
        return input("Remove it? Only 'yes' is accepted: ").strip() == "yes"

    removed = force_unlock_all(_lock_config(path), lock_id, confirm)
    if not removed:
        raise CargoshipError(f"no host holds lock {lock_id}; nothing was removed")
    print(f"Removed lock {lock_id} from {len(removed)} host(s): {', '.join(removed)}")
    return 0

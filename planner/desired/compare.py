"""Compare a desired file with what a host has: structure decides, text is for people.

Two files that parse to the same structure are equal, whatever their key order or
formatting. The diff shown to people is a unified diff of both sides dumped the same way,
with every secret masked; whether a masked secret changed is still visible.
"""

from __future__ import annotations

import difflib
import hashlib
import hmac
from dataclasses import dataclass
from typing import Any

import yaml

from ..config.secrets import Secret
from ..credentials import is_credential_key
from ..facts.file_reads import LiveFile
from ..plan.model import KeyChange
from ..safeyaml import YamlTooLarge, safe_load
from .engine_files import DesiredFile, dump_yaml
from .keys import key_changes

SENSITIVE_KEYS = frozenset({"password", "auth", "identity_token", "token"})
MASK, MASK_CHANGED = "***", "*** (changed)"


@dataclass(frozen=True)
class FileChange:
    path: str
    action: str  # "create", "update", "delete"
    before: str | None
    after: str | None
    diff: str
    structure: tuple[str, ...]  # deepdiff's account, paths only (no values)
    # What changed by key path, from the same masked views the diff shows.
    keys: tuple[KeyChange, ...] = ()


def file_digest(content: bytes, salt: bytes) -> str:
    """Salted, so a digest of a file holding a credential can't be looked up or guessed at."""
    return "hmac-sha256:" + hmac.new(salt, content, hashlib.sha256).hexdigest()


def normalize(kind: str, text: str) -> Any:
    data = safe_load(text)
    if kind == "chart" and isinstance(data, dict):
        spec = data.get("spec")
        if isinstance(spec, dict) and isinstance(spec.get("valuesContent"), str):
            spec = {**spec, "valuesContent": safe_load(spec["valuesContent"])}
            data = {**data, "spec": spec}
    return data


def shown_desired(desired: DesiredFile) -> str:
    """The desired file as every diff shows it (secrets masked): the text a reviewer's "+"
    lines must come from, whoever checks them (planner.plan.verify)."""
    return _dump(shown_structure(desired))


def shown_structure(desired: DesiredFile) -> Any:
    """The structure behind shown_desired: what key changes' "after" values come from."""
    return _masked(_structured(desired.kind, desired.data), None)


def compare(desired: DesiredFile, live: LiveFile, salt: bytes) -> FileChange | None:
    content = desired.content().encode()
    after = file_digest(content, salt)
    if live.exists and live.content == content and not _metadata_note(desired, live):
        return None  # the very bytes (most hosts, most plans): no parse, no diff to find
    shown_after = _masked(_structured(desired.kind, desired.data), None)
    if not live.exists:
        diff = _unified(desired.path, "", _dump(shown_after), f"(absent) -> mode "
                                                              f"{desired.mode:o}, owner "
                                                              f"{desired.owner} (uid:gid)")
        return FileChange(desired.path, "create", None, after, diff, ("created",),
                          key_changes(None, shown_after))
    before = file_digest(live.content, salt)
    try:
        current = normalize(desired.kind, live.content.decode())
    except (UnicodeDecodeError, yaml.YAMLError) as exc:
        why = f"refused: {exc}" if isinstance(exc, YamlTooLarge) else "is not valid YAML"
        note = f"current content {why} ({len(live.content)} bytes, not shown)"
        diff = _unified(desired.path, "", _dump(shown_after), note)
        # The current side is not shown, so neither are its keys: what it will hold is.
        return FileChange(desired.path, "update", before, after, diff, ("unparseable",),
                          key_changes(None, shown_after))
    mode_note = _metadata_note(desired, live)
    structure = _structure(current, normalize(desired.kind, desired.content()))
    if not structure and not mode_note:
        return None
    wanted_shown = _structured(desired.kind, desired.data)
    shown_before = _masked(current, wanted_shown, before=True)
    shown_after = _masked(wanted_shown, current)
    diff = _unified(desired.path, _dump(shown_before), _dump(shown_after), mode_note)
    return FileChange(desired.path, "update", before, after, diff,
                      structure or (mode_note,), key_changes(shown_before, shown_after))


def _metadata_note(desired: DesiredFile, live: LiveFile) -> str:
    """Mode and owner are part of the file: a credential readable by others is drift."""
    notes = []
    if live.mode != desired.mode:
        notes.append(f"mode {live.mode or 0:o} -> {desired.mode:o}")
    if live.owner != desired.owner:
        notes.append(f"owner {live.owner or '?'} -> {desired.owner} (uid:gid)")
    return ", ".join(notes)


def deletion(path: str) -> FileChange:
    """A file cargoship created that is no longer desired (its content was not read)."""
    diff = f"--- {path}\n+++ (deleted)\n# no longer desired: cargoship created it\n"
    return FileChange(path, "delete", "present", None, diff, ("deleted",))


def _structured(kind: str, data: Any) -> Any:
    """The desired side as `normalize` reads a live file: chart values as a mapping, so the
    diff and the key summary compare values with values, not text with a mapping."""
    if kind == "chart" and isinstance(data, dict):
        spec = data.get("spec")
        if isinstance(spec, dict) and isinstance(spec.get("valuesContent"), str):
            return {**data, "spec": {**spec, "valuesContent": safe_load(
                spec["valuesContent"])}}
    return data


def _structure(current: Any, wanted: Any) -> tuple[str, ...]:
    # deepdiff costs ~45 ms to import: only once a host's file is in hand to compare.
    from deepdiff import DeepDiff

    found = DeepDiff(current, wanted)  # values stay out of what we print: paths only
    lines = []
    for kind, items in sorted(found.items()):
        for path in sorted(str(p) for p in items):
            lines.append(f"{kind.replace('_', ' ')}: {path}")
    return tuple(lines)


def _masked(data: Any, other: Any, before: bool = False, key: str | None = None) -> Any:
    """A copy of `data` with secrets masked; `other` is the opposite side, to say "changed"."""
    secret_here = isinstance(data, Secret) or isinstance(other, Secret)
    if secret_here or ((key in SENSITIVE_KEYS or is_credential_key(key))
                       and isinstance(data, str | int | float | bytes)):
        mine = data.reveal() if isinstance(data, Secret) else data
        theirs = other.reveal() if isinstance(other, Secret) else other
        return MASK if before or theirs is None or mine == theirs else MASK_CHANGED
    if isinstance(data, dict):
        peer = other if isinstance(other, dict) else {}
        return {k: _masked(v, peer.get(k), before, str(k)) for k, v in data.items()}
    if isinstance(data, list):
        peer_list = other if isinstance(other, list) else []
        return [_masked(v, peer_list[i] if i < len(peer_list) else None, before)
                for i, v in enumerate(data)]
    return data


def _dump(data: Any) -> str:
    return dump_yaml(data, sort_keys=True) if data is not None else ""


def _unified(path: str, before: str, after: str, note: str) -> str:
    lines = difflib.unified_diff(before.splitlines(keepends=True),
                                 after.splitlines(keepends=True), fromfile=f"{path} (live)",
                                 tofile=f"{path} (desired)")
    text = "".join(lines)
    return text + (f"# {note}\n" if note else "")

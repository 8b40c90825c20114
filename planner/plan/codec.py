"""The plan file: JSON, validated against schemas/plan.schema.json on write and on read.

Checked strictly on read, in this order, each failure one line naming the file: size, JSON
syntax, format version (an unknown major is refused before the schema, whose shape may
differ between majors), schema, integrity digest. The digest is sha256 over the canonical
JSON (sorted keys, no whitespace) of everything except the digest itself.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import stat
from dataclasses import asdict
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

import schemas

from ..config.yamlio import format_path
from ..errors import CargoshipError
from ..localfiles import atomic_write
from ..safetext import decimal, json_escaped
from . import verify
from .desired import config_form
from .model import (
    FORMAT_VERSION,
    Change,
    HostIdentity,
    HostRef,
    KeyChange,
    Note,
    Notice,
    PhaseOutcome,
    Plan,
    Signature,
    Unassessed,
)

if TYPE_CHECKING:
    import jsonschema

PLAN_SCHEMA = "plan.schema.json"
MAX_PLAN_BYTES = 64 << 20


class PlanFileError(CargoshipError):
    def __init__(self, path: Path | str, message: str) -> None:
        super().__init__(f"{path}: {message}")


def canonical(data: dict[str, Any]) -> bytes:
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


UNDIGESTED = frozenset({"digest", "signatures"})


def digest_of(data: dict[str, Any]) -> str:
    body = {k: v for k, v in data.items() if k not in UNDIGESTED}
    return "sha256:" + hashlib.sha256(canonical(body)).hexdigest()


def to_dict(plan: Plan) -> dict[str, Any]:
    # Through JSON once: tuples become lists, exactly what a reader will see.
    data: dict[str, Any] = json.loads(json.dumps(asdict(plan)))
    data["summary"] = plan.summary
    if _minor(plan.format_version) >= 1:
        # Derived like the summary. A plan of an older minor is written as it was: its
        # digest, and so its signatures, stay the same.
        for phase, out in zip(plan.phases, data["phases"], strict=True):
            out["hosts"] = _host_counts(plan, phase)
    data["digest"] = digest_of(data)
    return data


def from_dict(data: dict[str, Any]) -> Plan:
    """Build the model from a dict that already passed the schema and digest checks."""
    return Plan(
        plan_id=data["plan_id"],
        created_at=data["created_at"],
        created_by=data["created_by"],
        cargoship_version=data["cargoship_version"],
        config_digest=data["config_digest"],
        cluster=data["cluster"],
        desired=data["desired"],
        hosts=tuple(HostIdentity(**h) for h in data["hosts"]),
        phases=tuple(PhaseOutcome(**{**{k: v for k, v in p.items() if k != "hosts"},
                                     "findings": tuple(Note(host_ref(n["host"]), n["text"])
                                                       for n in p["findings"])})
                     for p in data["phases"]),
        changes=tuple(Change(**{**c, "host": host_ref(c["host"]), "key_changes": tuple(
            KeyChange(**k) for k in c.get("key_changes", []))}) for c in data["changes"]),
        unassessed=tuple(Unassessed(**{**u, "host": host_ref(u["host"])})
                         for u in data["unassessed"]),
        warnings=tuple(_notice(n) for n in data["warnings"]),
        problems=tuple(_notice(n) for n in data["problems"]),
        salt=data["salt"],
        seconds=data["seconds"],
        applyable=data["applyable"],
        complete=data["complete"],
        format_version=data["format_version"],
        signatures=tuple(Signature(**s) for s in data.get("signatures", [])),
    )


def _minor(version: str) -> int:
    minor = version.split(".")[1] if version.count(".") == 1 else ""
    return decimal(minor) or 0


def _host_counts(plan: Plan, phase: PhaseOutcome) -> dict[str, int] | None:
    counts = plan.host_counts(phase)
    return None if counts is None else counts.as_counts()


def host_ref(data: dict[str, Any] | None) -> HostRef | None:
    return None if data is None else HostRef(data["name"], data["address"], data["port"])


def _notice(data: dict[str, Any]) -> Notice:
    return Notice(host_ref(data["host"]), data["phase"], data["text"])


@cache
def _validators() -> tuple[jsonschema.Draft202012Validator, jsonschema.Draft202012Validator]:
    """The plan schema, and the cluster schema's engineConfig. The plan schema refers to the
    cluster schema's definitions, so a plan's desired state obeys the config's rules."""
    # jsonschema costs ~110 ms to import: only when a plan is written or read, never
    # before a plan has reached its hosts.
    import jsonschema
    from referencing import Registry, Resource

    plan, cluster = schemas.load(PLAN_SCHEMA), schemas.load(schemas.CLUSTER_SCHEMA)
    registry: Registry[Any] = Registry().with_resources(
        (schema["$id"], Resource.from_contents(schema)) for schema in (plan, cluster))
    checker = jsonschema.Draft202012Validator.FORMAT_CHECKER
    return (jsonschema.Draft202012Validator(plan, registry=registry, format_checker=checker),
            jsonschema.Draft202012Validator({"$ref": cluster["$id"] + "#/$defs/engineConfig"},
                                            registry=registry, format_checker=checker))


def _validate(path: Path | str, data: Any) -> None:
    plan_validator, engine_config_validator = _validators()
    _raise_first(path, (), plan_validator, data)
    # Held to the rules the config was: an edited plan must not carry a chart name or a
    # value the config schema would have refused (a path out of the engine directories).
    _raise_first(path, ("desired", "engineConfig"), engine_config_validator,
                 config_form(data["desired"]["engineConfig"]))


def _raise_first(path: Path | str, prefix: tuple[str, ...],
                 validator: jsonschema.Draft202012Validator, data: Any) -> None:
    from jsonschema.exceptions import best_match  # loaded by _validators already

    from ..config.schema_errors import describe_error

    error = best_match(validator.iter_errors(data))
    if error is not None:
        # Phrased as config errors are, and like them never echoing a value under a
        # secret's key.
        at, message = describe_error(error)
        where = format_path((*prefix, *at)) or "(top)"
        raise PlanFileError(path, f"not a valid plan file: {where}: {message[:200]}")


def dumps(plan: Plan) -> str:
    data = to_dict(plan)
    _validate("<plan>", data)  # a plan we can't read back must never be written
    # Host text (a diff, a finding) may carry terminal escapes or bidi overrides: a plan file
    # is read in editors and pull requests, so they are escaped, never written raw.
    return json_escaped(json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False)) + "\n"


def write(plan: Plan, path: Path) -> None:
    atomic_write(path, dumps(plan).encode("utf-8"))


def loads(text: str | bytes, path: Path | str = "<plan>") -> Plan:
    if len(text) > MAX_PLAN_BYTES:
        raise PlanFileError(path, f"larger than {MAX_PLAN_BYTES >> 20} MiB; not a plan file")
    try:
        data = json.loads(text)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        where = f" at line {exc.lineno} column {exc.colno}" if isinstance(
            exc, json.JSONDecodeError) else ""
        raise PlanFileError(path, f"not valid JSON{where} (truncated or edited?)") from None
    except RecursionError:
        raise PlanFileError(path, "JSON nested too deeply; not a plan file") from None
    if not isinstance(data, dict):
        raise PlanFileError(path, "not a plan file (expected a JSON object)")
    version = data.get("format_version")
    if not isinstance(version, str) or decimal(version.split(".")[0]) is None:
        raise PlanFileError(path, "not a plan file (no format_version)")
    if version.split(".")[0] != FORMAT_VERSION.split(".")[0]:
        raise PlanFileError(path, f"plan format version {version} is not supported by this "
                                  f"cargoship (reads {FORMAT_VERSION.split('.')[0]}.x); "
                                  "re-plan with this version")
    _validate(path, data)
    expected = digest_of(data)
    if data["digest"] != expected:
        raise PlanFileError(path, "integrity digest does not match the content: the plan was "
                                  "edited or corrupted after it was written; re-plan")
    plan = from_dict(data)
    # Derived counts are stored for readers of the JSON: they must be the plan's own.
    for index, (phase, stored) in enumerate(zip(plan.phases, data["phases"], strict=True)):
        if "hosts" in stored and stored["hosts"] != _host_counts(plan, phase):
            raise PlanFileError(path, f"not a valid plan file: phases[{index}].hosts: "
                                      f"{json.dumps(stored['hosts'])} are not the counts of "
                                      "the phase's own findings and problems; the plan was "
                                      "edited after it was made (re-plan)")
    # The digest only says the file is as written; this says the text is the plan's own.
    first = next(verify.problems(plan), None)
    if first is not None:
        raise PlanFileError(path, f"not a valid plan file: {first}; the plan was edited "
                                  "after it was made (re-plan)")
    return plan


def read(path: Path) -> Plan:
    """The plan at `path`, read once: whoever checks it and whoever applies it must hold
    this one object, never read the path again (it may have changed in between)."""
    return loads(read_bytes(path), path)


def read_bytes(path: Path) -> bytes:
    """A plan file's bytes, from a regular file only: a FIFO, a device or a directory could
    hand a second reader other bytes than the first (or hang), and a link could be
    re-pointed between two reads."""
    try:
        # O_NONBLOCK: opening a FIFO must not wait for a writer; it is refused right after.
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise PlanFileError(path, "is a symbolic link; give the plan file itself") \
                from None
        raise PlanFileError(path, f"cannot read plan: {exc.strerror}") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise PlanFileError(path, "not a regular file; a plan is a file written by "
                                  "`cargoship plan -out`")
    with os.fdopen(fd, "rb") as fh:
        try:
            return fh.read(MAX_PLAN_BYTES + 1)
        except OSError as exc:
            raise PlanFileError(path, f"cannot read plan: {exc.strerror}") from None


def plan_digest(plan: Plan) -> str:
    """The digest a signature covers: the same one the file carries."""
    return digest_of(to_dict(plan))

"""Secret values from the config: inline, `{fromEnv: NAME}` or `{fromFile: PATH}` (where
a file may be is secret_paths' business, asked before this reads it).

A resolved secret is a `Secret`, whose str and repr are masked, so that a secret that
reaches a log line or an error message by mistake shows up as `***` instead of its value.
Only code that writes the value to its destination calls `reveal()`.
"""

from __future__ import annotations

import hashlib
import hmac
import os
from dataclasses import dataclass, field
from pathlib import Path

MASK = "***"
_MAX_SECRET_FILE = 1 << 20


@dataclass(frozen=True)
class Secret:
    source: str  # "inline", "env:NAME" or "file:PATH": safe to show
    _value: str = field(repr=False)
    # `allowAnyPath: true` beside fromFile: a file outside the rules of secret_paths, read
    # because a person said so. Carried into the plan, where reviewers see it.
    allow_any_path: bool = False

    def reveal(self) -> str:
        return self._value

    def salted_digest(self, salt: bytes) -> str:
        """A digest that lets a later run tell whether the value changed, without storing it."""
        mac = hmac.new(salt, self._value.encode(), hashlib.sha256).hexdigest()
        return f"hmac-sha256:{mac}"

    def __str__(self) -> str:
        return MASK

    def __repr__(self) -> str:
        return f"Secret({self.source}, {MASK})"


class SecretError(ValueError):
    pass


@dataclass(frozen=True)
class Unresolved:
    """A secret a command did not need and so did not read (validate, force-unlock):
    it says where the value would come from and refuses to give one."""

    source: str  # "inline", "env:NAME" or "file:PATH"

    def reveal(self) -> str:
        raise SecretError(f"secret from {self.source} was not read by this command")

    def __str__(self) -> str:
        return MASK


def unresolved(value: object, base_dir: Path) -> Unresolved:
    """Where a schema-valid secret comes from, without reading it."""
    if isinstance(value, dict) and "fromEnv" in value:
        return Unresolved(f"env:{value['fromEnv']}")
    if isinstance(value, dict) and "fromFile" in value:
        path = Path(os.path.expanduser(str(value["fromFile"])))
        return Unresolved(f"file:{path if path.is_absolute() else base_dir / path}")
    return Unresolved("inline")


def resolve(value: object, base_dir: Path) -> Secret:
    """Resolve a schema-valid secret; a SecretError names the source, never the value."""
    if isinstance(value, str):
        return Secret("inline", value)
    if isinstance(value, dict) and "fromEnv" in value:
        name = str(value["fromEnv"])
        env = os.environ.get(name)
        if env is None:
            raise SecretError(f"environment variable {name} is not set")
        return Secret(f"env:{name}", env)
    if isinstance(value, dict) and "fromFile" in value:
        path = Path(os.path.expanduser(str(value["fromFile"])))
        if not path.is_absolute():
            path = base_dir / path
        try:
            with path.open("rb") as fh:
                raw = fh.read(_MAX_SECRET_FILE + 1)
        except OSError as exc:
            raise SecretError(f"cannot read secret file {path}: {exc.strerror}") from None
        if len(raw) > _MAX_SECRET_FILE:
            raise SecretError(f"secret file {path} is larger than 1 MiB")
        try:
            text = raw.decode()
        except UnicodeDecodeError:
            raise SecretError(f"secret file {path} is not UTF-8 text") from None
        # Files made with `echo x > f` end in a newline that is not part of the secret.
        return Secret(f"file:{path}", text.rstrip("\r\n"),
                      allow_any_path=value.get("allowAnyPath") is True)
    raise SecretError("expected a string, {fromEnv: NAME} or {fromFile: PATH}")

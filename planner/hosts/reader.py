"""The planner's read-only view of a host.

Planner phases only ever get a HostReader: it can gather facts (read-only snippets written
in planner code, never user text) and nothing else. Writing is the executor's business,
through an interface the planner does not have.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import Any

from ..errors import CommandError
from .batch import Batch, Fact, FactParseError, quote
from .ssh import SshSession

log = logging.getLogger("cargoship.planner")


class HostReader:
    def __init__(self, session: SshSession, user: str, command_timeout: float) -> None:
        self._session = session
        self.user = user
        self.label = session.label
        self.host_key_fingerprint = session.host_key_fingerprint
        self._timeout = command_timeout

    @property
    def round_trips(self) -> int:
        return self._session.round_trips

    def gather(self, facts: Sequence[Fact[Any]], *, as_root: bool = False) -> list[Any]:
        """Run every fact in one round trip and return their parsed values, in order.

        `as_root` runs the batch through `sudo -n` when the SSH user is not root; a host
        without passwordless sudo then fails with a CommandError saying so.
        """
        batch = Batch.of(facts)
        command = "sh -c " + quote(batch.script())
        if as_root and self.user != "root":
            command = "sudo -n -- " + command
        started = time.monotonic()
        result = self._session.run(command, self._timeout)
        log.debug("%s: %d fact(s) in %.0f ms", self.label, len(facts),
                  (time.monotonic() - started) * 1000)
        stdout = result.stdout.decode("utf-8", errors="replace")
        if as_root and self.user != "root" and result.exit_code != 0 and not stdout:
            raise CommandError(self.label, f"sudo -n failed for user {self.user}: "
                                           f"{_first_line(result.stderr)}")
        try:
            outputs = batch.split(stdout)
            return [fact.parse(out) for fact, out in zip(facts, outputs, strict=True)]
        except FactParseError as exc:
            names = ", ".join(f.name for f in facts)
            raise CommandError(self.label, f"unexpected output reading {names}: {exc}") from None

    def close(self) -> None:
        self._session.close()


def _first_line(data: bytes) -> str:
    text = data.decode("utf-8", errors="replace").strip()
    return text.splitlines()[0][:200] if text else "no output"

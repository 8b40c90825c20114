"""A host snapshot: everything the read side of a plan needs from a host, in one remote exec.

Each phase declares, from the config alone, the facts it will gather (Phase.prefetch); right
after the SSH handshake the host runs them all in one script: the SSH user's facts first,
then the root facts (through `sudo -n` when the user is not root). The phases then gather as
before and are answered from the snapshot; each fact's parse function runs only when its
phase asks, so what a phase sees and does is unchanged. A fact the snapshot lacks costs a
round trip of its own (logged; the tests hold a plan to one exec per host).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from .batch import Batch, Fact, FactParseError, Output, Sections, quote

Key = tuple[str, bool]  # (fact command, as root)
# Starts the stderr line of a snapshot that waited for the swap lock in vain: a note for
# the log, never taken for what sudo said.
WAIT_NOTE = "cargoship-snapshot:"


@dataclass
class Snapshot:
    outputs: dict[Key, Output] = field(default_factory=dict)
    root_error: str | None = None  # the root part did not run (sudo refused): why
    lock_note: str | None = None  # the swap lock was still held when the wait gave up
    started: float = 0.0  # this machine's clock (time.time) around the exec
    finished: float = 0.0

    def answer(self, facts: Sequence[Fact[Any]], as_root: bool) -> list[Output] | None:
        """The outputs of these facts, or None if any is missing."""
        found = [self.outputs.get((f.command, as_root)) for f in facts]
        return None if any(o is None for o in found) else [o for o in found if o is not None]


@dataclass(frozen=True)
class SnapshotScript:
    user: Batch
    root: Batch
    sudo: bool  # the root part runs through sudo -n

    @classmethod
    def of(cls, facts: Sequence[tuple[Fact[Any], bool]], sudo: bool) -> SnapshotScript:
        def unique(root: bool) -> list[Fact[Any]]:
            seen: dict[str, Fact[Any]] = {}
            for fact, as_root in facts:
                if as_root == root:
                    seen.setdefault(fact.command, fact)
            return list(seen.values())

        return cls(Batch.of(unique(False)), Batch.of(unique(True)), sudo)

    def sink(self) -> Sections:
        """The reader of the output: the user facts' parts, then the root facts'."""
        return Sections(self.user.sections() + self.root.sections())

    def command(self, wait: int = 0) -> str:
        """`wait`: seconds to wait, before reading anything, for an engine restart still
        changing the host's files (host_paths.py SWAP_LOCK_PATH); then it reads anyway, and
        the apply's drift check is what stands between such a read and a change."""
        script = self.user.script()
        if self.root.facts:
            root = self.root.script()
            if wait > 0:
                # As root, before the root facts (the engine's files are root's): the swap
                # lock lives in /run/cargoship, root's alone (0700), so only root can wait.
                root = self._wait_for_swap(wait) + root
            if not self.sudo:
                # The SSH user is root: the same shell reads on (each fact is a subshell of
                # its own either way); a shell of their own cost every host two processes.
                return "sh -c " + quote(script + root)
            # Through sudo, in a shell of its own. The script reaches it through a pipe,
            # from a variable (printf is built in): as an argument it could not be over
            # 128 KiB (many charts' files to read), and each fact's stdin is /dev/null, so
            # none reads the script's rest.
            script += (f"cs_root={quote(root)}\nprintf '%s\\n' \"$cs_root\" | "
                       "sudo -n -- sh -s\n")
        return "sh -c " + quote(script)

    @staticmethod
    def _wait_for_swap(wait: int) -> str:
        from ..host_paths import SWAP_LOCK_PATH

        lock = quote(SWAP_LOCK_PATH)
        # A regular file only: opening a FIFO someone put there would block. flock -n in a
        # bounded loop, not -w: BusyBox's flock has no -w.
        return (f"if [ -f {lock} ] && [ ! -L {lock} ] && command -v flock >/dev/null 2>&1; "
                f"then i=0; until flock -s -n {lock} true 2>/dev/null; do "
                f"i=$((i+1)); if [ $i -gt {wait * 10} ]; then echo '{WAIT_NOTE} "
                f"{SWAP_LOCK_PATH} still held after {wait} s' >&2; break; fi; sleep 0.1; "
                "done; fi </dev/null\n")  # </dev/null: the rest of a piped script is not its

    def split(self, stdout: str, stderr: str) -> Snapshot:
        snapshot = Snapshot()
        said = stderr.strip().splitlines()
        notes = [ln for ln in said if ln.startswith(WAIT_NOTE)]
        if notes:
            snapshot.lock_note = notes[0].removeprefix(WAIT_NOTE).strip()
            said = [ln for ln in said if not ln.startswith(WAIT_NOTE)]
        user_end = _end_of(self.user, stdout)
        for fact, out in zip(self.user.facts, self.user.split(stdout[:user_end]), strict=True):
            snapshot.outputs[(fact.command, False)] = out
        if self.root.facts:
            try:
                outputs = self.root.split(stdout[user_end:])
            except FactParseError:
                first = said[0][:200] if said else "no output"
                snapshot.root_error = first
                return snapshot
            for fact, out in zip(self.root.facts, outputs, strict=True):
                snapshot.outputs[(fact.command, True)] = out
        return snapshot


def _end_of(batch: Batch, stdout: str) -> int:
    """Where the batch's output ends: just after its last marker line."""
    if not batch.facts:
        return 0
    marker = f"\n{batch.token} {len(batch.facts) - 1} "
    at = stdout.find(marker)
    if at < 0:
        raise FactParseError("remote snapshot ended early")
    line_end = stdout.find("\n", at + len(marker))
    return len(stdout) if line_end < 0 else line_end + 1

"""The executor's view of a host: everything the planner's HostReader can do, plus running
commands that change the host, as root. Only executor steps get one of these.
"""

from __future__ import annotations

import shlex

from planner.errors import CommandError
from planner.hosts.reader import HostReader
from planner.hosts.ssh import CommandResult, SshSession


class HostWriter(HostReader):
    def __init__(self, session: SshSession, user: str, command_timeout: float) -> None:
        super().__init__(session, user, command_timeout)
        self._writer_session = session
        self._command_timeout = command_timeout

    def run_root(self, script: str, *, stdin: bytes | None = None,
                 timeout: float | None = None, check: bool = True) -> CommandResult:
        """Run a POSIX sh script as root (through `sudo -n` for a non-root user).

        Every value in `script` must already be quoted (planner.hosts.batch.quote); data
        goes through `stdin`. With `check`, a non-zero exit raises CommandError carrying
        the script's first line of stderr.
        """
        command = "sh -c " + shlex.quote(script)
        if self.user != "root":
            command = "sudo -n -- " + command
        result = self._writer_session.run(command, timeout or self._command_timeout, stdin)
        if check and result.exit_code != 0:
            first = result.stderr.decode("utf-8", "replace").strip().splitlines()[:1]
            raise CommandError(self.label, f"remote command failed (exit {result.exit_code})"
                                           f": {first[0][:300] if first else 'no message'}")
        return result

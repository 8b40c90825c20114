"""A large stdin upload to `cat > /dev/null` on a lab host, in a thread, for the tests that
end a connection (or cut its host off) in the middle of one."""

from __future__ import annotations

import threading
import time

from planner.errors import HostError
from planner.hosts.ssh import SshSession
from tests.lab import Lab


class Upload:
    def __init__(self, lab: Lab, host: str, session: SshSession, size: int,
                 timeout: float) -> None:
        self._outcome: list[object] = []
        self._thread = threading.Thread(target=self._run, args=(session, size, timeout))
        self._thread.start()
        deadline = time.monotonic() + 20
        while lab.exec(host, "pgrep -x cat", check=False).returncode != 0:
            assert time.monotonic() < deadline, "the upload never started"
            time.sleep(0.05)

    def _run(self, session: SshSession, size: int, timeout: float) -> None:
        try:
            self._outcome.append(session.run("cat > /dev/null", timeout, stdin=b"x" * size))
        except HostError as exc:
            self._outcome.append(exc)

    def outcome(self, wait: float) -> object:
        """What the upload ended with (a CommandResult or the HostError), once it ended."""
        self._thread.join(wait)
        assert not self._thread.is_alive(), f"the upload still runs after {wait:g} s"
        return self._outcome[0]

"""Apply progress: plain timestamped lines off a terminal, a redrawn block on one."""

from __future__ import annotations

import io

from cargoship.progress import Progress


def test_plain_lines_when_not_on_a_terminal() -> None:
    out = io.StringIO()
    progress = Progress(out)
    progress("wrk-1", "cordoned")
    progress("wrk-1", "drained")
    lines = out.getvalue().splitlines()
    assert len(lines) == 2 and "\x1b" not in out.getvalue()
    assert lines[0].endswith("s  [wrk-1] cordoned") and lines[1].endswith("[wrk-1] drained")


def test_live_block_redraws_one_line_per_host() -> None:
    out = io.StringIO()
    progress = Progress(out, live=True)
    progress("wrk-1", "cordoned")
    progress("wrk-2", "cordoned")
    progress("wrk-1", "stopped rke2-agent")
    text = out.getvalue()
    assert text.count("\x1b[2F") == 1  # the two-line block was redrawn in place
    last = text.split("\x1b[2F")[-1]
    assert "wrk-1" in last and "stopped rke2-agent" in last and "wrk-2" in last


def test_a_reader_gone_stops_the_lines_not_the_apply() -> None:
    import io

    from cargoship.progress import Progress

    class Closed(io.StringIO):
        writes = 0

        def write(self, text: str) -> int:
            Closed.writes += 1
            raise BrokenPipeError

    progress = Progress(out=Closed(), live=False)
    progress("wrk-1", "draining")  # must not raise into the rollout
    progress("wrk-1", "restarting")
    assert Closed.writes == 1

"""The reliability tests' line reader (tests/reliability/scenario.py wait_for_line): a
command gone silent does not hold the test up; it is killed past the timeout, and the
failure says where its threads were (the dump cli.py gives on SIGUSR1)."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from tests.reliability.scenario import wait_for_line

SILENT = ("import faulthandler, signal, time\n"
          "faulthandler.register(signal.SIGUSR1, all_threads=True)\n"
          "print('started', flush=True)\n"
          "time.sleep(120)\n")


def _start(code: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def test_a_silent_command_is_killed_with_its_stacks_in_the_failure() -> None:
    run = _start(SILENT)
    seen: list[str] = []
    began = time.monotonic()
    with pytest.raises(AssertionError) as failed:
        wait_for_line(run, "never printed", seen, timeout=1)
    assert time.monotonic() - began < 30
    assert run.wait(10) != 0  # killed
    message = str(failed.value)
    assert "not within 1 s (then killed): 'never printed'" in message, message
    assert "started" in message and "most recent call first" in message, message
    assert "blocked" in message  # each thread's signal mask


def test_the_line_arrives_and_the_watchdog_is_gone() -> None:
    run = _start("print('one'); print('two', flush=True)\nimport time; time.sleep(2)")
    seen: list[str] = []
    wait_for_line(run, "two", seen, timeout=1)
    assert seen == ["one\n", "two\n"]
    assert run.wait(10) == 0  # not killed: it ran to its end


def test_output_that_ends_before_the_line_says_so() -> None:
    run = _start("print('only this')")
    with pytest.raises(AssertionError, match="output ended before 'two'"):
        wait_for_line(run, "two", [], timeout=30)
    run.wait(10)

"""Text from hosts and files is shown, never obeyed: no terminal escapes, no bidi tricks;
and a local file that can't be written is a one-line error that leaves nothing behind."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from planner.localfiles import LocalFileError, atomic_write
from planner.plan.model import Note, Notice, PhaseOutcome
from planner.render import printable, render_markdown, render_text
from tests.unit.test_plan_codec import CTL1, sample_plan


def test_printable_escapes_controls_but_keeps_lines_and_tabs() -> None:
    assert printable("a\x1b[31mb\rc\x07\td\n\u202eé") == "a\\x1b[31mb\\x0dc\\x07\td\n\\u202eé"


def test_rendered_plans_carry_no_control_characters() -> None:
    evil = "\x1b]0;owned\x07\x1b[2J Ubuntu\u202e"
    plan = replace(sample_plan(), phases=(PhaseOutcome(
        2, "Detect host operating systems", "runs, reads only", "ran", (Note(CTL1, evil),)),),
        problems=(Notice(CTL1, "Detect host operating systems", evil),))
    for text in (render_text(plan), render_markdown(plan)):
        assert "\x1b" not in text and "\x07" not in text and "\u202e" not in text
        assert "\\x1b]0;owned\\x07" in text


@pytest.mark.parametrize("make", [
    lambda tmp: tmp / "missing" / "plan.json",  # no such directory
    lambda tmp: (tmp / "dir").mkdir() or tmp / "dir",  # a directory in the way
])
def test_an_unwritable_local_file_is_one_clean_error(tmp_path: Path, make) -> None:  # type: ignore[no-untyped-def]
    target = make(tmp_path)
    with pytest.raises(LocalFileError, match=f"cannot write {target}: "):
        atomic_write(target, b"data")
    leftovers = [p.name for p in tmp_path.rglob(".*")]
    assert leftovers == []

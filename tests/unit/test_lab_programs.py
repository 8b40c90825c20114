"""The lab's programs go onto a host with their bytecode (tests/lab/hostfs.py
install_program): used as long as the host's copy is the one compiled, never once it
changed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.lab.hostfs import install_program


def run(bin_dir: Path) -> tuple[str, str]:
    done = subprocess.run([sys.executable, "-v", "-c", "import prog; print(prog.VALUE)"],
                          cwd=bin_dir, capture_output=True, text=True, check=True)
    return done.stdout.strip(), done.stderr


def test_a_host_runs_the_bytecode_it_was_given_until_its_copy_changes(tmp_path: Path) -> None:
    source = tmp_path / "src" / "prog.py"
    source.parent.mkdir()
    source.write_text("VALUE = 1\n")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    install_program(source, bin_dir / "prog.py")
    value, trace = run(bin_dir)
    assert value == "1"
    assert "prog.cpython" in trace and " matches " in trace, trace
    # Root on the host (or a test) changes its copy: that copy runs, not the bytecode.
    (bin_dir / "prog.py").write_text("VALUE = 2\n")
    value, _ = run(bin_dir)
    assert value == "2"

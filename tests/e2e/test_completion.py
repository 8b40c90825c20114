"""Shell completion for bash, zsh and fish, as each shell runs it: subcommands, their
options and the global options, with global options before the subcommand too."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tests.e2e.cli import cargoship


def script(shell: str, tmp_path: Path) -> Path:
    result = cargoship("completion", shell)
    assert result.returncode == 0, result.stderr
    path = tmp_path / f"cargoship.{shell}"
    path.write_text(result.stdout)
    return path


def need(shell: str) -> None:
    if shutil.which(shell) is None:
        pytest.skip(f"{shell} is not installed (scripts/setup.sh installs it)")


def bash_complete(path: Path, line: str) -> set[str]:
    words = line.split(" ")
    program = (f"source {path}; COMP_WORDS=({' '.join(repr(w) for w in words)}); "
               f"COMP_CWORD={len(words) - 1}; _cargoship; printf '%s\\n' \"${{COMPREPLY[@]}}\"")
    out = subprocess.run(["bash", "-c", program], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    return set(out.stdout.split())


def zsh_complete(path: Path, line: str) -> set[str]:
    # The completion function is called as zsh's completion system would, with its
    # builtins (compadd, _describe, _files) standing in to print what they are offered.
    words = line.split(" ")
    program = (
        "compadd() { [[ $1 == -- ]] && shift; print -l -- \"$@\"; }\n"
        "_describe() { local -a items; items=(\"${(@P)${@[-1]}}\"); print -l -- ${items%%:*}; }\n"
        "_files() { print -- FILES; }\n"
        "compdef() { :; }\n"
        f"source {path}\n"
        f"words=({' '.join(repr(w) for w in words)}); CURRENT={len(words)}; "
        f"PREFIX={words[-1]!r}\n"
        "_cargoship\n")
    out = subprocess.run(["zsh", "-f", "-c", program], capture_output=True, text=True,
                         timeout=30)
    assert out.returncode == 0, out.stderr
    return set(out.stdout.split())


def fish_complete(path: Path, line: str) -> set[str]:
    out = subprocess.run(["fish", "--no-config", "-c", f"source {path}; complete -C '{line}'"],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    return {row.split("\t")[0] for row in out.stdout.splitlines()}


COMPLETERS = {"bash": bash_complete, "zsh": zsh_complete, "fish": fish_complete}


@pytest.mark.parametrize("shell", sorted(COMPLETERS))
def test_completion(shell: str, tmp_path: Path) -> None:
    need(shell)
    path = script(shell, tmp_path)
    complete = COMPLETERS[shell]
    first = complete(path, "cargoship ")
    assert {"plan", "apply", "show", "force-unlock", "completion"} <= first
    assert {"--verbose", "--no-color", "--log-file"} <= first | complete(path, "cargoship --")
    plan_options = complete(path, "cargoship plan --")
    assert {"--config", "--out", "--detailed-exitcode", "--verbose", "--no-color"} <= \
        plan_options
    assert "--confirm" not in plan_options
    # A global option before the subcommand does not hide the subcommand's options.
    after_global = complete(path, "cargoship -v apply --")
    assert {"--confirm", "--lock-timeout", "--require-signed-by"} <= after_global


SYNTAX_CHECK = {"bash": ["bash", "-n"], "zsh": ["zsh", "-n"], "fish": ["fish", "--no-execute"]}


@pytest.mark.parametrize("shell", sorted(COMPLETERS))
def test_completion_completes_the_shells_in_every_shell(shell: str, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    need(shell)
    path = script(shell, tmp_path)
    checked = subprocess.run([*SYNTAX_CHECK[shell], str(path)], capture_output=True,
                             text=True, timeout=30)
    assert checked.returncode == 0, checked.stderr
    complete = COMPLETERS[shell]
    # `completion <TAB>` offers the shells, not file names (the zsh stand-in prints FILES
    # when asked for files; bash and fish would list this directory's).
    (tmp_path / "not-a-shell.txt").write_text("")
    monkeypatch.chdir(tmp_path)  # the shells list the working directory's files
    offered = complete(path, "cargoship completion ")
    assert {"bash", "zsh", "fish"} <= offered, offered
    assert not offered & {"FILES", "not-a-shell.txt", str(path.name)}, offered
    if shell != "zsh":  # zsh's compadd narrows by $PREFIX itself; its stand-in does not
        assert complete(path, "cargoship completion z") == {"zsh"}

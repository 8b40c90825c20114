"""The mutation suite (tests/mutation) stays usable as the code moves: every mutation
still applies where it says, every test it names exists, and every safety rule has one.
Killing them is `python -m tests.mutation`'s job; this only keeps the catalogue honest."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.mutation.catalogue import MUTATIONS
from tests.mutation.mutate import Mutation, Stale, mutate

ROOT = Path(__file__).resolve().parents[2]

# Every rule of design.md section 5 and the README's promises that a mutation must guard.
RULES = ("digest", "drift", "signers", "replay", "fresh readiness", "controllers one at a "
         "time", "rollback restores and restarts", "lock", "secrets masked", "secrets salted",
         "default-deny phases", "unknown actions", "uncordon only", "host content is data",
         "node identity", "bounded reads", "signals", "no shell injection", "quorum gate",
         "test waits", "drain choice")


@pytest.mark.parametrize("m", MUTATIONS, ids=lambda m: m.rule[:60])
def test_every_mutation_applies_to_the_code_as_it_is(m: Mutation) -> None:
    source = (ROOT / m.path).read_text()
    assert mutate(source, m) != source
    for test in m.tests:
        path = test.split("::")[0]
        assert (ROOT / path).is_file(), f"{m.rule}: no test file {path}"
        if "::" in test:
            assert f"def {test.split('::')[1].split('[')[0]}(" in (ROOT / path).read_text()
    if m.unit:
        assert any(t.startswith("tests/unit/") for t in m.tests), m.rule


def test_every_safety_rule_has_a_mutation() -> None:
    missing = [r for r in RULES if not any(m.rule.startswith(r) for m in MUTATIONS)]
    assert not missing


SOURCE = '''\
def one():
    return x + 1

class K:
    def two(self):
        return x + 1
'''


def test_a_mutation_changes_only_inside_its_function() -> None:
    m = Mutation("r", "f.py", "K.two", "x + 1", "x - 1", ())
    assert mutate(SOURCE, m) == SOURCE.replace("        return x + 1", "        return x - 1")


@pytest.mark.parametrize(("function", "find", "said"), [
    ("gone", "x + 1", "no function 'gone'"),
    ("one", "y + 1", "found 0 time"),
    ("one", "x +", "found 1 time"),  # count=2 below: the code moved on
    ("one", "return x + 1", "does not parse"),
])
def test_code_that_moved_on_is_stale_never_silently_unmutated(function: str, find: str,
                                                               said: str) -> None:
    count = 2 if find == "x +" else 1
    replace = "return (" if said == "does not parse" else "z"
    with pytest.raises(Stale, match=said):
        mutate(SOURCE, Mutation("r", "f.py", function, find, replace, (), count=count))


def test_a_shell_file_is_mutated_as_a_whole_by_the_same_rule() -> None:
    text = 'if [ -L "$1" ]; then exit 3; fi\nchmod "$2" "$tmp"\n'
    m = Mutation("r", "x.sh", "", 'chmod "$2"', "chmod 0644", ())
    assert mutate(text, m) == text.replace('chmod "$2"', "chmod 0644")
    with pytest.raises(Stale, match="found 0 time"):
        mutate(text, Mutation("r", "x.sh", "", "chmod 0600", "chmod 0644", ()))
    with pytest.raises(Stale, match="only in Python files"):
        mutate(text, Mutation("r", "x.sh", "swap", 'chmod "$2"', "chmod 0644", ()))

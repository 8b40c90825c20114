"""planner/safeyaml.py: documents that aliases would blow up are refused before anything
is built from them; a document that cannot hold an alias is not walked at all."""

from __future__ import annotations

import pytest

from planner import safeyaml
from planner.safeyaml import YamlTooLarge, compose, safe_load, safe_load_node

LAUGHS = "a: &a [x,x,x,x,x,x,x,x,x,x]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join([f'*{chr(97 + i)}'] * 10)}]\n"
    for i in range(8))


@pytest.mark.parametrize("text", [LAUGHS, LAUGHS.encode()])
def test_an_alias_bomb_is_refused_by_every_entry(text: str | bytes) -> None:
    for read in (safe_load, safe_load_node, compose):
        with pytest.raises(YamlTooLarge, match="aliases expand the document"):
            read(text)


def test_a_recursive_alias_is_refused() -> None:
    with pytest.raises(YamlTooLarge, match="recursive alias"):
        safe_load("a: &a [*a]\n")


def test_a_document_without_an_alias_is_not_walked(monkeypatch: pytest.MonkeyPatch) -> None:
    walked: list[object] = []
    monkeypatch.setattr(safeyaml, "expanded_size", lambda node: walked.append(node) or 1)
    assert safe_load("a: [1, 2]\nb: {c: d}\n") == {"a": [1, 2], "b": {"c": "d"}}
    assert walked == []
    # A `*` anywhere (here only in a value) and the document is measured as before.
    assert safe_load_node(b"a: '*'\n")[0] == {"a": "*"}
    assert len(walked) == 1

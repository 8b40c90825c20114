"""hosts/batch.py Sections: each fact's output cut to its limit as it arrives, whatever the
chunks, and a batch's split of what it keeps the same as of the whole output."""

from __future__ import annotations

from typing import Any

import pytest

from planner.hosts.batch import Batch, Fact, Output, Sections


def _fact(name: str, limit: int | None) -> Fact[Any]:
    return Fact(name, f": {name}", lambda out: out, limit)


BATCH = Batch.of([_fact("a", 10), _fact("b", None), _fact("c", 3)])


def _output(parts: list[tuple[str, int]], batch: Batch = BATCH) -> bytes:
    """What the batch's script prints: each part, then its marker line."""
    return "".join(f"{text}\n{batch.token} {i} {code}\n"
                   for i, (text, code) in enumerate(parts)).encode()


def _kept(data: bytes, step: int, batch: Batch = BATCH) -> list[Output]:
    sink = Sections(batch.sections())
    for at in range(0, len(data), step):
        sink.feed(data[at:at + step])
    return batch.split(sink.end().decode())


@pytest.mark.parametrize("step", [1, 2, 3, 5, 17, 31, 64, 1 << 20])
def test_every_part_is_cut_at_its_limit_plus_one_whatever_the_chunks(step: int) -> None:
    data = _output([("A" * 50, 0), ("B" * 100_000, 0), ("hello", 7)])
    assert _kept(data, step) == [Output("A" * 11, 0), Output("B" * 100_000, 0),
                                 Output("hel" + "l", 7)]


@pytest.mark.parametrize("step", [1, 4, 1 << 20])
def test_parts_within_their_limits_are_kept_whole(step: int) -> None:
    parts = [("0123456789", 0), ("", 3), ("x\ny", 1)]
    assert _kept(_output(parts), step) == [Output(t, c) for t, c in parts]


def test_a_marker_of_another_index_neither_ends_the_part_nor_gives_it_more_room() -> None:
    # A host's root can read the script's token; what it forges is still part a's text,
    # cut at a's limit.
    forged = "A" * 50 + f"\n{BATCH.token} 2 0\n" + "B" * 50
    sink = Sections(BATCH.sections())
    sink.feed(forged.encode())
    assert sink.where() == "reading a"
    sink.feed(_output([("", 0), ("b", 0), ("c", 0)]))
    assert sink.end().startswith(b"A" * 11 + f"\n{BATCH.token} 0 0\nb\n".encode())


def test_output_after_the_last_marker_and_a_marker_line_without_end_are_not_kept() -> None:
    sink = Sections(BATCH.sections())
    sink.feed(_output([("a", 0), ("b", 0), ("c", 0)]) + b"z" * 1000)
    kept = sink.end()
    assert kept.endswith(f"{BATCH.token} 2 0\n".encode())
    sink = Sections(BATCH.sections())
    sink.feed(f"a\n{BATCH.token} 0 ".encode() + b"9" * 100_000)
    assert len(sink.end()) < 100


def test_where_names_the_fact_whose_output_is_arriving() -> None:
    sink = Sections(BATCH.sections())
    assert sink.where() == "reading a"
    sink.feed(_output([("a", 0)]) + b"bbb")
    assert sink.where() == "reading b"
    sink.feed(f"\n{BATCH.token} 1 0\nc\n{BATCH.token} 2 0\n".encode())
    assert sink.where() == "after the last read"


def test_a_batch_without_limits_keeps_everything() -> None:
    batch = Batch.of([_fact("a", None)])
    data = _output([("q" * 300_000, 0)], batch)
    assert _kept(data, 65536, batch) == [Output("q" * 300_000, 0)]

"""The quick schema check may say "valid" only where jsonschema finds no error: configs
mutated at random, one value, key or deletion at a time, must never pass it and fail
jsonschema. And it must pass the valid configs we ship, or it saves nothing."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import jsonschema
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import schemas
from planner.config.quick_schema import surely_valid

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = schemas.load(schemas.CLUSTER_SCHEMA)
VALIDATOR = jsonschema.Draft202012Validator(
    SCHEMA, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)
EXAMPLES = [yaml.safe_load((ROOT / "examples" / name).read_text())
            for name in ("rke2-cluster.yaml", "k3s-cluster.yaml")]

SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(-3, 70000), st.floats(allow_nan=False),
    st.sampled_from([0, 1, 22, 65535, 65536, 1.0, 22.0, "", "a", "root", "controller",
                     "worker", "rke2", "k3s", "v1.30.4+rke2r1", "10.0.0.1", "::1",
                     "fe80::1%eth0", "256.1.1.1", "host-1", "-bad", "Bad_Name", "x" * 70,
                     "/etc/x", "../x", "https://mirror.example.com", True, False]),
    st.text(max_size=8),
)
VALUES = st.recursive(SCALARS, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=6), inner, max_size=3)),
    max_leaves=6)


def _paths(data: Any, at: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [at]
    if isinstance(data, dict):
        for key, value in data.items():
            found += _paths(value, (*at, key))
    elif isinstance(data, list):
        for index, value in enumerate(data):
            found += _paths(value, (*at, index))
    return found


def _mutate(data: Any, draw: st.DataObject) -> Any:
    doc = copy.deepcopy(data)
    for _ in range(draw.draw(st.integers(1, 3))):
        path = draw.draw(st.sampled_from(_paths(doc)))
        if not path:
            continue
        parent = doc
        for step in path[:-1]:
            parent = parent[step]
        how = draw.draw(st.sampled_from(["replace", "delete", "add"]))
        if how == "replace":
            parent[path[-1]] = draw.draw(VALUES)
        elif how == "delete":
            del parent[path[-1]]
        elif isinstance(parent, dict):
            parent[draw.draw(st.sampled_from(["extra", "port", "user", "a", path[-1]]))] = \
                draw.draw(VALUES)
        else:
            parent.append(draw.draw(VALUES))
    return doc


def test_the_shipped_examples_pass_quickly() -> None:
    for doc in EXAMPLES:
        assert not list(VALIDATOR.iter_errors(doc))
        assert surely_valid(SCHEMA, doc)


@settings(max_examples=1000, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.data())
def test_never_valid_where_jsonschema_finds_an_error(data: st.DataObject) -> None:
    doc = _mutate(data.draw(st.sampled_from(EXAMPLES)), data)
    if surely_valid(SCHEMA, doc):
        errors = [e.message for e in VALIDATOR.iter_errors(doc)]
        assert not errors, (doc, errors)

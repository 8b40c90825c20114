"""Hostile and broken input, generated: every case ends in one-line errors and exit 1 (or
is simply valid), never a traceback, never a connection to a host."""

from __future__ import annotations

import contextlib
import copy
import io
import json
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cargoship.cli import main
from planner.plan import codec
from tests.unit.test_plan_codec import sample_plan

SETTINGS = settings(max_examples=60, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])

HOSTILE_TEXT = st.sampled_from([
    "; rm -rf /", "$(reboot)", "`id`", "../../etc/shadow", "a\nb", "\x00", "ünïcødé ☃",
    "x" * 5000, "", " ", "-rf", "{{ }}", "%s%n", "\u202e", "10.0.0.1:22; id",
])
VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats(allow_nan=True)
    | st.text(max_size=30) | HOSTILE_TEXT,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
        st.text(max_size=10) | HOSTILE_TEXT, inner, max_size=4),
    max_leaves=12)


@pytest.fixture(scope="module")
def listener() -> Iterator[tuple[int, list[Any]]]:
    """Every host in the generated configs points here: an accept means a connection."""
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.1)
    accepted: list[Any] = []
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            try:
                accepted.append(server.accept())
            except TimeoutError:
                continue

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    yield server.getsockname()[1], accepted
    stop.set()
    thread.join()
    server.close()


def base_config(port: int) -> dict[str, Any]:
    return {"apiVersion": "cargoship/v1", "kind": "Cluster", "metadata": {"name": "fuzz"},
            "spec": {"engine": {"distro": "rke2", "version": "v1.30.4+rke2r1"},
                     "hosts": [{"role": "controller",
                                "ssh": {"address": "127.0.0.1", "port": port}}],
                     "engineConfig": {"registries": {"mirrors": {}}},
                     "options": {"ssh": {"connectTimeoutSeconds": 1}}}}


def paths(data: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [prefix]
    if isinstance(data, dict):
        for key, value in data.items():
            found += paths(value, (*prefix, key))
    elif isinstance(data, list):
        for index, value in enumerate(data):
            found += paths(value, (*prefix, index))
    return found


def set_at(data: Any, path: tuple[Any, ...], value: Any) -> Any:
    if not path:
        return value
    data[path[0]] = set_at(data[path[0]], path[1:], value)
    return data


def run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(list(argv))
        except SystemExit as exc:  # argparse
            code = int(exc.code or 0)
    return code, out.getvalue(), err.getvalue()


def assert_clean_failure(code: int, out: str, err: str) -> None:
    assert code == 1, (code, out, err)
    assert "Traceback" not in out + err
    assert "internal error" not in err, err
    lines = err.strip().splitlines()
    assert lines and all(line.startswith("error: ") for line in lines), err


@pytest.mark.reliability("bad input: cluster configs (generated)")
@SETTINGS
@given(data=st.data())
def test_broken_configs(tmp_path: Path, listener, tally, data) -> None:  # type: ignore[no-untyped-def]
    tally.case()
    port, accepted = listener
    config = base_config(port)
    where = data.draw(st.sampled_from(paths(config)[1:]), label="path")
    broken = set_at(copy.deepcopy(config), where, data.draw(VALUES, label="value"))
    path = tmp_path / "cluster.yaml"
    style = data.draw(st.sampled_from(["yaml", "json", "truncated", "deep"]), label="style")
    text = yaml.safe_dump(broken) if style != "json" else json.dumps(broken)
    if style == "truncated":
        text = text[: data.draw(st.integers(0, max(0, len(text) - 1)), label="cut")]
    if style == "deep":
        text = "a: " + "[" * 3000
    path.write_text(text)
    code, out, err = run("validate", "-c", str(path))
    if code == 0:
        return  # the mutation happened to be valid: nothing to refuse
    assert_clean_failure(code, out, err)
    before = len(accepted)
    assert_clean_failure(*run("plan", "-c", str(path)))
    assert len(accepted) == before, "a broken config led to a connection"


@pytest.mark.reliability("bad input: plan files (generated)")
@SETTINGS
@given(data=st.data())
def test_broken_plan_files(tmp_path: Path, tally, data) -> None:  # type: ignore[no-untyped-def]
    tally.case()
    plan = json.loads(codec.dumps(sample_plan()))
    style = data.draw(st.sampled_from(["edit", "truncate", "garbage", "version", "digest",
                                       "redigest"]), label="s")
    if style in ("edit", "redigest"):
        where = data.draw(st.sampled_from(paths(plan)[1:]), label="path")
        edited = set_at(plan, where, data.draw(VALUES, label="value"))
        if style == "redigest" and isinstance(edited, dict):
            # Whoever edits a plan can recompute its digest: the schema must still hold.
            edited["digest"] = codec.digest_of(edited)
        text = json.dumps(edited)
    elif style == "digest":
        plan["digest"] = "sha256:" + data.draw(st.text("0123456789abcdef", min_size=64,
                                                       max_size=64), label="digest")
        text = json.dumps(plan)
    elif style == "truncate":
        full = json.dumps(plan)
        text = full[: data.draw(st.integers(0, len(full) - 1), label="cut")]
    elif style == "garbage":
        text = data.draw(st.text(max_size=200) | HOSTILE_TEXT, label="text")
    else:
        plan["format_version"] = data.draw(st.text(max_size=8), label="version")
        text = json.dumps(plan)
    path = tmp_path / "plan.json"
    path.write_text(text, errors="surrogatepass")
    code, out, err = run("show", str(path))
    if code == 0:
        return  # an edit that changed nothing (same value written back)
    assert_clean_failure(code, out, err)
    assert_clean_failure(*run("apply", str(path), "--confirm"))


@pytest.mark.reliability("bad input: CLI flags")
def test_hostile_cli_flags(tmp_path: Path, tally) -> None:  # type: ignore[no-untyped-def]
    for argv in (["plan"], ["plan", "-c"], ["apply"], ["--bogus"], ["show", "--json",
                 "--markdown", "x"], ["apply", "p.json", "--lock-timeout", "-1", "--confirm"],
                 ["apply", "p.json", "--lock-timeout", "soon"], ["force-unlock", "-c",
                 str(tmp_path / "none.yaml"), "$(id)"]):
        tally.case()
        code, out, err = run(*argv)
        assert code in (1, 2) and "Traceback" not in out + err, argv
        assert err.strip() and len(err.strip().splitlines()) <= 2, (argv, err)
    # float() takes these, and a lock wait of nan seconds never ends: refused as the flag's
    # own, before any file is read.
    for wait in ("nan", "inf", "1e400", "-1"):
        tally.case()
        code, out, err = run("apply", "p.json", "--confirm", "--lock-timeout", wait)
        assert code == 1 and "argument --lock-timeout: expected a finite number of seconds " \
            f">= 0, got '{wait}'" in err, (wait, err)


HUGE = {
    "config over 4 MiB": ("config", lambda c: {**c, "metadata": {"name": "x" * (5 << 20)}},
                          "larger than 4 MiB"),
    "5001 hosts": ("config", lambda c: _hosts(c, 5001), "expected at most 5000 item(s)"),
    "1 MiB hostname": ("config", lambda c: _host_field(c, "hostname", "a" * (1 << 20)),
                       "expected at most 253 character(s)"),
    "port 10**100": ("config", lambda c: _host_field(c, "ssh", {"address": "127.0.0.1",
                                                                "port": 10**100}),
                     "expected a value <= 65535"),
    "timeout 10**30": ("config", lambda c: {**c, "spec": {**c["spec"], "options": {
        "ssh": {"connectTimeoutSeconds": 10**30}}}}, "expected a value <= 600"),
    "plan over 64 MiB": ("plan", lambda p: {**p, "created_by": "x" * (65 << 20)},
                         "larger than 64 MiB"),
    "plan nested 100000 deep": ("plan", lambda p: {**p, "desired": _deep(100000)},
                                "nested too deeply"),
}


def _hosts(config: dict[str, Any], n: int) -> dict[str, Any]:
    spec = {**config["spec"], "hosts": [{"role": "controller", "ssh": {
        "address": f"10.9.{i // 250}.{i % 250 + 1}", "port": 22}} for i in range(n)]}
    return {**config, "spec": spec}


def _host_field(config: dict[str, Any], key: str, value: Any) -> dict[str, Any]:
    hosts = [{**config["spec"]["hosts"][0], key: value}]
    return {**config, "spec": {**config["spec"], "hosts": hosts}}


def _deep(depth: int) -> Any:
    value: Any = []
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.reliability("bad input: huge values")
@pytest.mark.parametrize("case", HUGE)
def test_huge_values(tmp_path: Path, listener, tally, case: str) -> None:  # type: ignore[no-untyped-def]
    tally.case()
    kind, make, says = HUGE[case]
    port, accepted = listener
    path = tmp_path / f"{kind}.json"
    if kind == "config":
        path.write_text(json.dumps(make(base_config(port))))  # JSON is YAML
        commands = [("validate", "-c", str(path)), ("plan", "-c", str(path))]
    else:
        plan = json.loads(codec.dumps(sample_plan()))
        try:
            path.write_text(json.dumps(make(plan)))
        except RecursionError:  # json itself can't write it that deep: by hand, then
            path.write_text(json.dumps(plan)[:-1] + ', "x": ' + "[" * 100000 + "]" * 100000
                            + "}")
        commands = [("show", str(path)), ("apply", str(path), "--confirm")]
    before = len(accepted)
    for argv in commands:
        code, out, err = run(*argv)
        assert_clean_failure(code, out, err)
        assert says in err, err[:500]
        assert len(err) < 2000, "a huge value was echoed back whole"
    assert len(accepted) == before, "a huge config led to a connection"

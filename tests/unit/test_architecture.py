"""Structural rules: the planner never imports the executor, and reads hosts only."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _imports(package: str) -> set[tuple[str, str]]:
    found = set()
    for path in (ROOT / package).rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                found |= {(str(path.relative_to(ROOT)), a.name) for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                found.add((str(path.relative_to(ROOT)), node.module))
    return found


def test_planner_never_imports_executor_or_cli() -> None:
    bad = {(f, m) for f, m in _imports("planner") if m.split(".")[0] in ("executor", "cargoship")}
    assert not bad, f"planner imports executor/cli: {sorted(bad)}"


def test_host_reader_offers_no_way_to_write() -> None:
    from planner.hosts.reader import HostReader

    public = {name for name in vars(HostReader) if not name.startswith("_")}
    # take_snapshot runs facts too (read-only snippets from planner code), only all at once.
    assert public == {"gather", "answered", "take_snapshot", "start_snapshot", "close",
                      "round_trips"}


def test_no_module_trusts_unknown_host_keys() -> None:
    for path in list((ROOT / "planner").rglob("*.py")) + list((ROOT / "executor").rglob("*.py")):
        text = path.read_text()
        assert "AutoAddPolicy" not in text and "WarningPolicy" not in text, path

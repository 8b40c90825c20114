"""The layers of ARCHITECTURE.md, held for every module: no import runs back up a layer,
no import loop (TYPE_CHECKING and function-level imports included), the executor and the
command line never reach into a phase module, and the planner reads hosts only; and no
function or module longer than ARCHITECTURE.md's "Size" allows."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("planner", "executor", "cargoship", "schemas")

# Bottom first: a module may import its own layer and the layers below, never above.
# A module's layer is that of the longest prefix naming it (ARCHITECTURE.md says why).
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("base", ("planner", "planner.errors", "planner.safeyaml", "planner.safetext",
              "planner.credentials", "planner.startup", "planner.kube_bounds",
              "planner.history_verify", "planner.localfiles", "planner.host_paths",
              "planner.drain_rules", "planner.kube_get", "planner.kube_core", "planner.threads",
              "schemas")),
    ("config", ("planner.config",)),
    ("hosts", ("planner.hosts",)),
    ("facts", ("planner.facts",)),
    ("plan data", ("planner.plan.model", "planner.plan.hostref", "planner.plan.actions")),
    ("desired", ("planner.desired", "planner.kube", "planner.configurers")),
    ("plan file", ("planner.plan",)),
    ("context", ("planner.context", "planner.render", "planner.api_server")),
    ("phases", ("planner.phases", "planner.history", "planner.connecting")),
    ("runner", ("planner.dryrun", "planner.make")),
    ("executor", ("executor",)),
    ("cli", ("cargoship",)),
)


def _module(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module(p): p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")}


def _known(name: str) -> str | None:
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def _imports(module: str) -> Iterator[str]:
    """Every project module `module` imports, wherever the import statement is."""
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package.split(".")[:len(package.split(".")) - (node.level - 1)] \
                if node.level else []
            start = ".".join([*base, *([node.module] if node.module else [])])
            names = [start, *(f"{start}.{a.name}" for a in node.names)]
        else:
            continue
        for name in names:
            found = _known(name)
            if found and found != module:
                yield found


EDGES = {m: set(_imports(m)) for m in MODULES}


def layer(module: str) -> int:
    best = max(((len(p), i) for i, (_, prefixes) in enumerate(LAYERS) for p in prefixes
                if module == p or module.startswith(p + ".")), default=None)
    assert best is not None, f"{module} is in no layer: add it to LAYERS and ARCHITECTURE.md"
    return best[1]


def test_every_module_has_a_layer() -> None:
    for module in MODULES:
        layer(module)


def test_no_import_runs_back_up_a_layer() -> None:
    up = sorted(f"{m} ({LAYERS[layer(m)][0]}) imports {t} ({LAYERS[layer(t)][0]})"
                for m, targets in EDGES.items() for t in targets if layer(t) > layer(m))
    assert not up


def test_no_import_loop() -> None:
    # Tarjan's strongly connected components over the module graph.
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    loops: list[list[str]] = []

    def visit(m: str) -> None:
        index[m] = low[m] = len(index)
        stack.append(m)
        for t in EDGES[m]:
            if t not in index:
                visit(t)
                low[m] = min(low[m], low[t])
            elif t in stack:
                low[m] = min(low[m], index[t])
        if low[m] == index[m]:
            component = []
            while True:
                top = stack.pop()
                component.append(top)
                if top == m:
                    break
            if len(component) > 1:
                loops.append(sorted(component))

    for module in sorted(MODULES):
        if module not in index:
            visit(module)
    assert not loops


def test_phase_modules_are_the_planners_alone() -> None:
    # What the executor or the command line needs from planning lives in the layer it
    # belongs to; only the runner (planner.make) composes the phases.
    reach = sorted(f"{m} imports {t}" for m, targets in EDGES.items()
                   if m.split(".")[0] in ("executor", "cargoship")
                   for t in targets if t.startswith("planner.phases"))
    assert not reach


def test_planner_never_imports_executor_or_cli() -> None:
    bad = sorted(f"{m} imports {t}" for m, targets in EDGES.items() if m.startswith("planner")
                 for t in targets if t.split(".")[0] in ("executor", "cargoship"))
    assert not bad


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


# A newcomer reads a function whole (issue 26: the CLI and the rollout had functions of
# 70-100 lines); a module of more than this is several modules.
MAX_FUNCTION_LINES = 60
MAX_MODULE_LINES = 1000


def test_no_function_is_longer_than_a_screen() -> None:
    long = []
    for module, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    long.append(f"{module}:{node.lineno} {node.name} ({lines} lines)")
    assert not long, f"functions over {MAX_FUNCTION_LINES} lines: {long}"


def test_no_module_holds_several() -> None:
    long = [f"{m} ({n} lines)" for m, p in MODULES.items()
            if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES]
    assert not long, f"modules over {MAX_MODULE_LINES} lines: {long}"


# Names a module may share with another, each the same kind of thing in its own package
# (ARCHITECTURE.md, "Names"). Any other repeat is two things a reader can mistake for one:
# issue 26 found three files.py, three lock.py and handshake.py beside handshakes.py.
SHARED_NAMES = {
    "__init__": "a package",
    "model": "a package's typed data: config.model, plan.model, facts.firewall.model",
    "errors": "a top package's exception tree: planner.errors, executor.errors",
    "base": "a package's protocol: phases.base (Phase), actions.base (Action)",
    "connect": "the Connect phase (planner.phases) and apply's write sessions (executor)",
}


def _stems() -> dict[str, list[str]]:
    """Every module and shell file by name, but a script in a `sh/` folder beside the
    module of its name (facts/sh/engine_config.sh is facts/engine_config.py's command)."""
    stems: dict[str, list[str]] = {}
    for pkg in PACKAGES:
        for path in (ROOT / pkg).rglob("*"):
            if path.suffix not in (".py", ".sh") or "__pycache__" in path.parts:
                continue
            if path.suffix == ".sh" and path.parent.name == "sh" \
                    and (path.parent.parent / f"{path.stem}.py").exists():
                continue
            stems.setdefault(path.stem, []).append(str(path.relative_to(ROOT)))
    return stems


def test_module_names_say_which_is_which() -> None:
    stems = _stems()
    repeated = sorted(f"{stem}: {', '.join(sorted(paths))}" for stem, paths in stems.items()
                      if len(paths) > 1 and stem not in SHARED_NAMES)
    plural = sorted(f"{stem} and {stem}s" for stem in stems if f"{stem}s" in stems)
    assert not repeated, f"module names used twice (or add to SHARED_NAMES): {repeated}"
    assert not plural, f"names a letter apart: {plural}"
    unused = sorted(s for s in SHARED_NAMES if len(stems.get(s, [])) < 2)
    assert not unused, f"SHARED_NAMES no longer shared: {unused}"

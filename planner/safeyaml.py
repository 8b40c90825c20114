"""YAML that cannot expand: every YAML text cargoship parses goes through here.

PyYAML shares an aliased node instead of copying it, so parsing "billion laughs" is cheap,
but everything that walks the result afterwards (the structural compare, the canonical
JSON of a digest, a dump for a diff) pays for the full expansion: a few hundred bytes from
a host could cost minutes of CPU and gigabytes. So the composed node graph is measured
before anything is built from it: aliases may not make a document larger than
MAX_EXPANDED_NODES nodes (a document without aliases is as large as its text allows, which
callers bound), and a recursive alias is refused outright.
"""

from __future__ import annotations

from typing import Any

import yaml

MAX_EXPANDED_NODES = 100_000
# libyaml's loader: it composes an order of magnitude faster than the pure-Python one
# (tests/bench/FINDINGS.md, "The test suite's time").
_Loader: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class YamlTooLarge(yaml.YAMLError):
    """Aliases would expand the document past the limit (or into a cycle)."""


def expanded_size(root: yaml.Node) -> int:
    """How many nodes the document has once every alias is copied out. Raises YamlTooLarge
    when aliases add more than MAX_EXPANDED_NODES to it, or form a cycle. Linear in the
    number of distinct nodes: sizes are memoised, so a billion laughs costs a few dozen
    additions, not a billion."""
    sizes: dict[int, int] = {}
    distinct = 0  # nodes as written: each collection once, with its scalars
    on_path: set[int] = set()
    # Iterative post-order walk: a deep document must not exhaust Python's stack.
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        key = id(node)
        if done:
            children = _children(node)
            sizes[key] = 1 + sum(sizes.get(id(c), 1) for c in children)
            distinct += 1 + sum(isinstance(c, yaml.ScalarNode) for c in children)
            on_path.discard(key)
        elif key in on_path:
            raise YamlTooLarge("a recursive alias (a node that contains itself); refused")
        elif key not in sizes:
            on_path.add(key)
            stack.append((node, True))
            stack.extend((c, False) for c in _children(node)
                         if not isinstance(c, yaml.ScalarNode) and id(c) not in sizes)
    total = sizes[id(root)]
    if total - distinct > MAX_EXPANDED_NODES:
        raise YamlTooLarge(f"aliases expand the document by over {MAX_EXPANDED_NODES} nodes "
                           "(an alias bomb?); refused")
    return total


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    return []


def compose(text: str | bytes, loader: yaml.SafeLoader | None = None) -> yaml.Node | None:
    """The document's node graph, checked; `loader` lets a caller keep its own loader (of
    the same `text`)."""
    own = loader is None
    loader = loader or _Loader(text)
    try:
        node = loader.get_single_node()
        # An alias is written `*name`: a text without `*` has none, and is as large as
        # it is (the walk was a third of an engine config's parse on every host).
        if node is not None and ("*" in text if isinstance(text, str) else b"*" in text):
            expanded_size(node)
        return node
    finally:
        if own:
            loader.dispose()


def safe_load(text: str | bytes) -> Any:
    """yaml.safe_load, bounded (see the module docstring)."""
    return safe_load_node(text)[0]


def safe_load_node(text: str | bytes) -> tuple[Any, yaml.Node | None]:
    """safe_load, and the node graph it was built from: where each value was written
    (its marks), with no second parse."""
    loader = _Loader(text)
    try:
        node = compose(text, loader)
        return (None, None) if node is None else (loader.construct_document(node), node)
    except RecursionError:
        raise YamlTooLarge("nested too deeply") from None
    finally:
        loader.dispose()


def safe_load_all(text: str | bytes) -> list[Any]:
    """yaml.safe_load_all (a multi-document stream, as manifests are), each document
    bounded as safe_load bounds one."""
    loader = _Loader(text)
    documents: list[Any] = []
    try:
        while loader.check_node():
            node = loader.get_node()
            if node is not None:
                expanded_size(node)
                documents.append(loader.construct_document(node))
        return documents
    except RecursionError:
        raise YamlTooLarge("nested too deeply") from None
    finally:
        loader.dispose()

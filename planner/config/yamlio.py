"""YAML loading that remembers where every value came from and refuses duplicate keys.

PyYAML silently keeps the last of two equal keys; in a cluster config that hides a mistake
(two `port:` lines), so duplicates are reported as problems like any schema error.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import yaml

from ..safeyaml import compose

Path_ = tuple[str | int, ...]
_PLAIN_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]*$")


@dataclass
class YamlDoc:
    data: Any
    lines: dict[Path_, int] = field(default_factory=dict)
    duplicates: list[tuple[Path_, int]] = field(default_factory=list)

    def line_of(self, path: Path_) -> int | None:
        """Line (1-based) of the deepest known node on `path`."""
        for cut in range(len(path), -1, -1):
            line = self.lines.get(path[:cut])
            if line is not None:
                return line
        return None


class YamlSyntaxError(ValueError):
    def __init__(self, line: int | None, message: str) -> None:
        self.line = line
        super().__init__(message)


def format_path(path: Path_) -> str:
    """`('spec', 'hosts', 2, 'ssh', 'port')` -> `spec.hosts[2].ssh.port`."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        elif not _PLAIN_KEY.match(part):
            out += f"[{part!r}]"  # keys like "docker.io" would read as two levels
        else:
            out += f".{part}" if out else part
    return out


# libyaml's loader (C) where PyYAML has it: with hundreds of hosts, the pure-Python
# scanner is a visible part of a plan's CPU. Its nodes carry the same line marks.
_FAST: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_LIBYAML_TOO_DEEP = "exceeded maximum nesting depth"
_TOO_DEEP = "invalid YAML: nested too deeply"


def load_yaml(text: str) -> YamlDoc:
    try:
        return _load(text, _FAST)
    except YamlSyntaxError as exc:
        if _FAST is yaml.SafeLoader:
            raise
        # libyaml stops at 1000 levels; the pure-Python loader would reach the same end
        # (Python's recursion limit) only after seconds of quadratic scanning.
        if str(exc) == f"invalid YAML: {_LIBYAML_TOO_DEEP}":
            raise YamlSyntaxError(None, _TOO_DEEP) from None
    # The pure-Python loader says what is wrong in the words the error messages (and the
    # tests of them) have always used.
    return _load(text, yaml.SafeLoader)


def _load(text: str, loader_class: type[yaml.SafeLoader]) -> YamlDoc:
    loader = loader_class(text)
    try:
        node = compose(text, loader)  # refuses alias bombs before _walk would expand them
        if node is None:
            return YamlDoc(data=None)
        doc = YamlDoc(data=None)
        _walk(node, (), doc)
        doc.data = loader.construct_document(node)
        return doc
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else None
        reason = exc.problem or exc.context or "invalid YAML"
        raise YamlSyntaxError(line, f"invalid YAML: {reason}") from None
    except yaml.YAMLError as exc:
        raise YamlSyntaxError(None, f"invalid YAML: {exc}") from None
    except RecursionError:
        raise YamlSyntaxError(None, _TOO_DEEP) from None
    finally:
        loader.dispose()


def _walk(node: yaml.Node, path: Path_, doc: YamlDoc) -> None:
    doc.lines[path] = node.start_mark.line + 1
    if isinstance(node, yaml.MappingNode):
        seen: set[str] = set()
        for key_node, value_node in node.value:
            key = str(key_node.value) if isinstance(key_node, yaml.ScalarNode) else "?"
            if key in seen:
                doc.duplicates.append(((*path, key), key_node.start_mark.line + 1))
            seen.add(key)
            _walk(value_node, (*path, key), doc)
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            _walk(item, (*path, index), doc)

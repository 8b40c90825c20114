"""Cut a markdown plan into pull-request-comment-sized parts, each readable alone."""

from __future__ import annotations

COMMENT_LIMIT = 65_000  # a pull-request comment on the common forges holds 65,536


def split_markdown(text: str, limit: int = COMMENT_LIMIT) -> list[str]:
    """Cut a markdown plan into parts under `limit` characters, each readable alone: a cut
    inside a diff block or a collapsible host section closes it and reopens it in the next
    part. Whole host sections are kept together when they fit."""
    reserve = 200  # for the part header and the closing/reopening lines
    if len(text) <= limit:
        return [text]
    parts: list[list[str]] = [[]]
    size = 0
    fence = details = False
    lines = text.splitlines(keepends=True)
    for index, line in enumerate(lines):
        section = _section_size(lines, index) if line.startswith("<details>") else len(line)
        if size + min(section, limit - reserve) > limit - reserve and parts[-1]:
            if fence:
                parts[-1].append("```\n")
            if details:
                parts[-1].append("</details>\n")
            parts.append([])
            size = 0
            if details:
                parts[-1].append("<details><summary>(continued)</summary>\n\n")
            if fence:
                parts[-1].append("```diff\n")
        parts[-1].append(line[: limit - reserve])
        size += len(line)
        if line.startswith("```"):
            fence = not fence
        elif line.startswith("<details>"):
            details = True
        elif line.startswith("</details>"):
            details = False
    total = len(parts)
    return [f"_cargoship plan, part {i} of {total}_\n\n" + "".join(part)
            for i, part in enumerate(parts, 1)]


def _section_size(lines: list[str], start: int) -> int:
    size = 0
    for line in lines[start:]:
        size += len(line)
        if line.startswith("</details>"):
            break
    return size

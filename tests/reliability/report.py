"""Run the reliability suite and print its table: `python -m tests.reliability.report`.

Every fault and bad-input class, how many cases ran, how many ended consistent, and what
was lost (which must be zero). Extra arguments go to pytest (e.g. `-k lock`). Needs root
(the fault tests use lab hosts); exits non-zero when a test failed or anything was lost.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

from tests.lab.lab import down_all
from tests.reliability.conftest import OUT_ENV


def table(lines: list[dict[str, object]]) -> str:
    rows: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0, 0])  # tests, cases, ok, lost
    for line in lines:
        row = rows[str(line["class"])]
        cases = int(line["cases"])  # type: ignore[call-overload]
        row[0] += 1
        row[1] += cases
        row[2] += cases if line["outcome"] == "passed" else 0
        row[3] += int(line["lost"])  # type: ignore[call-overload]
    head = ("class", "tests", "cases ran", "ended consistent", "lost")
    body = [(name, *map(str, r)) for name, r in sorted(rows.items())]
    totals = [sum(r[i] for r in rows.values()) for i in range(4)]
    body.append(("total", *map(str, totals)))
    widths = [max(len(row[i]) for row in [head, *body]) for i in range(5)]
    fmt = "| " + " | ".join(("{:<" if i == 0 else "{:>") + f"{w}}}"
                            for i, w in enumerate(widths)) + " |"
    rule = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
    return "\n".join([fmt.format(*head), rule, *(fmt.format(*row) for row in body)])


def main(argv: list[str]) -> int:
    with tempfile.TemporaryDirectory(prefix="cargoship-reliability.") as tmp:
        out = Path(tmp) / "results.jsonl"
        out.touch()
        env = {**os.environ, OUT_ENV: str(out)}
        try:
            code = subprocess.call([sys.executable, "-m", "pytest", "-q", "-p",
                                    "no:cacheprovider", "--basetemp", str(Path(tmp) / "pytest"),
                                    "tests/reliability", *argv], env=env)
        finally:
            # Every lab of the run lives under tmp: none outlives the report, whatever
            # happened to the tests' own teardown (or to pytest).
            left = down_all(under=Path(tmp))
            if left:
                print(f"removed {left} lab(s) the tests left running", file=sys.stderr)
        lines = [json.loads(x) for x in out.read_text().splitlines() if x.strip()]
    if not lines:
        print("no reliability results were recorded", file=sys.stderr)
        return code or 1
    print()
    print(table(lines))
    lost = sum(int(x["lost"]) for x in lines)
    return 1 if code or lost else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

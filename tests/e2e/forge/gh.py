"""A stand-in for GitHub's `gh`, with exactly the subcommands the example workflow uses.

State lives in $FORGE_DIR: prs.json ([{number, headRefName, state, commits}]), runs.json
([{databaseId, workflow, event, branch, status}], newest first), artifacts/RUN/NAME/...
(what upload-artifact kept), comments/PR/N.md (what was posted).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any


def _query(data: Any, expr: str | None) -> str:
    """The few jq expressions the workflow uses: .[0].number, .name, .[].name."""
    if expr is None:
        return json.dumps(data)
    if expr.startswith(".[]."):
        return "\n".join(str(item[expr[4:]]) for item in data)
    if expr.startswith(".[0]."):
        return str(data[0][expr[5:]]) if data else ""
    return str(data[expr[1:]])


def main(argv: list[str]) -> int:
    forge = Path(os.environ["FORGE_DIR"])
    parser = argparse.ArgumentParser(prog="gh")
    sub = parser.add_subparsers(dest="area", required=True)
    pr = sub.add_parser("pr").add_subparsers(dest="verb", required=True)
    comment = pr.add_parser("comment")
    comment.add_argument("number")
    comment.add_argument("--body-file", required=True)
    pr_list = pr.add_parser("list")
    pr_list.add_argument("--state")
    pr_list.add_argument("--search")
    pr_list.add_argument("--json")
    pr_list.add_argument("-q")
    view = pr.add_parser("view")
    view.add_argument("number")
    view.add_argument("--json")
    view.add_argument("-q")
    run = sub.add_parser("run").add_subparsers(dest="verb", required=True)
    run_list = run.add_parser("list")
    for option in ("--workflow", "--event", "--branch", "--status", "--json", "-q"):
        run_list.add_argument(option)
    run_list.add_argument("-L", "--limit", type=int, default=20)  # gh's default
    download = run.add_parser("download")
    download.add_argument("run")
    download.add_argument("-n", "--name", required=True)
    download.add_argument("-D", "--dir", default=".")
    args = parser.parse_args(argv)

    prs = json.loads((forge / "prs.json").read_text()) if (forge / "prs.json").exists() else []
    if args.area == "pr" and args.verb == "comment":
        folder = forge / "comments" / args.number
        folder.mkdir(parents=True, exist_ok=True)
        count = len(list(folder.iterdir()))
        shutil.copy(args.body_file, folder / f"{count + 1:03d}.md")
        return 0
    if args.area == "pr" and args.verb == "list":
        found = [p for p in prs if p["state"] == args.state and args.search in p["commits"]]
        print(_query([{"number": p["number"]} for p in found], args.q))
        return 0
    if args.area == "pr" and args.verb == "view":
        match = [p for p in prs if str(p["number"]) == args.number]
        if not match:
            print(f"no pull request {args.number}", file=sys.stderr)
            return 1
        print(_query(match[0], args.q))
        return 0
    if args.area == "run" and args.verb == "list":
        runs = json.loads((forge / "runs.json").read_text())
        found = [r for r in runs if r["workflow"] == args.workflow and r["event"] == args.event
                 and args.branch in (None, r["branch"]) and r["status"] == args.status]
        print(_query(found[:args.limit], args.q))
        return 0
    if args.area == "run" and args.verb == "download":
        source = forge / "artifacts" / args.run / args.name
        if not source.is_dir():
            print(f"no artifact named {args.name} in run {args.run}", file=sys.stderr)
            return 1
        shutil.copytree(source, args.dir, dirs_exist_ok=True)
        return 0
    return 2


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

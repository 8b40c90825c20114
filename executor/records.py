"""Apply records: which plan was applied, by whom, when, with what outcome per host.

Each host keeps one per plan under RECORD_DIR (so `history` can read them, a second apply
of the same plan is refused and an interrupted one can be finished); the local record
sits next to the plan file. Their shape: schemas/apply-record.schema.json.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from planner.host_paths import RECORD_DIR
from planner.hosts.batch import quote
from planner.localfiles import atomic_write

from .file_writes import write_file
from .remote import HostWriter


def record_path(plan_id: str) -> str:
    return f"{RECORD_DIR}/{plan_id}.json"


def write_host_record(host: HostWriter, plan_id: str, record: dict[str, Any]) -> None:
    content = (json.dumps(record, indent=2, sort_keys=True) + "\n").encode()
    write_file(host, record_path(plan_id), content, mode=0o644, plan_id=plan_id)


def write_local_record(plan_file: Path, record: dict[str, Any]) -> Path:
    path = plan_file.with_name(plan_file.name.removesuffix(".json") + ".applied.json")
    atomic_write(path, (json.dumps(record, indent=2, sort_keys=True) + "\n").encode())
    return path


def read_host_record(host: HostWriter, plan_id: str) -> dict[str, Any] | None:
    """The record this plan left on the host, None when there is none. A record that can't
    be read as one still says the plan was applied there."""
    path = quote(record_path(plan_id))
    result = host.run_root(f"test -e {path} && head -c 1048576 {path}", check=False)
    if result.exit_code != 0:
        return None
    try:
        data = json.loads(result.stdout)
    except ValueError:
        return {"plan_id": plan_id, "interrupted": False, "status": "unknown"}
    return data if isinstance(data, dict) else {"plan_id": plan_id, "interrupted": False}

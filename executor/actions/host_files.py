"""The host actions: files written or removed, with or without a drain and restart, and the
recovery of a host an interrupted apply left. All of them run in the rollout."""

from __future__ import annotations

from typing import ClassVar

from planner.desired.engine_files import DesiredFile
from planner.facts.interrupted import BACKUPS as BACKUP_DIR
from planner.plan.actions import (
    DELETE_FILE,
    DELETE_FILE_IN_PLACE,
    RECOVER,
    RESTORE_BACKUP,
    WRITE_FILE,
    WRITE_FILE_IN_PLACE,
)
from planner.plan.model import Change

from ..host_job import HostJob
from .base import ApplyRefused, HostHandler


class WriteFile(HostHandler):
    action = WRITE_FILE
    restart: ClassVar[bool] = True

    def shape(self, job: HostJob, change: Change, wanted: dict[str, DesiredFile]) -> None:
        desired = wanted.get(change.target)
        if desired is None:
            # The content comes from the desired state: a target it has no file for is an
            # edited plan, not something to guess at.
            raise ApplyRefused(f"{change.host}: {change.action} {change.target}: not a file "
                               "the plan's desired state has for this host; nothing was "
                               "changed")
        job.files.append(desired)
        job.restart |= self.restart
        job.drain |= self.restart and change.drain  # as the plan says (options.drain.when)


class WriteFileInPlace(WriteFile):
    action = WRITE_FILE_IN_PLACE
    restart = False


class DeleteFile(HostHandler):
    action = DELETE_FILE
    restart: ClassVar[bool] = True

    def shape(self, job: HostJob, change: Change, wanted: dict[str, DesiredFile]) -> None:
        job.deletes.append(change.target)
        job.restart |= self.restart
        job.drain |= self.restart and change.drain


class DeleteFileInPlace(DeleteFile):
    action = DELETE_FILE_IN_PLACE
    restart = False


class RestoreBackup(HostHandler):
    """Put back the files from before an apply killed while rolling back, then restart."""

    action = RESTORE_BACKUP

    def shape(self, job: HostJob, change: Change, wanted: dict[str, DesiredFile]) -> None:
        if not BACKUP_DIR.fullmatch(change.target):
            raise ApplyRefused(f"{change.host}: {change.action} {change.target}: not a backup "
                               "directory of cargoship's; nothing was changed")
        job.restore_from = change.target
        job.restart = job.drain = True


class Recover(HostHandler):
    """Nothing to write: drain, restart and uncordon is the whole job."""

    action = RECOVER

    def shape(self, job: HostJob, change: Change, wanted: dict[str, DesiredFile]) -> None:
        job.restart = job.drain = True

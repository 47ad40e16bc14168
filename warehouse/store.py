"""The warehouse on disk: where each table's Parquet lives, and how a run is published atomically.

Layout (Hive partitions, readable as is by DuckDB, Spark, pandas, polars):

    <warehouse>/tables/<table>/run_id=<id>/rank-NNNNN.parquet
    <warehouse>/tables/runs/run_id=<id>/run.parquet      <- written last: the commit marker
    <warehouse>/staging/<pid>-<nonce>/...                 <- a run being written, invisible

A run is written entirely into its staging folder, then moved into `tables/` folder by folder under
an exclusive lock, `runs` last. Every base view reads only runs that have a `runs` row, so a run that
was half moved when its process died is never visible; the next publish under the lock deletes such
leftovers, and staging folders of dead processes.
"""

from __future__ import annotations

import fcntl
import os
import secrets
import shutil
from contextlib import contextmanager
from pathlib import Path

from tracehouse.errors import TracehouseError
from tracehouse.interrupts import held

TABLES = (
    "kernels",
    "cpu_ops",
    "python_frames",
    "flows",
    "streams",
    "step_spans",
    "kernel_sites",
    "step_requests",
)
ALL_TABLES = ("runs",) + TABLES
# the folder of each table's zero-row file (warehouse.schema writes them; here so that a reader checks for
# them without importing pyarrow)
SCHEMA_PARTITION = "run_id=_schema"
DEFAULT_WAREHOUSE = "./tracehouse-data"


class Warehouse:
    def __init__(self, root: str | Path) -> None:
        self.root = Path(root).resolve()

    @property
    def tables_dir(self) -> Path:
        return self.root / "tables"

    @property
    def staging_dir(self) -> Path:
        return self.root / "staging"

    def table_dir(self, table: str) -> Path:
        return self.tables_dir / table

    def partition(self, table: str, run_id: str) -> Path:
        return self.table_dir(table) / f"run_id={run_id}"

    def exists(self) -> bool:
        return self.tables_dir.is_dir()

    def init(self) -> None:
        for table in ALL_TABLES:
            self.table_dir(table).mkdir(parents=True, exist_ok=True)
        self.staging_dir.mkdir(parents=True, exist_ok=True)

    def has_run(self, run_id: str) -> bool:
        return (self.partition("runs", run_id) / "run.parquet").is_file()

    def run_ids(self) -> list[str]:
        runs = self.table_dir("runs")
        if not runs.is_dir():
            return []
        return sorted(
            p.name.split("=", 1)[1]
            for p in runs.iterdir()
            if p.name.startswith("run_id=") and (p / "run.parquet").is_file()
        )

    @contextmanager
    def lock(self):
        """Exclusive lock for publishing; concurrent ingests wait here, one publish at a time."""
        self.root.mkdir(parents=True, exist_ok=True)
        with open(self.root / ".lock", "a+") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    def new_staging(self) -> Path:
        self.init()
        path = self.staging_dir / f"{os.getpid()}-{secrets.token_hex(4)}"
        path.mkdir()
        return path

    def publish(self, staging: Path, run_id: str) -> bool:
        """Move a staged run into place; False when the run was already there (nothing stored)."""
        if not _safe_id(run_id):
            raise TracehouseError(f"refusing to publish run id {run_id!r}")
        with held(), self.lock():  # whole: an interrupt (SIGINT, SIGTERM) is raised once it is done
            self.collect_garbage()
            if self.has_run(run_id):
                shutil.rmtree(staging, ignore_errors=True)
                return False
            for table in TABLES + ("runs",):
                source = staging / "out" / table
                target = self.partition(table, run_id)
                if target.exists():  # left by a publish that died midway
                    shutil.rmtree(target)
                if source.is_dir():
                    target.parent.mkdir(parents=True, exist_ok=True)
                    os.replace(source, target)
            shutil.rmtree(staging, ignore_errors=True)
            return True

    def collect_garbage(self) -> None:
        """Delete partitions without a runs row and staging folders of dead processes (lock held)."""
        published = set(self.run_ids())
        for table in TABLES:
            folder = self.table_dir(table)
            if not folder.is_dir():
                continue
            for part in folder.iterdir():
                run = part.name.split("=", 1)[-1]
                if part.name.startswith("run_id=") and not run.startswith("_") and run not in published:
                    shutil.rmtree(part, ignore_errors=True)
        if self.staging_dir.is_dir():
            for stage in self.staging_dir.iterdir():
                pid = stage.name.split("-", 1)[0]
                if pid.isdigit() and not process_alive(int(pid)):
                    shutil.rmtree(stage, ignore_errors=True)

    def take_out(self, run_id: str, into: Path) -> list[Path]:
        """Move the run's partitions into the folder `into` (the lock held), the runs row first: from that
        rename on, readers see no such run, and what a crash leaves in tables/ has no runs row
        (collect_garbage deletes it). The partitions moved, in their new place."""
        if not _safe_id(run_id):
            raise TracehouseError(f"refusing to remove run id {run_id!r}")
        moved = []
        for table in ("runs",) + TABLES:
            source = self.partition(table, run_id)
            if source.is_dir():
                into.mkdir(parents=True, exist_ok=True)
                os.replace(source, into / table)
                moved.append(into / table)
        return moved


def process_alive(pid: int) -> bool:
    """Whether a process with this id runs (a folder named after it is still being written)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _safe_id(run_id: str) -> bool:
    return bool(run_id) and all(c in "0123456789abcdef" for c in run_id)

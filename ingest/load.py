"""Ingest into the warehouse: plan runs, skip what is already there, ingest ranks, publish.

This is the one function the CLI's `ingest` calls; it reports, per run, what landed and what was
skipped, and it never raises for a bad file (those are returned as problems).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from ingest.capture import attribute_run, capture_files, coverage
from ingest.files import FileProblem, file_sha256, is_nsys_input
from ingest.rank import MEMORY_LIMIT
from ingest.run import (
    RankPool,
    assign_ranks,
    build_runs_row,
    ingest_files,
    plan_runs,
    run_id_for,
    write_runs_row,
)
from warehouse import derived
from warehouse.catalog import derived_root, ensure_schema_files
from warehouse.rules import RULES_VERSION
from warehouse.store import Warehouse

DERIVE_CHOICES = ("wait", "background", "none")


@dataclass
class RunOutcome:
    run_id: str | None
    files: list[str]
    stored: bool  # False: the same files were already ingested, nothing new stored
    problems: list[FileProblem] = field(default_factory=list)
    warnings: dict[str, int] = field(default_factory=dict)
    n_kernels: int = 0


def ingest_paths(
    warehouse: Warehouse,
    paths: list[Path],
    labels: dict[str, str] | None = None,
    capture: Path | None = None,
    progress=None,
    analyse: bool = True,
    derive: str | None = None,
) -> list[RunOutcome]:
    """derive: what happens to each new run's derived rows (warehouse.derived: the kept rows of the
    `materialized: per_run` views) once the run is published:
    'wait': computed before this returns; 'background': a detached `tracehouse derive` process computes
    them after this returns (start_derive); 'none': left to the first reader. Default: 'wait', or 'none'
    with analyse=False."""
    with Ingestor(warehouse, progress, analyse, derive) as ingestor:
        return ingestor.ingest(paths, labels, capture)


class Ingestor:
    """Ingests many commands' worth of paths with one pool of worker processes (see RankPool)."""

    def __init__(
        self, warehouse: Warehouse, progress=None, analyse: bool = True, derive: str | None = None
    ) -> None:
        self.warehouse = warehouse
        self.progress = progress
        self.derive = derive or ("wait" if analyse else "none")
        if self.derive not in DERIVE_CHOICES:
            raise ValueError(f"derive: one of {', '.join(DERIVE_CHOICES)}, not {self.derive!r}")
        self.pool = RankPool()
        ensure_schema_files(warehouse)

    def ingest(
        self, paths: list[Path], labels: dict[str, str] | None = None, capture: Path | None = None
    ) -> list[RunOutcome]:
        labels = dict(labels or {})
        outcomes = [
            _ingest_plan(
                self.warehouse,
                plan.files,
                plan.skipped,
                labels,
                self.progress,
                plan.capture_dir,
                self.pool,
                self.derive == "wait",
            )
            for plan in plan_runs(paths, capture)
        ]
        new = [o.run_id for o in outcomes if o.stored and o.run_id]
        if new and self.derive == "background":
            start_derive(self.warehouse, new)
        return outcomes

    def close(self) -> None:
        self.pool.close()

    def __enter__(self) -> Ingestor:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _ingest_plan(
    warehouse: Warehouse,
    files: list[Path],
    skipped: list[str],
    labels: dict[str, str],
    progress,
    capture: Path | None = None,
    pool: RankPool | None = None,
    analyse: bool = True,
) -> RunOutcome:
    """analyse: derive the new run's rows before returning (`_store_analyses`)."""
    nsys_files = [f for f in files if is_nsys_input(f)]
    beside = (
        nsys_files if len(nsys_files) < len(files) else []
    )  # a folder with both: the PyTorch traces are the run
    if beside:
        files, nsys_files = [f for f in files if f not in beside], []
    captures = capture_files(capture)  # capture traces are part of the run, and of its id
    capture_hashes = [file_sha256(f) for f in captures]
    hashes = [file_sha256(f) for f in files]
    run_id = run_id_for(hashes + capture_hashes)
    names = [str(f) for f in files]
    if warehouse.has_run(run_id):
        return RunOutcome(run_id, names, stored=False)
    ranks, notes = ([], []) if nsys_files else assign_ranks(files)
    if beside:
        notes.append(
            f"Nsight Systems files beside the PyTorch-profiler traces skipped ({len(beside)}); "
            "ingest them as a run of their own"
        )
    staging = warehouse.new_staging()
    try:
        if nsys_files:  # each process of each export is a rank (ingest/nsys.py)
            from ingest.nsys import ingest_exports

            results = ingest_exports(
                files,
                labels.get("phase"),
                staging / "out",
                staging / "work",
                progress,
                pool,
                dict(zip(files, hashes)),
            )
        else:
            results = ingest_files(
                files, ranks, labels.get("phase"), staging / "out", staging / "work", progress, pool
            )
        good = [r for r in results if not isinstance(r, FileProblem)]
        problems = [r for r in results if isinstance(r, FileProblem)]
        if not good:
            return RunOutcome(None, names, stored=False, problems=problems)
        if problems:  # the run is what could be read; its id says so
            run_id = run_id_for(
                sorted({r.sha256 for r in good}) if nsys_files else [r.sha256 for r in good] + capture_hashes
            )
            if warehouse.has_run(run_id):
                return RunOutcome(run_id, names, stored=False, problems=problems)
        good_files = list(dict.fromkeys(Path(r.path) for r in good))
        extra_warnings = {"files that could not be read": len(problems)} if problems else {}
        if captures:  # graph attribution: kernel_sites per rank, from the capture traces
            extra_warnings.update(
                attribute_run(
                    capture,
                    [r.rank for r in good],
                    staging / "out",
                    staging / "work",
                    pool,
                    rank_bytes=sum(r.json_bytes for r in good),
                )
            )
        attributed = coverage(staging / "out")
        row = build_runs_row(
            run_id, good, good_files, labels, notes, skipped, RULES_VERSION, attributed, extra_warnings
        )
        write_runs_row(row, staging / "out")
        shutil.rmtree(staging / "work", ignore_errors=True)
        stored = warehouse.publish(staging, run_id)
        if stored and analyse:
            _store_analyses(warehouse, run_id, progress)
        return RunOutcome(
            run_id,
            names,
            stored=stored,
            problems=problems,
            warnings=dict(row["warnings"]),
            n_kernels=row["n_kernels"],
        )
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _store_analyses(warehouse: Warehouse, run_id: str, progress) -> bool:
    """The derived rows of the published run, computed now (`derive_one`), the progress line shown."""
    if progress:
        progress(f"deriving run {run_id} (its kept rows and report steps)")
    return derive_one(warehouse, run_id)


def derive_one(warehouse: Warehouse, run_id: str, progress=None) -> bool:
    """The derived rows of one published run (warehouse.derived.derive), bounded by ingest's memory limit.
    If that fails (a run too large for that limit, a warehouse this user may only read), its readers
    compute what is not kept: False, with a note. progress: called with a line as each view is done."""
    failed = derived.derive(warehouse, [run_id], MEMORY_LIMIT, progress)[run_id]
    if failed:
        eprint(
            f"note: run {run_id} is stored; its derived rows were not ({failed}): its readers compute them"
        )
        return False
    return True


PROJECT = Path(__file__).resolve().parent.parent  # where `tracehouse` is importable from


def start_derive(warehouse: Warehouse, run_ids: list[str]) -> subprocess.Popen:
    """Start `tracehouse derive --background RUN...` detached (its own session, at a lower priority, its
    output in <warehouse>/derived/.logs/): this process returns at once, the runs' readers compute what is
    not kept yet, and the derive process keeps each view's rows as it finishes them."""
    logs = derived_root(warehouse) / ".logs"
    logs.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(PROJECT), env.get("PYTHONPATH")) if p)
    command = [sys.executable, "-c", "from tracehouse.cli import entry; entry()"]
    command += ["--warehouse", str(warehouse.root), "derive", "--background", *run_ids]
    with open(logs / f"{run_ids[0]}.log", "ab") as log:
        return subprocess.Popen(
            command, stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env, start_new_session=True
        )


def eprint(*args) -> None:
    print(*args, file=sys.stderr)

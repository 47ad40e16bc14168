"""Ingest into the warehouse: plan runs, skip what is already there, ingest ranks, publish.

This is the one function the CLI's `ingest` calls; it reports, per run, what landed and what was
skipped, and it never raises for a bad file (those are returned as problems). An interrupt (SIGINT,
SIGTERM: tracehouse.interrupts) stores no part of a run: the run being read is dropped whole (its
staging folder), a run is published whole or not at all (the publish runs whole, signals held), and
Interrupted says which runs were stored, which were not, and a stored run whose derive was cut short.
"""

from __future__ import annotations

import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path

from tracehouse.ingest.capture import attribute_run, capture_files, coverage
from tracehouse.ingest.files import FileProblem, file_sha256, is_nsys_input
from tracehouse.ingest.run import (
    RankPool,
    assign_ranks,
    build_runs_row,
    ingest_files,
    plan_runs,
    run_id_for,
    write_runs_row,
)
from tracehouse.warehouse import derived
from tracehouse.warehouse.catalog import ensure_schema_files
from tracehouse.warehouse.rules import RULES_VERSION
from tracehouse.warehouse.store import Warehouse

from tracehouse.interrupts import Interrupted, held, is_interrupt, watching
from tracehouse.interrupts import check as check_interrupt

DERIVE_CHOICES = ("wait", "none")


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
    one_run: bool = False,
) -> list[RunOutcome]:
    """one_run: each directory, and the files named together, is one run (the old rule), instead of one
    run per profiling session (ingest.sessions). derive: what happens to each new run's derived rows (warehouse.derived: the kept rows of the
    `materialized: per_run` views) once the run is published:
    'wait': computed in this process before this returns (derive_one, right after each run is published);
    'none': left to `tracehouse derive` or the first reader. Default: 'wait', or 'none' with analyse=False."""
    ingestor = None
    with watching():
        try:
            with Ingestor(warehouse, progress, analyse, derive) as ingestor:
                return ingestor.ingest(paths, labels, capture, one_run)
        except (KeyboardInterrupt, Exception) as exc:  # also while its workers stop (Ingestor.close)
            if not is_interrupt(exc) or ingestor is None:
                raise
            raise Interrupted(ingestor.done.summary()) from None


@dataclass
class IngestState:
    """How far a command's ingest got, for what an interrupt says: the runs done, the run published but
    not returned yet (`current`), the run being derived."""

    outcomes: list[RunOutcome] = field(default_factory=list)
    current: RunOutcome | None = None
    deriving: str | None = None
    left: list[list[Path]] = field(default_factory=list)  # the files of the runs not stored

    def published(self, outcome: RunOutcome) -> None:
        self.current = outcome

    def finished(self) -> int:
        """How many plans are done (a run published counts, said or not)."""
        return len(self.outcomes) + (self.current is not None and self.current not in self.outcomes)

    def stored(self) -> list[RunOutcome]:
        runs = [o for o in self.outcomes if o.stored]
        return runs + ([self.current] if self.current is not None and self.current not in runs else [])

    def summary(self) -> str:
        return interrupted_summary(self.stored(), self.deriving, self.left)


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
        self.done = IngestState()  # the last ingest's
        ensure_schema_files(warehouse)

    def ingest(
        self,
        paths: list[Path],
        labels: dict[str, str] | None = None,
        capture: Path | None = None,
        one_run: bool = False,
    ) -> list[RunOutcome]:
        labels = dict(labels or {})
        plans = plan_runs(paths, capture, one_run)
        done = self.done = IngestState()
        with watching():
            try:
                for plan in plans:
                    self._ingest_one_plan(plan, labels, done)
            except (KeyboardInterrupt, Exception) as exc:
                if not is_interrupt(exc):
                    raise
                done.left = [plan.files for plan in plans[done.finished() :]]
                raise Interrupted(done.summary()) from None
        return done.outcomes

    def _ingest_one_plan(self, plan, labels: dict[str, str], done: IngestState) -> None:
        if plan.announce:  # a folder of several profiling sessions: each is a run, named here
            eprint(plan.announce)
        if plan.capture_note:  # capture traces found beside the profile (ingest.run.CAPTURE_FOLDERS)
            eprint(plan.capture_note)
        outcome = _ingest_plan(
            self.warehouse,
            plan.files,
            plan.skipped,
            labels,
            self.progress,
            plan.capture_dir,
            self.pool,
            plan.notes,
            done.published,
        )
        done.outcomes.append(outcome)
        done.current = None
        if outcome.stored and self.derive == "wait":
            done.deriving = outcome.run_id
            _store_analyses(self.warehouse, outcome.run_id, self.progress)
            done.deriving = None

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
    plan_notes: list[str] | None = None,
    published=None,
) -> RunOutcome:
    """plan_notes: said of the run by its plan (runs.warnings). published: called with the outcome of the
    run once it is published, before an interrupt that came meanwhile is raised."""
    nsys_files = [f for f in files if is_nsys_input(f)]
    beside = (
        nsys_files if len(nsys_files) < len(files) else []
    )  # both in one run (--one-run; sessions are never mixed): the PyTorch traces are the run
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
    notes = list(plan_notes or []) + notes
    if beside:
        notes.append(
            f"Nsight Systems files beside the PyTorch-profiler traces skipped ({len(beside)}); "
            "without --one-run they are a run of their own"
        )
    staging = warehouse.new_staging()
    try:
        if nsys_files:  # each process of each export is a rank (ingest/nsys.py)
            from tracehouse.ingest.nsys import ingest_exports

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
        check_interrupt()  # one that a catch above took for a bad file: nothing is stored after it
        with held():  # published whole, and said so, before the interrupt is raised
            stored = warehouse.publish(staging, run_id)
            outcome = RunOutcome(
                run_id,
                names,
                stored=stored,
                problems=problems,
                warnings=dict(row["warnings"]),
                n_kernels=row["n_kernels"],
            )
            if stored and published:
                published(outcome)
        return outcome
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def interrupted_summary(stored: list[RunOutcome], underived: str | None, left: list[list[Path]]) -> str:
    """The one line of an interrupted ingest: the runs stored (whole), a stored run whose derive was cut
    short, and the files of the runs not stored."""
    parts = ["stored: " + (", ".join(f"{o.run_id} ({_files_text(o.files)})" for o in stored) or "nothing")]
    if underived:
        parts.append(f"run {underived} stored, not derived: run `tracehouse derive`")
    if left:
        parts.append("not stored: " + ", ".join(_files_text(files) for files in left))
    return "; ".join(parts)


def _files_text(files) -> str:
    files = [Path(f) for f in files]
    if len(files) == 1:
        return str(files[0])
    folders = {f.parent for f in files}
    return f"{len(files)} files" + (f" in {folders.pop()}" if len(folders) == 1 else "")


def _store_analyses(warehouse: Warehouse, run_id: str, progress) -> bool:
    """The derived rows of the published run, computed now (`derive_one`), the progress line shown."""
    if progress:
        progress(f"deriving run {run_id} (its kept rows and report steps)")
    return derive_one(warehouse, run_id)


def derive_one(warehouse: Warehouse, run_id: str, progress=None) -> bool:
    """The derived rows of one published run: derive_runs of that run alone."""
    return derive_runs(warehouse, [run_id], progress)[run_id]


def derive_runs(warehouse: Warehouse, run_ids: list[str], progress=None) -> dict[str, bool]:
    """The derived rows of published runs (warehouse.derived.derive: small runs together, in batches),
    bounded by the memory policy. A run that cannot be derived (one too large for that limit, a warehouse
    this user may only read) is left to its readers, who compute what is not kept: False, with a note.
    progress: called with a line as each view is done."""
    failures = derived.derive(warehouse, run_ids, progress=progress)
    for run_id, failed in failures.items():
        if failed:
            eprint(
                f"note: run {run_id} is stored; its derived rows were not ({failed}): its readers compute them"
            )
    return {run_id: not failed for run_id, failed in failures.items()}


def eprint(*args) -> None:
    print(*args, file=sys.stderr)

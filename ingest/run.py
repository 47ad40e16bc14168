"""Ingest of a run: which files belong together, their ranks, and the runs row.

Each profiling session of a directory is one run (ingest/sessions.py tells sessions apart; a directory of
one session is one run, its trace files the ranks; a `capture_traces/` (or SGLang's
`graph_capture_profile/`) folder inside it holds capture
traces, which go with each of its runs); files named together on the command line are grouped the same
way; with `--one-run`, a directory, and the files named together, are one run whatever they say. Files are hashed first, so
the run id (derived from the content) is known before any work, and a run already in the warehouse
costs nothing. Ranks are ingested in parallel processes; a file that cannot be read is reported and
left out while the others still land.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from tracehouse.ingest.capture import write_empty
from tracehouse.ingest.files import NOT_TRACES, FileProblem, files_size, is_trace_file
from tracehouse.ingest.naming import parse_trace_name
from tracehouse.ingest.rank import RankResult, ingest_rank
from tracehouse.ingest.requests import write_empty as write_empty_requests
from tracehouse.ingest.sessions import NO_SIGNS, describe, peek_head, split_sessions
from tracehouse.warehouse import memory
from tracehouse.warehouse.schema import SCHEMA_VERSION, write_rows

from tracehouse.errors import TraceFormatError, TracehouseError
from tracehouse.interrupts import check as check_interrupt
from tracehouse.interrupts import ignore as ignore_interrupts
from tracehouse.interrupts import spawning


@dataclass
class RunPlan:
    """The files of one run, before any of them is read."""

    files: list[Path]
    capture_dir: Path | None = None
    skipped: list[str] = field(default_factory=list)  # non-trace files beside the traces
    notes: list[str] = field(default_factory=list)  # said of the run as a whole (runs.warnings)
    announce: str | None = None  # the line that names the runs of a split folder (ingest.sessions.describe)
    capture_note: str | None = None  # the line that says capture traces were found beside the profile


def is_sidecar_json(path: Path, limit: int = 1 << 20) -> bool:
    """A small plain .json beside the traces that is no trace (SGLang's server_args.json, a config):
    skipped and counted as a non-trace file, not refused. A trace holds `traceEvents` near its head."""
    if not path.name.endswith(".json") or path.stat().st_size > limit:
        return False
    with open(path, "rb") as f:
        head = f.read(limit)
    return b"traceEvents" not in head


# Folders of capture traces that profilers write beside a profile, found without --capture: ours (and vLLM's:
# `--profiler-config.capture_torch_profiler` writes <torch_profiler_dir>/capture_traces/), and SGLang's
# (`--enable-profile-cuda-graph` writes <SGLANG_TORCH_PROFILER_DIR>/graph_capture_profile/, the folder its
# profiles go to).
CAPTURE_FOLDERS = ("capture_traces", "graph_capture_profile")


def capture_folder(path: Path) -> Path | None:
    """The first folder of CAPTURE_FOLDERS inside a profile folder that holds a trace file, else None."""
    for name in CAPTURE_FOLDERS:
        folder = path / name
        if folder.is_dir() and any(is_trace_file(p) for p in folder.rglob("*")):
            return folder
    return None


def plan_runs(paths: list[Path], capture: Path | None = None, one_run: bool = False) -> list[RunPlan]:
    """Group the command's paths into runs: one per profiling session of each directory, and of the loose
    files together (ingest.sessions); one_run: each directory is one run, loose files together are one."""
    loose: list[Path] = []
    plans = []
    for path in paths:
        if path.is_dir():
            entries = sorted(p for p in path.iterdir() if p.is_file())
            traces = [p for p in entries if is_trace_file(p) and not is_sidecar_json(p)]
            skipped = [str(p) for p in entries if p not in traces and p.name not in NOT_TRACES]
            found = None if capture else capture_folder(path)
            cap = capture or found
            if not traces:
                raise TracehouseError(
                    f"{path}: no trace files (*.json, *.json.gz, Nsight Systems *.sqlite) in this directory"
                )
            folder_plans = _session_plans(str(path), traces, cap, skipped, one_run)
            if found is not None:
                note = f"{path}: capture traces found in {found.name}/ (used as --capture)"
                folder_plans[0].capture_note = note
            plans += folder_plans
        elif path.is_file():
            loose.append(path)
        else:
            raise TracehouseError(f"{path}: no such file or directory")
    if loose:
        plans += _session_plans("the files named", loose, capture, [], one_run)
    return plans


def _session_plans(
    where: str, files: list[Path], capture: Path | None, skipped: list[str], one_run: bool
) -> list[RunPlan]:
    """One plan per profiling session of these files (a folder's, or the loose files'); when there are
    several, the first plan's `announce` names them all (ingest says it on stderr); capture traces and skipped files belong to each (they are the folder's)."""
    if one_run or len(files) == 1:
        return [RunPlan(files=files, capture_dir=capture, skipped=skipped)]
    sessions = split_sessions(files)
    plans = [
        RunPlan(s.files, capture, skipped, [UNTOLD] if s.why == NO_SIGNS and len(s.files) > 1 else [])
        for s in sessions
    ]
    if len(sessions) > 1:
        plans[0].announce = describe(where, sessions)
    return plans


UNTOLD = "the files say nothing that tells profiling sessions apart; they were ingested as one run"


def run_id_for(hashes: list[str]) -> str:
    """Content-derived: the same set of files is the same run, whatever their names or order."""
    joined = "\n".join(sorted(hashes)).encode()
    return hashlib.sha256(joined).hexdigest()[:16]


def peek_distributed_info(path: Path) -> dict:
    """distributedInfo from the head of a file, without reading the rest (empty when not there); the head
    is read once per file version for planning and numbering (ingest.sessions.peek_head)."""
    return peek_head(path)[0]


def assign_ranks(files: list[Path]) -> tuple[list[int], list[str]]:
    """Rank per file: distributedInfo.rank, else the file name, else file order; must be unique."""
    notes = []
    candidates = []
    for order, path in enumerate(files):
        info = peek_distributed_info(path)
        named = parse_trace_name(path.name)
        rank = info.get("rank") if isinstance(info.get("rank"), int) else None
        if rank is None:
            rank = named.rank
        if rank is None and named.tp is not None and named.pp is None and named.dp is None:
            rank = named.tp
        candidates.append(rank)
    if None in candidates or len(set(candidates)) != len(candidates):
        if len(files) > 1 and None not in candidates:
            notes.append("ranks in the files repeat; ranks were numbered by file order")
        if None in candidates and len(files) > 1:
            notes.append("some files name no rank; ranks were numbered by file order")
        return list(range(len(files))), notes
    return [int(r) for r in candidates], notes


def _ingest_one(args: tuple) -> RankResult | FileProblem:
    path, rank, stage_phase, label_phase, out_dir, work_dir = args
    try:
        result = ingest_rank(Path(path), rank, stage_phase, Path(out_dir), Path(work_dir), label_phase)
        if result.empty_reason:  # nothing usable: refuse the file (its empty Parquet files go too)
            for table_dir in Path(out_dir).iterdir():
                (table_dir / f"rank-{rank:05d}.parquet").unlink(missing_ok=True)
            raise TraceFormatError(
                str(path),
                result.empty_reason,
                "event array",
                hint="the file was skipped; was the profiler stopped before it recorded "
                "any activity? Profile at least one step",
            )
        return result
    except TracehouseError as exc:  # one line: what, where, and what to do next
        return FileProblem(str(path), f"{exc} ({exc.hint})" if exc.hint else str(exc))
    except Exception as exc:  # noqa: BLE001 - a bug must not cost the other files of the command
        check_interrupt()  # DuckDB's "Query interrupted": the ingest stops, this file is no bad file
        if memory.is_out_of_memory(exc):  # one line: the setting to raise (warehouse.memory)
            return FileProblem(str(path), memory.out_of_memory_line(str(path)))
        return FileProblem(
            str(path),
            f"{path}: could not be ingested ({type(exc).__name__}: {exc}); "
            "this is a tracehouse bug, please report it",
        )


class RankPool:
    """Worker processes for rank files, shared by every run of one command (started on first use).

    Ranks of a run, and runs of a command, are independent files, so they are ingested side by side;
    one pool for the whole command pays the process start-up once.
    """

    def __init__(self, workers: int | None = None) -> None:
        self.workers = workers or os.cpu_count() or 1
        self._pool = None  # a concurrent.futures.ProcessPoolExecutor once started

    def map(self, jobs: list[tuple], fn=None, done=None, input_bytes: int | None = None) -> list:
        """fn(job) for every job (default: ingest one rank file), in worker processes when it pays;
        results in the order of `jobs`. done(job), if given, is called as each job finishes.
        input_bytes: the size of the jobs' files in all; below INLINE_BYTES they run in this process."""
        fn = fn or _ingest_one
        if self.workers <= 1 or len(jobs) <= 1 or (input_bytes is not None and input_bytes < INLINE_BYTES):
            results = []
            for job in jobs:
                results.append(fn(job))
                if done:
                    done(job)
            return results
        # imported here: a run of one file (most runs) never starts a pool, and the imports are 0.01 s
        from concurrent.futures import ProcessPoolExecutor, as_completed
        from multiprocessing import get_context

        if self._pool is None:
            _quiet_resource_tracker()
            # each worker's DuckDB gets its share of the cores instead of all of them
            share = max(1, (os.cpu_count() or 1) // self.workers)
            self._pool = ProcessPoolExecutor(
                max_workers=self.workers,
                mp_context=get_context("spawn"),
                initializer=_set_threads,
                initargs=(share, self.workers),
            )
        with spawning():  # the workers it starts begin deaf to SIGINT and SIGTERM (then ignore them)
            futures = {self._pool.submit(fn, job): i for i, job in enumerate(jobs)}
        results: list = [None] * len(jobs)
        try:
            for future in as_completed(futures):
                i = futures[future]
                results[i] = future.result()
                if done:
                    done(jobs[i])
        except BaseException:  # an interrupt (here, or a worker's), a worker that died: the others stop too
            self.abandon()
            raise
        return results

    def abandon(self) -> None:
        """Stop the workers now, their jobs unfinished (they write only into the run's staging folder)."""
        if self._pool is None:
            return
        workers = getattr(self._pool, "_processes", None) or {}  # the executor's own (no public way: 3.14)
        for process in list(workers.values()):
            process.kill()
        self._pool.shutdown(wait=True, cancel_futures=True)
        self._pool = None

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None

    def __enter__(self) -> RankPool:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _quiet_resource_tracker() -> None:
    """Start multiprocessing's resource tracker (the process that frees the pool's semaphores once this
    process is gone) with its "leaked semaphore objects" warning off: after an interrupt, `abandon` kills the
    workers mid-job and the executor's queue semaphores die with them, which the tracker then reports on
    stderr below the command's one-line answer (nothing of the user's leaks: the tracker frees them).
    The tracker inherits the environment when it starts, once per process."""
    from multiprocessing import resource_tracker

    before = os.environ.get("PYTHONWARNINGS")
    quiet = "ignore::UserWarning:multiprocessing.resource_tracker"
    os.environ["PYTHONWARNINGS"] = f"{before},{quiet}" if before else quiet
    try:
        resource_tracker.ensure_running()
    finally:
        if before is None:
            del os.environ["PYTHONWARNINGS"]
        else:
            os.environ["PYTHONWARNINGS"] = before


def _set_threads(threads: int, workers: int = 1) -> None:
    ignore_interrupts()  # a Ctrl-C reaches the terminal's whole process group: the parent stops the workers
    os.environ["TRACEHOUSE_THREADS"] = str(threads)
    # warehouse.memory: each worker's share of the memory
    os.environ["TRACEHOUSE_RANK_WORKERS"] = str(workers)


def ingest_files(
    files: list[Path],
    ranks: list[int],
    label_phase: str | None,
    out_dir: Path,
    work_dir: Path,
    progress=None,
    pool: RankPool | None = None,
) -> list[RankResult | FileProblem]:
    jobs = [
        (str(f), r, parse_trace_name(f.name).phase, label_phase, str(out_dir), str(work_dir / f"rank-{r}"))
        for f, r in zip(files, ranks)
    ]
    with RankPool() if pool is None else borrowed(pool) as workers:
        return workers.map(
            jobs,
            done=(lambda job: progress(f"ingested {job[0]}")) if progress else None,
            input_bytes=files_size(files),
        )


# Jobs whose files are smaller than this in all run in this process: a spawned worker imports DuckDB and
# pyarrow (about a second) before its first event, and small files take less than that to read.
INLINE_BYTES = 8 << 20


class borrowed:
    """A pool owned by the caller: used, not closed."""

    def __init__(self, pool: RankPool) -> None:
        self.pool = pool

    def __enter__(self) -> RankPool:
        return self.pool

    def __exit__(self, *exc) -> None:
        pass


def detect_framework(results: list[RankResult], files: list[Path]) -> str:
    """runs.framework (unless --label framework=X): tensorrt-llm when Python frames lie in a
    `tensorrt_llm/` package folder, sglang when frames lie in an `sglang/` package folder or SGLang's step
    annotations or trace names are there, vllm likewise for `vllm/` (SGLang first: it imports vLLM modules),
    tensorrt-llm when a kernel name says tensorrt_llm, cuda when every rank is a process of an Nsight Systems
    export without PyTorch's signs (ingest/nsys.py TORCH_EVIDENCE: a CUDA application), else pytorch. A
    folder merely named like a framework (`vllm_bench/run.py`) is not evidence (ingest/sql/80_summary.sql
    counts package folders only). The
    fusion catalogue's framework rows key on this value (sql/fusion/fusion_match.sql)."""
    hints: dict[str, int] = {}
    for r in results:
        for k, v in r.hints.items():
            hints[k] = hints.get(k, 0) + v
    names = " ".join(f.name for f in files)
    if hints.get("trtllm_frames"):
        return "tensorrt-llm"
    if (
        hints.get("sglang_frames")
        or hints.get("sglang_steps")
        or parse_trace_name(names).stage in ("DECODE", "EXTEND")
    ):
        return "sglang"
    if hints.get("vllm_frames") or hints.get("vllm_steps"):
        return "vllm"
    if hints.get("trtllm_kernels"):
        return "tensorrt-llm"
    if (
        results
        and all(r.metadata.get("source_format") == "nsys" for r in results)
        and not hints.get("torch_evidence")
    ):
        return "cuda"
    return "pytorch"


def hardware_name(results: list[RankResult]) -> str | None:
    for r in results:
        props = r.metadata.get("deviceProperties")
        if isinstance(props, list) and props:
            device = r.hints.get("main_device", -1)
            chosen = next((p for p in props if isinstance(p, dict) and p.get("id") == device), props[0])
            if isinstance(chosen, dict) and chosen.get("name"):
                return str(chosen["name"])
    return None


def build_runs_row(
    run_id: str,
    results: list[RankResult],
    files: list[Path],
    labels: dict[str, str],
    notes: list[str],
    skipped: list[str],
    rules_version: str,
    attributed: tuple[int, int] | None = None,
    extra_warnings: dict[str, int] | None = None,
) -> dict:
    """The one row of `runs` for this run (docs/tables.md, Tables).

    attributed: (activities, GPU ns) that have a Python launch site, from the trace or from capture
    traces (ingest/capture.py coverage); stored as attributed_activities / attributed_gpu_ns.
    extra_warnings: counts said of the run as a whole (files that could not be read, graph attribution),
    each replacing a rank's count of the same name."""
    results = sorted(results, key=lambda r: r.rank)
    first = results[0]
    dist = (
        first.metadata.get("distributedInfo")
        if isinstance(first.metadata.get("distributedInfo"), dict)
        else {}
    )
    named = [parse_trace_name(Path(r.path).name) for r in results]
    warnings: dict[str, int] = {}
    events: dict[str, int] = {}
    for r in results:
        for k, v in r.warnings.items():
            warnings[k] = warnings.get(k, 0) + v
        for k, v in r.events.items():
            events[k] = events.get(k, 0) + v
    for note in notes:
        warnings[note] = warnings.get(note, 0) + 1
    if skipped:
        warnings["non-trace files skipped"] = len(skipped)
    warnings.update(extra_warnings or {})
    phases = {n.phase for n in named if n.phase}
    graph = sum(r.hints.get("graph_launched", 0) for r in results)
    eager = sum(r.hints.get("eager_launched", 0) for r in results)
    capture_mode = "graph" if graph and not eager else "mixed" if graph else "eager" if eager else "none"
    framework = labels.get("framework") or detect_framework(results, files)
    hardware = labels.get("hardware") or hardware_name(results)
    starts = [r.span.get("trace_start_ns") for r in results if r.span.get("trace_start_ns") is not None]
    ends = [r.span.get("trace_end_ns") for r in results if r.span.get("trace_end_ns") is not None]
    base_times = [
        r.metadata.get("baseTimeNanoseconds")
        for r in results
        if isinstance(r.metadata.get("baseTimeNanoseconds"), int)
    ]

    def index(dim: str) -> int | None:
        values = {getattr(n, dim) for n in named if getattr(n, dim) is not None}
        return max(values) + 1 if values else None

    world_size = dist.get("world_size") if isinstance(dist.get("world_size"), int) else len(results)
    row = {
        "run_id": run_id,
        "ingested_at": datetime.now(timezone.utc),
        "files": [
            {
                "name": Path(r.path).name,
                "path": str(Path(r.path).resolve()),
                "size": r.size,
                "sha256": r.sha256,
                "rank": r.rank,
                "json_bytes": r.json_bytes,
            }
            for r in results
        ],
        "labels": sorted(labels.items()),
        "framework": framework,
        "model": labels.get("model"),
        "hardware": hardware,
        "world_size": world_size,
        "n_ranks": len(results),
        "tp": index("tp"),
        "pp": index("pp"),
        "dp": index("dp"),
        "ep": index("ep"),
        "phase": labels.get("phase") or (phases.pop() if len(phases) == 1 else "mixed" if phases else None),
        "capture_mode": capture_mode,
        "commit": labels.get("commit"),
        "commit_time": labels.get("commit_time"),
        "series": labels.get("series"),
        "base_time_ns": min(base_times) if base_times else None,
        "trace_start_ns": min(starts) if starts else None,
        "trace_end_ns": max(ends) if ends else None,
        "n_kernels": sum(r.rows.get("kernels", 0) for r in results),
        "event_counts": sorted(events.items()),
        "warnings": sorted(warnings.items()),
        "metadata": json.dumps(
            {
                Path(r.path).name: {k: v for k, v in r.metadata.items() if k != "deviceProperties"}
                for r in results
            },
            default=str,
        ),
        "device_properties": json.dumps(first.metadata.get("deviceProperties")),
        "schema_version": SCHEMA_VERSION,
        "rules_version": rules_version,
        "attributed_activities": attributed[0] if attributed else None,
        "attributed_gpu_ns": attributed[1] if attributed else None,
    }
    return row


def write_runs_row(row: dict, out_dir: Path) -> None:
    """The runs row, written last; a run without capture rows gets its zero-row kernel_sites file here, and
    its zero-row step_requests file (a requests file given at ingest replaces it once the run is stored)."""
    write_empty(out_dir)
    write_empty_requests(out_dir)
    (out_dir / "runs").mkdir(parents=True, exist_ok=True)
    write_rows("runs", [row], out_dir / "runs" / "run.parquet")  # as warehouse.schema declares it


def say(message: str) -> None:
    print(message, file=sys.stderr)

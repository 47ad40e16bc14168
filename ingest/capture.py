"""CUDA-graph attribution: the Python launch site of every replayed kernel, from capture traces.

A graph replay (`cudaGraphLaunch`, `hipGraphLaunch`) has no Python stack for the kernels it runs: one
launch call stands for all of them (1:N by correlation). The profile taken while the graph was captured
has what is missing: between `StreamBeginCapture` and `StreamEndCapture` (or inside a framework's
capture annotation such as `capture_32_DECODE`) every kernel of the graph was "launched" once, in order,
from its Python line and inside its cpu_op. This module

1. reads each capture trace through the same stages as a rank (ingest.rank.staged: source.read_trace ->
   DuckDB read_json -> the ingest/sql transforms, in a work folder of its own, so it streams and spills
   like a rank), and
   lists the launch calls of each capture window in order: kernel name (AMD launch calls name the
   kernel in `args.kernel`; else a GPU activity with the same correlation or an ac2g flow names it;
   NVIDIA launches during capture name none: order only), stream when the trace gives one, the
   innermost `python_function` frame with a source file and the innermost `cpu_op` (name, input dims);
2. for each graph launch of a rank, picks the capture by batch size (`execution_details.json`, else
   the capture annotation; the replay's bs comes from the step annotation around the launch call:
   `step[DECODE bs=32]`, `execute_32_context_...`), preferring the capture of the same rank;
3. aligns the capture's launches with the activities the launch replays (same correlation, by start):
   `node`  by graph node id, where the trace gives one (Kineto's `graph node id`): a graph numbers its
           nodes in the order the capture created them, so this is the launch order on any streams
           (matched by name where the capture names kernels, else one to one),
   `name`  in order and by kernel name (longest common subsequence),
   `order` one to one in order, when the capture names no kernel (NVIDIA) and the graph uses one stream,
   `stream` the same on a fork-join reconstruction of the launch order for multi-stream graphs: each
           block of side-stream work is put right after the main-stream activity that ended before it
           started (side work forked off the main stream is issued before the main stream's part of
           the fork, as in `side.wait_stream(main); with stream(side): ...; <main work>`),
   `greedy` what is left between aligned pairs, walked in order, skipping capture launches that do
           not fit (another kind, another name);
4. maps the event waits the capture recorded onto the alignment (ingest.capture_waits): each replayed
   activity lists the capture launches it waits for through a captured cudaStreamWaitEvent;
5. writes the per-rank table `kernel_sites` (one row per attributed replayed activity).

The view `kernel_launch_site` (sql/kernels/kernel_launch_site.sql) merges these rows with the launch sites
the trace itself gives, and the runs row stores the coverage (ingest/run.py build_runs_row).
"""

from __future__ import annotations

from pathlib import Path

import duckdb
from tracehouse.ingest.capture_align import Replayed, align
from tracehouse.ingest.capture_waits import captured_waits
from tracehouse.ingest.capture_windows import (
    CaptureWindow,
    batch_size_of,
    capture_files,
    execution_details,
    read_capture_windows,
)
from tracehouse.ingest.files import files_size
from tracehouse.warehouse import local_db
from tracehouse.warehouse.quoting import sql_string
from tracehouse.warehouse.schema import (
    COLUMNS,
    I32,
    I64,
    STR,
    cast_select,
    list_of,
    rows_select,
    scratch,
    write_rows,
)

from tracehouse.errors import TracehouseError

TABLE = "kernel_sites"


def _choose(windows: list[CaptureWindow], rank: int, bs: int | None, n: int) -> CaptureWindow | None:
    def score(w: CaptureWindow):
        bs_fit = (
            2 if (bs is not None and w.batch_size == bs) else 1 if (bs is None or w.batch_size is None) else 0
        )
        return (
            bs_fit,
            w.rank == rank,
            w.rank is None,
            len(w.launches) == n,
            -abs(len(w.launches) - n),
            -w.index,
        )

    return max(windows, key=score) if windows else None


GRAPH_KERNELS_SQL = """
SELECT correlation, kernel_id, stream, kind, name, start_ns, start_ns + dur_ns AS end_ns,
       launch_start_ns, launch_tid, graph_node_id
FROM read_parquet(?)
WHERE linked AND regexp_matches(launch_call, '(?i)graphlaunch')
ORDER BY correlation, start_ns, kernel_id
"""

ANNOTATIONS_SQL = """
SELECT tid, name, start_ns, start_ns + dur_ns AS end_ns FROM read_parquet(?)
WHERE lower(cat) = 'user_annotation' ORDER BY start_ns DESC
"""


def attribute_rank(
    out_dir: Path, rank: int, windows: list[CaptureWindow], spill: Path | None = None
) -> tuple[int, int]:
    """Write the kernel_sites file of one rank, from its staged kernels and cpu_ops and the capture
    windows; returns (its rows, the rank's replayed activities).

    Python aligns each graph launch with a capture window (a few hundred replays of a few graph shapes
    a step, each aligned once per shape) and names each distinct alignment; DuckDB then writes a row
    per replayed activity by joining the activities, by their position in their graph launch, with the
    alignment of that launch and the launches of the window (a million rows never pass through Python).
    spill: DuckDB's spill folder past the memory policy's limit (warehouse.memory)."""
    kernels_file = out_dir / "kernels" / f"rank-{rank:05d}.parquet"
    ops_file = out_dir / "cpu_ops" / f"rank-{rank:05d}.parquet"
    if not kernels_file.is_file():
        write_kernel_sites([], out_dir, rank)
        return 0, 0
    con = local_db.connect(spill=spill)
    try:
        annotations = con.execute(ANNOTATIONS_SQL, [str(ops_file)]).fetchall() if ops_file.is_file() else []
        replayed = 0
        window_number = {id(w): i for i, w in enumerate(windows)}
        cache: dict = {}
        alignments: dict[tuple, int] = {}  # (window number, its pairs) -> alignment number
        replays: list[dict] = []  # one per graph launch that has an alignment
        sites = 0
        for corr, ks in _graph_launches(con.execute(GRAPH_KERNELS_SQL, [str(kernels_file)])):
            replayed += len(ks)
            acts = [Replayed(k[1], k[2], k[3], k[4], k[5], k[6], k[9]) for k in ks]
            t, tid = ks[0][7], ks[0][8]
            bs = None
            for a_tid, a_name, a_start, a_end in annotations:  # innermost (latest start) first
                if a_start <= t <= a_end and (tid is None or str(a_tid) == str(tid)):
                    bs = batch_size_of(a_name)
                    if bs is not None:
                        break
            window = _choose(windows, rank, bs, len(acts))
            if window is None:
                continue
            signature = (id(window), tuple((a.stream, a.kind, a.name, a.node) for a in acts))
            # the fork-join order depends on timing, so a cached alignment is reused only for the same shape
            pairs = cache.get(signature) if len(signature[1]) and len({a.stream for a in acts}) == 1 else None
            if pairs is None:
                pairs = align(window.launches, acts)
                cache[signature] = pairs
            waits = captured_waits(window, {c: acts[r].stream for r, c, _ in pairs})
            key = (
                window_number[id(window)],
                tuple(pairs),
                tuple(sorted((c, tuple(w)) for c, w in waits.items())),
            )
            replays.append(
                {"graph_correlation": corr, "alignment": alignments.setdefault(key, len(alignments))}
            )
            sites += len(pairs)
        _write_sites(con, rank, kernels_file, windows, alignments, replays, out_dir)
    finally:
        con.close()
    return sites, replayed


def _graph_launches(result, batch: int = 10_000):
    """(correlation, its activities) of each graph launch, from GRAPH_KERNELS_SQL's rows (ordered by
    correlation) fetched a batch at a time: a run's millions of replayed activities are never held at once."""
    corr, group = None, []
    while rows := result.fetchmany(batch):
        for row in rows:
            if row[0] != corr and group:
                yield corr, group
                group = []
            corr = row[0]
            group.append(row)
    if group:
        yield corr, group


# In two steps, so that no sort or join carries the wide launch columns (stacks): the narrow rows, sorted,
# then each joined with its launch (a few hundred rows) as it is written. One sort of the wide rows ran a
# 200 MB trace out of a 128 MB limit.
SITES_NARROW_SQL = """
CREATE TEMP TABLE capture_sites AS
WITH replayed AS (  -- GRAPH_KERNELS_SQL's activities, numbered in its order within their graph launch
    SELECT kernel_id, correlation,
           row_number() OVER (PARTITION BY correlation ORDER BY start_ns, kernel_id) - 1 AS position
    FROM read_parquet($kernels)
    WHERE linked AND regexp_matches(launch_call, '(?i)graphlaunch')
)
SELECT r.kernel_id, p.window, p.launch, p.match, g.graph_correlation, p.waits
FROM replayed AS r
JOIN capture_replays AS g ON g.graph_correlation = r.correlation
JOIN capture_pairs AS p ON p.alignment = g.alignment AND p.position = r.position
ORDER BY r.kernel_id
"""
SITES_SQL = """
SELECT $rank AS rank, s.kernel_id, l.file, l.line, l.function, l.cpu_op_name, l.cpu_op_input_dims,
       'capture' AS source, l.capture_file, l.capture_window, l.capture_seq, l.capture_kernel_name,
       s.match, s.graph_correlation, l.stack, s.waits AS capture_waits
FROM capture_sites AS s
JOIN capture_launches AS l ON l.window = s.window AND l.launch = s.launch
"""


def _write_sites(con, rank, kernels_file, windows, alignments, replays, out_dir) -> None:
    """kernel_sites of one rank from the named alignments (attribute_rank), written by DuckDB."""
    if not replays:
        write_kernel_sites([], out_dir, rank)
        return
    pairs, used = [], set()
    for (window, aligned, waits), alignment in alignments.items():
        awaited = dict(waits)
        for position, launch, match in aligned:
            pairs.append(
                {
                    "alignment": alignment,
                    "position": position,
                    "window": window,
                    "launch": launch,
                    "match": match,
                    "waits": list(awaited[launch]) if launch in awaited else None,
                }
            )
            used.add((window, launch))
    launches = []
    for window, c in sorted(used):
        w, launch = windows[window], windows[window].launches[c]
        launches.append(
            {
                "window": window,
                "launch": c,
                "file": launch.file,
                "line": launch.line,
                "function": launch.function,
                "cpu_op_name": launch.cpu_op_name,
                "cpu_op_input_dims": launch.cpu_op_input_dims,
                "capture_file": w.file,
                "capture_window": w.index,
                "capture_seq": launch.seq,
                "capture_kernel_name": launch.name,
                "stack": launch.stack,
            }
        )
    declared = {name: kind for name, kind, _ in COLUMNS[TABLE]}
    load(con, "capture_replays", [("graph_correlation", I64), ("alignment", I32)], replays)
    load(
        con,
        "capture_pairs",
        [
            ("alignment", I32),
            ("position", I32),
            ("window", I32),
            ("launch", I32),
            ("match", STR),
            ("waits", list_of(I32)),
        ],
        pairs,
    )
    site_columns = [
        "file", "line", "function", "cpu_op_name", "cpu_op_input_dims",
        "capture_file", "capture_window", "capture_seq", "capture_kernel_name", "stack",
    ]  # fmt: skip
    load(
        con,
        "capture_launches",
        [("window", I32), ("launch", I32)] + [(name, declared[name]) for name in site_columns],
        launches,
    )
    target = out_dir / TABLE
    target.mkdir(parents=True, exist_ok=True)
    path = target / f"rank-{rank:05d}.parquet"
    con.execute(SITES_NARROW_SQL, {"kernels": str(kernels_file)})
    con.execute(
        f"COPY (SELECT {cast_select(TABLE, 'sites', with_rank=True)} FROM ({SITES_SQL}) AS sites) "
        f"TO {sql_string(str(path))} (FORMAT parquet, COMPRESSION zstd)",
        {"rank": rank},
    )


def load(con: duckdb.DuckDBPyConnection, name: str, columns: list[tuple], rows: list[dict]) -> None:
    select, params = rows_select(columns, rows)
    con.execute(f"CREATE TEMP TABLE {name} AS {select}", params)


def write_kernel_sites(rows: list[dict], out_dir: Path, rank: int) -> None:
    target = out_dir / TABLE
    target.mkdir(parents=True, exist_ok=True)
    write_rows(TABLE, rows, target / f"rank-{rank:05d}.parquet")


def _attribute_rank_job(job: tuple) -> tuple[int, int]:
    """attribute_rank of one rank (run in a worker process)."""
    out_dir, rank, windows, spill = job
    return attribute_rank(Path(out_dir), rank, windows, Path(spill))


def _read_capture_job(job: tuple) -> list[CaptureWindow] | None:
    """One capture trace's windows (run in a worker process); None when the file cannot be read."""
    path, work_dir, details, label = job
    try:
        return read_capture_windows(Path(path), Path(work_dir), details, label)
    except (TracehouseError, duckdb.Error, OSError):
        return None


def attribute_run(
    capture: Path | None,
    ranks: list[int],
    out_dir: Path,
    work_dir: Path,
    pool=None,
    rank_bytes: int | None = None,
) -> dict[str, int]:
    """Read the capture traces once and write kernel_sites for every rank; returns warnings for the run.

    pool: an ingest.run.RankPool, to read the capture traces, and then attribute the ranks, side by side
    (default: one by one); rank_bytes: the ranks' JSON bytes, which tell the pool whether that pays."""
    warnings: dict[str, int] = {}
    windows: list[CaptureWindow] = []
    files = capture_files(capture)
    details = execution_details(capture) if capture is not None and files else {}
    root = capture if capture is not None and capture.is_dir() else None
    jobs = [
        (
            str(path),
            str(work_dir / f"capture-{i}"),
            details,
            str(path.relative_to(root)) if root is not None else path.name,
        )
        for i, path in enumerate(files)
    ]
    if pool is not None:
        results = pool.map(jobs, _read_capture_job, input_bytes=files_size(files))
    else:
        results = [_read_capture_job(j) for j in jobs]
    for found in results:
        if found is None:
            warnings["capture traces that could not be read"] = (
                warnings.get("capture traces that could not be read", 0) + 1
            )
        else:
            windows.extend(found)
    if files and not windows:
        warnings["capture traces without a capture window"] = len(files)
    jobs = [(str(out_dir), rank, windows, str(work_dir / f"sites-{rank}")) for rank in ranks]
    if pool is not None:
        counts = pool.map(jobs, _attribute_rank_job, input_bytes=rank_bytes)
    else:
        counts = [_attribute_rank_job(job) for job in jobs]
    missed = sum(replayed - sites for sites, replayed in counts)
    if missed:
        warnings["replayed activities without a capture launch"] = missed
    return warnings


def write_empty(out_dir: Path) -> None:
    """A zero-row kernel_sites file, for a run (or the schema partition) that has no capture rows."""
    target = out_dir / TABLE
    if target.is_dir() and any(target.iterdir()):
        return
    write_kernel_sites([], out_dir, 0)


COVERAGE_SQL = """
SELECT count(*) AS activities, coalesce(sum(k.dur_ns), 0) AS gpu_ns
FROM read_parquet(?) k
WHERE k.python_frame_id IS NOT NULL
   OR EXISTS (SELECT 1 FROM read_parquet(?) s WHERE s.rank = k.rank AND s.kernel_id = k.kernel_id)
"""


def coverage(out_dir: Path) -> tuple[int, int]:
    """(activities, GPU ns) with a Python launch site, from the trace or from capture (staged files)."""
    kernels = out_dir / "kernels"
    if not kernels.is_dir() or not any(kernels.glob("*.parquet")):
        return 0, 0
    sites = out_dir / TABLE
    if not sites.is_dir() or not any(sites.glob("*.parquet")):
        write_empty(out_dir)
    with scratch() as con:  # the process's one scratch database, not one more (~0.02 CPU-s to open)
        n, ns = con.execute(COVERAGE_SQL, [str(kernels / "*.parquet"), str(sites / "*.parquet")]).fetchone()
    return int(n), int(ns)

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
   `name`  in order and by kernel name (longest common subsequence),
   `order` one to one in order, when the capture names no kernel (NVIDIA) and the graph uses one stream,
   `stream` the same on a fork-join reconstruction of the launch order for multi-stream graphs: each
           block of side-stream work is put right after the main-stream activity that ended before it
           started (side work forked off the main stream is issued before the main stream's part of
           the fork, as in `side.wait_stream(main); with stream(side): ...; <main work>`),
   `greedy` what is left between aligned pairs, walked in order, skipping capture launches that do
           not fit (another kind, another name);
4. writes the per-rank table `kernel_sites` (one row per attributed replayed activity).

The view `kernel_launch_site` (sql/kernels/kernel_launch_site.sql) merges these rows with the launch sites
the trace itself gives, and the runs row stores the coverage (ingest/run.py build_runs_row).
"""

from __future__ import annotations

import bisect
import difflib
import itertools
import json
import re
import shutil
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import duckdb
from tracehouse.ingest.files import files_size, is_trace_file
from tracehouse.ingest.rank import staged
from tracehouse.warehouse import local_db
from tracehouse.warehouse.quoting import sql_string
from tracehouse.warehouse.schema import COLUMNS, I32, I64, STR, cast_select, rows_select, write_rows

from tracehouse.errors import TracehouseError

TABLE = "kernel_sites"


BS_PATTERNS = (
    re.compile(r"\bbs\s*=\s*(\d+)"),
    re.compile(r"^execute_(\d+)_context"),
    re.compile(r"^capture_(\d+)(?:_|$)"),
    re.compile(r"batch_size\s*[=_:]\s*(\d+)"),
)
CAPTURE_ANNOTATION_RE = re.compile(r"^capture_(\d+)(?:_(\w+))?")
RANK_IN_NAME_RE = re.compile(r"rank[_-]?(\d+)", re.IGNORECASE)


@dataclass
class CaptureLaunch:
    seq: int
    call: str
    kind: str  # kernel | memcpy | memset
    name: str | None
    stream: int | None
    file: str | None
    line: int | None
    function: str | None
    cpu_op_name: str | None
    cpu_op_input_dims: str | None
    stack: list[str] | None = None  # python_function frame names around the launch, innermost first


@dataclass
class CaptureWindow:
    file: str  # the capture trace's name (relative to the capture folder)
    index: int  # window number inside that file
    rank: int | None
    batch_size: int | None
    mode: str | None
    start_ns: int
    end_ns: int
    launches: list[CaptureLaunch] = field(default_factory=list)

    @property
    def named(self) -> bool:
        return any(c.name for c in self.launches if c.kind == "kernel")


# ---------------------------------------------------------------------------------------------------
# 1. capture traces -> windows of launches


def capture_files(capture: Path | None) -> list[Path]:
    """The trace files of a capture folder (or the one file given)."""
    if capture is None:
        return []
    if capture.is_file():
        return [capture]
    if not capture.is_dir():
        return []
    return sorted(p for p in capture.rglob("*") if is_trace_file(p))


def execution_details(capture: Path) -> dict[str, dict]:
    """execution_details.json: {file name: {batch_size, mode}} (empty when absent or unreadable)."""
    folder = capture if capture.is_dir() else capture.parent
    path = folder / "execution_details.json"
    if not path.is_file():
        return {}
    try:
        entries = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    out = {}
    for e in entries if isinstance(entries, list) else []:
        if isinstance(e, dict) and e.get("file"):
            bs = e.get("batch_size")
            out[Path(str(e["file"])).name] = {
                "batch_size": int(bs) if isinstance(bs, (int, float)) else None,
                "mode": e.get("mode"),
            }
    return out


WINDOWS_SQL = """
WITH begins AS (
    SELECT ev_id, pid, tid, start_ns FROM host_api WHERE name ILIKE '%StreamBeginCapture%'
),
ends AS (
    SELECT ev_id, pid, tid, start_ns FROM host_api WHERE name ILIKE '%StreamEndCapture%'
),
paired AS (
    SELECT b.pid, b.tid, b.start_ns, min(e.start_ns) AS end_ns
    FROM begins b JOIN ends e ON e.pid = b.pid AND e.tid = b.tid AND e.start_ns >= b.start_ns
    GROUP BY b.ev_id, b.pid, b.tid, b.start_ns
),
annotations AS (
    SELECT pid, tid, name, start_ns, start_ns + dur_ns AS end_ns FROM cpu_ops
    WHERE lower(cat) = 'user_annotation' AND regexp_matches(name, '^capture_\\d+')
)
SELECT 'api' AS kind, p.pid, p.tid, p.start_ns, p.end_ns,
       (SELECT a.name FROM annotations a WHERE a.pid = p.pid AND a.tid = p.tid AND a.start_ns <= p.start_ns
          AND a.end_ns >= p.end_ns ORDER BY a.start_ns DESC LIMIT 1) AS annotation
FROM paired p
UNION ALL
SELECT 'annotation', a.pid, a.tid, a.start_ns, a.end_ns, a.name FROM annotations a
ORDER BY start_ns
"""

LAUNCHES_SQL = """
CREATE OR REPLACE TABLE capture_launches AS
WITH calls AS (
    SELECT h.ev_id, h.pid, h.tid, h.name AS call, h.start_ns, h.correlation,
           CASE WHEN lower(h.name) LIKE '%launch%kernel%' THEN 'kernel'
                WHEN lower(h.name) LIKE '%memcpy%async%' OR lower(h.name) LIKE '%memcpywithstream%' THEN 'memcpy'
                WHEN lower(h.name) LIKE '%memset%async%' THEN 'memset' END AS kind
    FROM host_api h
),
chosen AS (
    SELECT c.*, w.window_id FROM calls c
    JOIN capture_windows w ON w.pid = c.pid AND w.tid = c.tid AND c.start_ns >= w.start_ns AND c.start_ns <= w.end_ns
    WHERE c.kind IS NOT NULL
),
gpu_by_corr AS (
    SELECT correlation, any_value(name) AS name, any_value(stream) AS stream
    FROM events WHERE gpu_kind IS NOT NULL AND correlation IS NOT NULL GROUP BY correlation
),
gpu_by_flow AS (
    SELECT f.src_event_id AS ev_id, any_value(e.name) AS name, any_value(e.stream) AS stream
    FROM flows f JOIN events e ON e.ev_id = f.dst_event_id AND e.gpu_kind IS NOT NULL
    WHERE f.src_event_id IS NOT NULL GROUP BY f.src_event_id
),
all_frame_hits AS (
    -- every python_function frame around the launch (the whole stack, nn.Module frames included)
    SELECT c.ev_id, f.name, f.file, f.line, f.function,
           row_number() OVER (PARTITION BY c.ev_id ORDER BY f.start_ns DESC, f.dur_ns, f.frame_id DESC) AS depth
    FROM chosen c JOIN python_frames f
      ON f.pid = c.pid AND f.tid = c.tid AND f.start_ns <= c.start_ns AND f.start_ns + f.dur_ns >= c.start_ns
),
frame_hits AS (
    SELECT ev_id, file, line, function,
           row_number() OVER (PARTITION BY ev_id ORDER BY depth) AS rn
    FROM all_frame_hits
    WHERE file IS NOT NULL
),
stacks AS (
    SELECT ev_id, list(name ORDER BY depth) AS stack FROM all_frame_hits GROUP BY ev_id
),
op_hits AS (
    SELECT c.ev_id, o.name, o.input_dims,
           row_number() OVER (PARTITION BY c.ev_id ORDER BY o.start_ns DESC, o.dur_ns, o.op_id DESC) AS rn
    FROM chosen c JOIN cpu_ops o
      ON o.pid = c.pid AND o.tid = c.tid AND o.start_ns <= c.start_ns AND o.start_ns + o.dur_ns >= c.start_ns
    WHERE lower(o.cat) = 'cpu_op'
)
SELECT c.window_id, c.ev_id, c.call, c.kind, c.start_ns,
       coalesce(nullif(trim(e.kernel_arg), ''), g.name, fl.name) AS name,
       coalesce(e.stream, g.stream, fl.stream) AS stream,
       fh.file, fh.line, fh.function, oh.name AS cpu_op_name, oh.input_dims AS cpu_op_input_dims,
       st.stack
FROM chosen c
JOIN events e ON e.ev_id = c.ev_id
LEFT JOIN gpu_by_corr g ON g.correlation = c.correlation
LEFT JOIN gpu_by_flow fl ON fl.ev_id = c.ev_id
LEFT JOIN frame_hits fh ON fh.ev_id = c.ev_id AND fh.rn = 1
LEFT JOIN op_hits oh ON oh.ev_id = c.ev_id AND oh.rn = 1
LEFT JOIN stacks st ON st.ev_id = c.ev_id
ORDER BY c.window_id, c.start_ns, c.ev_id
"""


def _rank_of(path: Path, metadata: dict) -> int | None:
    m = RANK_IN_NAME_RE.search(path.name)
    if m:
        return int(m.group(1))
    info = metadata.get("distributedInfo")
    if isinstance(info, dict) and isinstance(info.get("rank"), int):
        return info["rank"]
    return None


def batch_size_of(text: str | None) -> int | None:
    if not text:
        return None
    for pattern in BS_PATTERNS:
        m = pattern.search(text)
        if m:
            return int(m.group(1))
    return None


def read_capture_windows(
    path: Path, work_dir: Path, details: dict[str, dict] | None = None, label: str | None = None
) -> list[CaptureWindow]:
    """Every capture window of one capture trace, with its launch calls in order."""
    details = details or {}
    try:
        # one more `args` key: `kernel` (the kernel a launch call names)
        with staged(path, work_dir, extra_args={"kernel_arg": "kernel"}) as file:
            con = file.con
            rows = con.execute(WINDOWS_SQL).fetchall()
            # API windows win; an annotation window counts only where no API window lies inside it
            api = [r for r in rows if r[0] == "api"]
            windows = list(api)
            for r in rows:
                if r[0] == "annotation" and not any(
                    a[1] == r[1] and a[2] == r[2] and r[3] <= a[3] <= r[4] for a in api
                ):
                    windows.append(r)
            windows.sort(key=lambda r: r[3])
            con.execute(
                "CREATE OR REPLACE TABLE capture_windows (window_id INTEGER, pid VARCHAR, tid VARCHAR, "
                "start_ns BIGINT, end_ns BIGINT)"
            )
            if windows:
                con.executemany(
                    "INSERT INTO capture_windows VALUES (?, ?, ?, ?, ?)",
                    [(i, w[1], w[2], w[3], w[4]) for i, w in enumerate(windows)],
                )
            con.execute(LAUNCHES_SQL)
            launches = con.execute(
                "SELECT window_id, call, kind, name, stream, file, line, function, cpu_op_name, cpu_op_input_dims, "
                "stack FROM capture_launches ORDER BY window_id, start_ns, ev_id"
            ).fetchall()
    finally:
        shutil.rmtree(work_dir, ignore_errors=True)
    source = file.source
    name = label or path.name
    detail = details.get(path.name, {})
    rank = _rank_of(path, source.metadata)
    out = []
    for i, w in enumerate(windows):
        ann = w[5]
        m = CAPTURE_ANNOTATION_RE.match(ann or "")
        bs = batch_size_of(ann)
        if bs is None and len(windows) == 1:
            bs = detail.get("batch_size")
        mode = (m.group(2) if m and m.group(2) else None) or detail.get("mode")
        out.append(
            CaptureWindow(file=name, index=i, rank=rank, batch_size=bs, mode=mode, start_ns=w[3], end_ns=w[4])
        )
    for row in launches:
        win = out[row[0]]
        win.launches.append(
            CaptureLaunch(
                len(win.launches),
                row[1],
                row[2],
                row[3],
                None if row[4] is None else int(row[4]),
                row[5],
                row[6],
                row[7],
                row[8],
                row[9],
                list(row[10]) if row[10] is not None else None,
            )
        )
    return [w for w in out if w.launches]


# ---------------------------------------------------------------------------------------------------
# 2-3. graph launches of a rank -> capture window -> alignment


@dataclass
class Replayed:
    kernel_id: int
    stream: int | None
    kind: str
    name: str
    start_ns: int
    end_ns: int


def _key(kind: str, name: str | None):
    return (kind, name) if kind == "kernel" else (kind,)


def _lcs_pairs(a: list, b: list) -> list[tuple[int, int]]:
    sm = difflib.SequenceMatcher(a=a, b=b, autojunk=False)
    return [(blk.a + k, blk.b + k) for blk in sm.get_matching_blocks() for k in range(blk.size)]


def forkjoin_order(acts: list[Replayed]) -> list[int]:
    """A launch order for a multi-stream replay (indices into acts, which are sorted by start).

    The main stream (the one with the most activities) keeps its order; the other streams' work is cut
    into blocks (a new block starts where a main-stream activity ran entirely between two consecutive
    activities of the side stream), and each block is placed right after the main-stream activity that
    ended last before the block started (the fork point)."""
    by_stream: dict = defaultdict(list)
    for i, a in enumerate(acts):
        by_stream[a.stream].append(i)
    main = max(by_stream, key=lambda s: (len(by_stream[s]), -by_stream[s][0]))
    mains = by_stream[main]
    m_starts = [acts[i].start_ns for i in mains]
    m_ends = [acts[i].end_ns for i in mains]
    running_end = []  # max end so far: bisect needs a monotone list
    for e in m_ends:
        running_end.append(max(e, running_end[-1]) if running_end else e)
    after: dict[int, list[tuple[int, list[int]]]] = defaultdict(list)
    for stream, seq in by_stream.items():
        if stream == main:
            continue
        blocks: list[list[int]] = []
        for i in seq:
            if blocks:
                prev = acts[blocks[-1][-1]]
                j = bisect.bisect_left(m_starts, prev.end_ns)
                if j < len(mains) and m_ends[j] <= acts[i].start_ns:
                    blocks.append([i])
                    continue
                blocks[-1].append(i)
            else:
                blocks.append([i])
        for block in blocks:
            pred = bisect.bisect_right(running_end, acts[block[0]].start_ns) - 1
            after[pred].append((acts[block[0]].start_ns, block))
    order: list[int] = []
    for _, block in sorted(after.get(-1, [])):
        order.extend(block)
    for p, i in enumerate(mains):
        order.append(i)
        for _, block in sorted(after.get(p, [])):
            order.extend(block)
    return order


def align(launches: list[CaptureLaunch], acts: list[Replayed]) -> list[tuple[int, int, str]]:
    """(index into acts, index into launches, match kind) for every activity that could be aligned."""
    named = any(c.name for c in launches if c.kind == "kernel")
    streams = {a.stream for a in acts}
    orders = [("start", list(range(len(acts))))]
    if len(streams) > 1:
        orders.append(("stream", forkjoin_order(acts)))
    ckeys = [_key(c.kind, c.name if named else None) for c in launches]
    best: tuple[int, str, list[int], list[tuple[int, int]]] | None = None
    for label, order in orders:
        rkeys = [_key(acts[j].kind, acts[j].name if named else None) for j in order]
        if named:
            pairs = [(order[rb], ca) for ca, rb in _lcs_pairs(ckeys, rkeys)]
            match = "name" if label == "start" else "stream"
        else:
            if len(order) != len(launches) or rkeys != ckeys:
                continue
            pairs = [(order[k], k) for k in range(len(order))]
            match = "order" if label == "start" else "stream"
            if len(streams) > 1 and label == "start":
                continue  # by start, concurrent streams interleave unlike the launches: not an order
        score = len(pairs)
        if best is None or score > best[0]:
            best = (score, match, order, pairs)
        if score == len(acts) and (named or label != "start"):
            break
    if best is None:
        order, pairs, match = (
            (forkjoin_order(acts) if len(streams) > 1 else list(range(len(acts)))),
            [],
            "greedy",
        )
    else:
        _, match, order, pairs = best
    out = [(r, c, match) for r, c in pairs]
    if len(out) < len(acts):
        out.extend(_greedy(launches, acts, order, pairs, named))
    return out


def _greedy(launches, acts, order, pairs, named) -> list[tuple[int, int, str]]:
    """Between aligned pairs, walk the leftovers in order; skip capture launches that do not fit."""
    pos = {r: k for k, r in enumerate(order)}
    anchors = sorted((pos[r], c) for r, c in pairs)
    bounds = [(-1, -1)] + anchors + [(len(order), len(launches))]
    out = []
    for (r0, c0), (r1, c1) in itertools.pairwise(bounds):
        ci = c0 + 1
        for rp in range(r0 + 1, r1):
            a = acts[order[rp]]
            k = ci
            while k < c1:
                c = launches[k]
                if c.kind == a.kind and (not named or c.kind != "kernel" or not c.name or c.name == a.name):
                    break
                k += 1
            if k < c1:
                out.append((order[rp], k, "greedy"))
                ci = k + 1
    return out


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
       launch_start_ns, launch_tid
FROM read_parquet(?)
WHERE linked AND regexp_matches(launch_call, '(?i)graphlaunch')
ORDER BY correlation, start_ns, kernel_id
"""

ANNOTATIONS_SQL = """
SELECT tid, name, start_ns, start_ns + dur_ns AS end_ns FROM read_parquet(?)
WHERE lower(cat) = 'user_annotation' ORDER BY start_ns DESC
"""


def attribute_rank(out_dir: Path, rank: int, windows: list[CaptureWindow]) -> tuple[int, int]:
    """Write the kernel_sites file of one rank, from its staged kernels and cpu_ops and the capture
    windows; returns (its rows, the rank's replayed activities).

    Python aligns each graph launch with a capture window (a few hundred replays of a few graph shapes
    a step, each aligned once per shape) and names each distinct alignment; DuckDB then writes a row
    per replayed activity by joining the activities, by their position in their graph launch, with the
    alignment of that launch and the launches of the window (a million rows never pass through Python)."""
    kernels_file = out_dir / "kernels" / f"rank-{rank:05d}.parquet"
    ops_file = out_dir / "cpu_ops" / f"rank-{rank:05d}.parquet"
    if not kernels_file.is_file():
        write_kernel_sites([], out_dir, rank)
        return 0, 0
    con = local_db.connect()
    try:
        kernels = con.execute(GRAPH_KERNELS_SQL, [str(kernels_file)]).fetchall()
        annotations = con.execute(ANNOTATIONS_SQL, [str(ops_file)]).fetchall() if ops_file.is_file() else []
        graphs: dict[int, list] = defaultdict(list)
        for k in kernels:
            graphs[k[0]].append(k)
        window_number = {id(w): i for i, w in enumerate(windows)}
        cache: dict = {}
        alignments: dict[tuple, int] = {}  # (window number, its pairs) -> alignment number
        replays: list[dict] = []  # one per graph launch that has an alignment
        sites = 0
        for corr, ks in graphs.items():
            acts = [Replayed(k[1], k[2], k[3], k[4], k[5], k[6]) for k in ks]
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
            signature = (id(window), tuple((a.stream, a.kind, a.name) for a in acts))
            # the fork-join order depends on timing, so a cached alignment is reused only for the same shape
            pairs = cache.get(signature) if len(signature[1]) and len({a.stream for a in acts}) == 1 else None
            if pairs is None:
                pairs = align(window.launches, acts)
                cache[signature] = pairs
            key = (window_number[id(window)], tuple(pairs))
            replays.append(
                {"graph_correlation": corr, "alignment": alignments.setdefault(key, len(alignments))}
            )
            sites += len(pairs)
        _write_sites(con, rank, kernels_file, windows, alignments, replays, out_dir)
    finally:
        con.close()
    return sites, len(kernels)


SITES_SQL = """
WITH replayed AS (  -- GRAPH_KERNELS_SQL's activities, numbered in its order within their graph launch
    SELECT kernel_id, correlation,
           row_number() OVER (PARTITION BY correlation ORDER BY start_ns, kernel_id) - 1 AS position
    FROM read_parquet($kernels)
    WHERE linked AND regexp_matches(launch_call, '(?i)graphlaunch')
)
SELECT $rank AS rank, r.kernel_id, l.file, l.line, l.function, l.cpu_op_name, l.cpu_op_input_dims,
       'capture' AS source, l.capture_file, l.capture_window, l.capture_seq, l.capture_kernel_name,
       p.match, g.graph_correlation, l.stack
FROM replayed AS r
JOIN capture_replays AS g ON g.graph_correlation = r.correlation
JOIN capture_pairs AS p ON p.alignment = g.alignment AND p.position = r.position
JOIN capture_launches AS l ON l.window = p.window AND l.launch = p.launch
ORDER BY r.kernel_id
"""


def _write_sites(con, rank, kernels_file, windows, alignments, replays, out_dir) -> None:
    """kernel_sites of one rank from the named alignments (attribute_rank), written by DuckDB."""
    if not replays:
        write_kernel_sites([], out_dir, rank)
        return
    pairs, used = [], set()
    for (window, aligned), alignment in alignments.items():
        for position, launch, match in aligned:
            pairs.append(
                {
                    "alignment": alignment,
                    "position": position,
                    "window": window,
                    "launch": launch,
                    "match": match,
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
        [("alignment", I32), ("position", I32), ("window", I32), ("launch", I32), ("match", STR)],
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
    con.execute(
        f"COPY (SELECT {cast_select(TABLE, 'sites', with_rank=True)} FROM ({SITES_SQL}) AS sites) "
        f"TO {sql_string(str(path))} (FORMAT parquet, COMPRESSION zstd)",
        {"kernels": str(kernels_file), "rank": rank},
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
    out_dir, rank, windows = job
    return attribute_rank(Path(out_dir), rank, windows)


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
    jobs = [(str(out_dir), rank, windows) for rank in ranks]
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
    con = local_db.connect()
    try:
        n, ns = con.execute(COVERAGE_SQL, [str(kernels / "*.parquet"), str(sites / "*.parquet")]).fetchone()
    finally:
        con.close()
    return int(n), int(ns)

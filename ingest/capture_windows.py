"""Capture traces read into capture windows: each window's launch calls in order, with the kernel name,
stream, Python site and cpu_op each one has (step 1 of ingest.capture's attribution), and the batch size
each window was captured for."""

from __future__ import annotations

import json
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from tracehouse.ingest.files import is_trace_file
from tracehouse.ingest.rank import staged

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
class CaptureEvent:
    """A cudaEventRecord / cudaStreamWaitEvent call inside a capture window (hipEventRecord ...). stream:
    the waiting stream of a wait (its `cuda_sync` "Stream Wait Event" record's `stream`, else the call's
    own `stream` argument), a record's stream where the trace gives one; ids as the capture trace writes
    them. wait_on_stream, wait_on_corr: the wait's record names the recorded stream and the correlation of
    the cudaEventRecord (NULL where the trace gives none)."""

    position: (
        int  # launches of the window before the call: it lies between launches[position - 1] and [position]
    )
    call: str  # record | wait
    correlation: int | None
    stream: int | None
    wait_on_stream: int | None = None
    wait_on_corr: int | None = None


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
    events: list[CaptureEvent] = field(default_factory=list)  # in call order (ingest.capture_waits)

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


EVENTS_SQL = """
WITH event_calls AS (
    SELECT h.ev_id, h.start_ns, h.correlation, w.window_id,
           CASE WHEN h.name ILIKE '%StreamWaitEvent%' THEN 'wait' ELSE 'record' END AS call
    FROM host_api h
    JOIN capture_windows w ON w.pid = h.pid AND w.tid = h.tid AND h.start_ns >= w.start_ns AND h.start_ns <= w.end_ns
    WHERE h.name ILIKE '%StreamWaitEvent%' OR h.name ILIKE '%EventRecord%'
),
wait_records AS (  -- Kineto's "Stream Wait Event" records, by the wait call's correlation
    SELECT correlation, max(stream) AS stream, max(wait_on_stream) AS wait_on_stream,
           max(wait_on_event_corr) AS wait_on_corr
    FROM events
    WHERE cat_lc = 'cuda_sync' AND sync_kind = 'Stream Wait Event' AND correlation IS NOT NULL
    GROUP BY correlation
)
SELECT c.window_id, c.call, c.correlation,
       (SELECT count(*) FROM capture_launches l
        WHERE l.window_id = c.window_id AND (l.start_ns < c.start_ns OR (l.start_ns = c.start_ns AND l.ev_id < c.ev_id)))
           AS position,
       CASE WHEN c.call = 'wait' THEN coalesce(nullif(r.stream, -1), e.stream) ELSE e.stream END AS stream,
       CASE WHEN c.call = 'wait' THEN nullif(r.wait_on_stream, -1) END AS wait_on_stream,
       CASE WHEN c.call = 'wait' AND r.wait_on_corr > 0 THEN r.wait_on_corr END AS wait_on_corr
FROM event_calls c
JOIN events e ON e.ev_id = c.ev_id
LEFT JOIN wait_records r ON c.call = 'wait' AND r.correlation = c.correlation
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
            events = con.execute(EVENTS_SQL).fetchall()
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
    for window_id, call, corr, position, stream, on_stream, on_corr in events:
        out[window_id].events.append(CaptureEvent(int(position), call, corr, stream, on_stream, on_corr))
    return [w for w in out if w.launches]

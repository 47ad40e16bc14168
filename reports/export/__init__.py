"""Export a run to Perfetto (protobuf) or Chrome-trace JSON, with tracehouse's analysis written into it.

What the file holds, per rank one process (`rank R`), all ranks of the run in one file, every time in the
tables' own time base (the traces' timestamps in ns), except that a rank stamped by another host's clock
is shifted onto the lowest rank's (clock_alignment, sql/export_clock_offset: the offset is the median
difference of the ends of the collectives both ran, applied when it exceeds max(5 x their median absolute
deviation, 20 us) over at least 3 collectives; one shift per host; `--no-align` keeps the raw times).
What was shifted, and every note of what the file leaves out, is said on stderr and in the file: the
description (JSON) of the track `tracehouse export notes` of the lowest rank, or the JSON variant's
top-level key `tracehouse`:
  * GPU activities per (device, stream): `[category] name`, args kernel_id, kind, category, step,
    correlation, launch call, Python launch site, grid / block, bytes. Two activities of one stream that
    overlap in time (programmatic dependent launch, a copy engine) cannot share a Perfetto track (its
    slices nest; Perfetto's JSON importer drops such `X` slices), so an activity that overlaps an earlier
    one goes to a sub-track `stream S (overlap k)`: none is dropped or clipped.
  * host ops (cpu_ops: aten ops, annotations, runtime calls) per thread, Python frames per thread,
    nested as recorded (a range that overlaps without nesting goes to a sub-track likewise);
  * a flow from each launch call to each GPU activity it launched (graph launches: one call, many flows),
    where both are exported (the launch call is the host op kernels.launch_op_id names);
  * analysis tracks (group `tracehouse analysis`): the critical path of each step (one slice per segment of
    sql/critical_path, named by kind: it tiles the path), idle gaps of each device by cause
    (sql/idle_gaps, scope device, tiny gaps left out), exposed communication (sql/export_exposed_comm), the
    layers of each step's main stream (sql/export_layers), data-quality flags (sql/data_quality, as
    instants at their step's start or the rank's start; a run's flag on every rank) and the run report's
    takeaways over their windows.

Selection: the whole run, or a window [START, END) in ns (`--window`), or a step (`--step`: per rank, the
step's host window joined with its GPU span), on all ranks or one (`--rank`). A slice is exported when it
overlaps the window (a zero-length one when it lies in it), whole: durations are never clipped. A flow
is written when both its ends are exported.

Memory: every table is read per rank in tiles of about TILE_ROWS rows by start time (_row_tiles), each tile in
start order in record batches and written as it is read; only the open slices of each track (lanes) are held.
A tile's query joins narrow per-rank temp tables (the activities' categories, the launch links), never the
wide host rows (one whole-run query ran a 1 GB run out of 2 GB). DuckDB's memory limit is MEMORY_LIMIT (1/8 of the machine within
512 MB..2 GB; TRACEHOUSE_EXPORT_MEMORY), its spill SPILL_LIMIT. No analysis is a whole-rank query: the per-step
ones (critical path, layers, data_quality's per-step flags STEP_FLAGS) are computed per batch of STEP_BATCH
steps over the rank's rows that overlap the batch's span (temp tables: _scope), so their work is that of the
analysed steps, not of the run (on a 300 MB run: critical path of 64 steps 98 s -> 1 s); idle gaps and exposed
communication per tile of STEP_BATCH steps over the rows each tile's figures read (_gaps_and_comm: the same
rows as the whole-rank views); data_quality's other flags from streaming aggregates (_run_flags). Each
analysis track is guarded: when its view runs out of memory (or spill space) the track is not written at all
and a note says which and why. The GPU, host and Python tracks are never left out: if they do not fit, the
export fails with one line and writes nothing.
"""

from __future__ import annotations

import hashlib
import os
import re
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from decimal import Decimal
from itertools import pairwise
from pathlib import Path

import duckdb
import orjson

from reports import perfetto_proto as pp
from reports.run import build_run_report
from tracehouse.errors import TracehouseError
from warehouse.engine import open as open_connection
from warehouse.quoting import sql_string
from warehouse.runs import resolve_run
from warehouse.store import Warehouse
from warehouse.stored import is_stored

BATCH = 20_000
# rows of one table per tile of the GPU, host and Python tracks (_row_tiles): what one sorted query holds
TILE_ROWS = int(os.environ.get("TRACEHOUSE_EXPORT_TILE_ROWS", "200000"))
FAR = 1 << 62  # an open window's bound
SEQ = 1  # the one packet sequence of the file


def _machine_memory() -> int | None:
    """Bytes this process may use: the cgroup's limit where one is set (a container), else physical memory."""
    for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            text = Path(path).read_text().strip()
        except OSError:
            continue
        if text.isdigit() and int(text) < 1 << 60:
            return int(text)
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def default_memory_limit(total: int | None = None) -> str:
    """DuckDB's memory limit for the export: 1/8 of the machine's memory, within [512 MB, 2 GB]. DuckDB's sorts
    spill to disk past it, so the peak RSS is about this limit plus ~0.2 GB of Python whatever the run's size
    (bench/results.md, "export"); but activity_category over a 432k-activity run needs more than 1 GB (it ran
    out of memory at 1 GB, the GPU tracks with it), hence the 2 GB cap. TRACEHOUSE_EXPORT_MEMORY overrides it."""
    total = _machine_memory() if total is None else total
    mb = 2048 if total is None else max(512, min(2048, total // 8 // (1 << 20)))
    return f"{mb}MB"


MEMORY_LIMIT = os.environ.get("TRACEHOUSE_EXPORT_MEMORY") or default_memory_limit()
# DuckDB's spill files of one export at most (TRACEHOUSE_EXPORT_SPILL): a view past it fails like one out of
# memory (its track not drawn, said). Without a cap, the 300 MB benchmark's analysis tracks spilled 34 GB in
# 30 minutes (bench/results.md, "export")
SPILL_LIMIT = os.environ.get("TRACEHOUSE_EXPORT_SPILL", "4GB")
EXPORT_FORMATS = ("perfetto", "json")
# The per-step analyses (critical path: a walk over the rank's dependency graph; layers: a self-similarity
# search) cost about 0.1 and 0.3 s per step: on a run of thousands of steps they are drawn for the first
# ANALYSIS_STEPS steps of each rank in the selection (--analysis-steps), and the file says so
ANALYSIS_STEPS = 64
EXT = {"perfetto": ".pftrace", "json": ".json"}
NOTES_TRACK = "tracehouse export notes"  # its description: the file's metadata and notes (JSON)
# clock alignment (sql/export_clock_offset): ranks whose offsets from the reference rank are significant are
# grouped into hosts, two offsets within max(ALIGN_FACTOR x spread, ALIGN_FLOOR_NS) of each other being one clock
ALIGN_FACTOR = 5
ALIGN_FLOOR_NS = 20_000


class ExportError(TracehouseError):
    hint = "see `tracehouse export -h`"


def parse_window(text: str) -> tuple[int, int]:
    """`START:END` in ns of the trace's time base (integers; `us`/`ms` suffixes scale them)."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)(ns|us|ms)?\s*:\s*(\d+(?:\.\d+)?)(ns|us|ms)?\s*", text or "")
    if not m:
        raise ExportError(
            f"--window {text!r} is not START:END",
            hint="ns in the trace's time base, e.g. "
            "--window 1765000000000000000:1765000000005000000 (or with a us / ms suffix)",
        )
    scale = {"ns": 1, None: 1, "us": 1_000, "ms": 1_000_000}
    start = int(Decimal(m.group(1)) * scale[m.group(2)])
    end = int(Decimal(m.group(3)) * scale[m.group(4)])
    if end <= start:
        raise ExportError(f"--window {text!r}: END must be after START")
    return start, end


@dataclass
class ExportSummary:
    run_id: str
    path: Path
    fmt: str
    ranks: list[int]
    windows: dict[int, tuple[int, int]]  # per rank, the window exported (FAR bounds: the whole rank)
    notes: list[str] = field(default_factory=list)  # what the file leaves out, and why
    counts: dict[str, int] = field(
        default_factory=dict
    )  # slices per kind: gpu, host, python, flows, analysis ...
    lanes: int = 0  # overlap sub-tracks created
    clocks: ClockAlignment | None = None  # how each rank's times were shifted

    def head(self) -> str:
        what = ", ".join(f"{v} {k}" for k, v in self.counts.items() if v)
        return f"{self.path}\t{self.fmt}\t{len(self.ranks)} rank(s)\t{what}"

    def line(self) -> str:
        what = ", ".join(f"{v} {k}" for k, v in self.counts.items() if v)
        notes = "".join(f"\n  note: {n}" for n in self.notes)
        return f"{self.path}\t{self.fmt}\t{len(self.ranks)} rank(s)\t{what}{notes}"


def _uuid(*parts) -> int:
    return int.from_bytes(hashlib.blake2b(repr(parts).encode(), digest_size=8).digest(), "little") >> 1 or 1


def _flow_id(rank: int, kernel_id: int) -> int:
    return ((rank + 1) << 44) ^ (int(kernel_id) + 1)


class _Lanes:
    """Places slices of one track, in start order, on the track or its overlap sub-tracks. `nest`: a slice
    inside the open one (end at or before its end) nests on the same lane (host ranges, frames); else every
    lane holds disjoint slices only (GPU activities, analysis segments)."""

    def __init__(self, nest: bool):
        self.nest = nest
        self.lanes: list = []

    def place(self, start: int, end: int) -> int:
        for i, lane in enumerate(self.lanes):
            if self.nest:
                while lane and lane[-1] <= start:
                    lane.pop()
                if not lane or end <= lane[-1]:
                    lane.append(end)
                    return i
            elif lane <= start:
                self.lanes[i] = end
                return i
        self.lanes.append([end] if self.nest else end)
        return len(self.lanes) - 1


# ---- writers: the same calls for Perfetto protobuf and Chrome JSON ------------------------------------------


class _Shifted:
    """Per process (pid = rank + 1) the ns subtracted from every time written on its tracks (the clock
    alignment; 0: the rank's own times)."""

    def _init_shift(self, shifts: dict[int, int] | None) -> None:
        self.shift = {rank + 1: ns for rank, ns in (shifts or {}).items() if ns}
        self.pid_of: dict[int, int] = {}

    def _t(self, track: int, ts: int) -> int:
        return ts - self.shift.get(self.pid_of.get(track), 0) if self.shift else ts


class _PerfettoWriter(_Shifted):
    def __init__(self, handle, shifts: dict[int, int] | None = None):
        self.f = handle
        self._init_shift(shifts)
        self.f.write(
            pp.packet(
                pp.f_varint(pp.PKT_SEQ_ID, SEQ)
                + pp.f_varint(pp.PKT_SEQ_FLAGS, pp.SEQ_INCREMENTAL_STATE_CLEARED)
            )
        )

    def process(self, uuid: int, pid: int, name: str) -> None:
        self.pid_of[uuid] = pid
        self.f.write(pp.packet(pp.track_descriptor(uuid, pid=pid, process_name=name, explicit_children=True)))

    def track(
        self, uuid: int, name: str, parent: int, order: int, pid: int | None, description: str | None = None
    ) -> None:
        if pid is not None:
            self.pid_of[uuid] = pid
        self.f.write(
            pp.packet(
                pp.track_descriptor(uuid, name, parent=parent, rank_order=order, description=description)
            )
        )

    def slice(
        self, track: int, start: int, dur: int, name: str, category: str, args: dict, flows=(), terminating=()
    ) -> None:
        a = b"".join(pp.annotation(k, v) for k, v in _plain(args).items())
        start = self._t(track, start)
        self.f.write(
            pp.event(
                SEQ,
                start,
                pp.SLICE_BEGIN,
                track,
                name,
                category=category,
                args=a,
                flows=flows,
                terminating=terminating,
            )
        )
        self.f.write(pp.event(SEQ, start + dur, pp.SLICE_END, track))

    def instant(self, track: int, ts: int, name: str, category: str, args: dict) -> None:
        a = b"".join(pp.annotation(k, v) for k, v in _plain(args).items())
        self.f.write(pp.event(SEQ, self._t(track, ts), pp.INSTANT, track, name, category=category, args=a))

    def close(self, notes: list[str] = (), meta: dict | None = None, parent: int | None = None) -> None:
        """The file's notes (what it leaves out, the clock alignment) and metadata: the description of a track
        `tracehouse export notes` of the lowest rank's process (a JSON object: the metadata, and notes)."""
        text = orjson.dumps({**_plain(meta or {}), "notes": list(notes)}).decode()
        self.f.write(
            pp.packet(
                pp.track_descriptor(
                    _uuid("export notes"), NOTES_TRACK, parent=parent, rank_order=0, description=text
                )
            )
        )


def _plain(args: dict) -> dict:
    """Args as JSON / protobuf scalars: a SUM's DECIMAL / HUGEINT becomes an int (a float when fractional)."""
    out = {}
    for k, v in args.items():
        if v is None:
            continue
        if isinstance(v, Decimal):
            v = int(v) if v == v.to_integral_value() else float(v)
        out[k] = v
    return out


def _us(ns: int) -> orjson.Fragment:
    """ns as an exact decimal µs literal (Chrome JSON's unit), never through a float."""
    sign = "-" if ns < 0 else ""
    ns = abs(int(ns))
    return orjson.Fragment(f"{sign}{ns // 1000}.{ns % 1000:03d}".encode())


class _JsonWriter(_Shifted):
    """Chrome-trace JSON: each track is a (pid, tid) of its rank's process; exact ns in args start_ns / dur_ns
    (ts and dur are exact decimal µs literals too, but JSON readers parse them as floats). The file's notes
    and metadata: the top-level key `tracehouse` after traceEvents."""

    def __init__(self, handle, shifts: dict[int, int] | None = None):
        self.f = handle
        self._init_shift(shifts)
        self.f.write(
            b'{"displayTimeUnit": "ns", "otherData": {"producer": "tracehouse export"}, "traceEvents": [\n'
        )
        self.first = True
        self.where: dict[int, tuple[int, int]] = {}
        self.next_tid: dict[int, int] = {}

    def _emit(self, event: dict) -> None:
        self.f.write((b"" if self.first else b",\n") + orjson.dumps(event))
        self.first = False

    def process(self, uuid: int, pid: int, name: str) -> None:
        self.where[uuid] = (pid, 0)
        self.pid_of[uuid] = pid
        self._emit({"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": name}})
        self._emit(
            {"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0, "args": {"sort_index": pid}}
        )

    def track(
        self, uuid: int, name: str, parent: int, order: int, pid: int, description: str | None = None
    ) -> None:
        tid = self.next_tid.get(pid, 1)
        self.next_tid[pid] = tid + 1
        self.where[uuid] = (pid, tid)
        self.pid_of[uuid] = pid
        self._emit({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": name}})
        self._emit(
            {"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": tid, "args": {"sort_index": tid}}
        )

    def slice(
        self, track: int, start: int, dur: int, name: str, category: str, args: dict, flows=(), terminating=()
    ) -> None:
        pid, tid = self.where[track]
        start = self._t(track, start)
        self._emit(
            {
                "ph": "X",
                "name": name,
                "cat": category,
                "pid": pid,
                "tid": tid,
                "ts": _us(start),
                "dur": _us(dur),
                "args": {**_plain(args), "start_ns": start, "dur_ns": dur},
            }
        )
        for f in flows:
            self._emit(
                {
                    "ph": "s",
                    "id": f,
                    "name": "launch",
                    "cat": "launch",
                    "pid": pid,
                    "tid": tid,
                    "ts": _us(start),
                }
            )
        for f in terminating:
            self._emit(
                {
                    "ph": "f",
                    "bp": "e",
                    "id": f,
                    "name": "launch",
                    "cat": "launch",
                    "pid": pid,
                    "tid": tid,
                    "ts": _us(start),
                }
            )

    def instant(self, track: int, ts: int, name: str, category: str, args: dict) -> None:
        pid, tid = self.where[track]
        ts = self._t(track, ts)
        self._emit(
            {
                "ph": "i",
                "s": "t",
                "name": name,
                "cat": category,
                "pid": pid,
                "tid": tid,
                "ts": _us(ts),
                "args": {**_plain(args), "start_ns": ts},
            }
        )

    def close(self, notes: list[str] = (), meta: dict | None = None, parent: int | None = None) -> None:
        self.f.write(
            b'\n], "tracehouse": ' + orjson.dumps({**_plain(meta or {}), "notes": list(notes)}) + b"}\n"
        )


# ---- the export ------------------------------------------------------------------------------------------------


def _overlaps(alias: str, start: str = "start_ns", dur: str = "dur_ns") -> str:
    """SQL: the row of `alias` overlaps its rank's window w (a zero-length one lies in it)."""
    s, d = f"{alias}.{start}", f"coalesce({alias}.{dur}, 0)"
    return f"({s} < w.end_ns AND ({s} + {d} > w.start_ns OR {s} >= w.start_ns))"


def _batches(con, sql: str, params: list) -> Iterator[dict]:
    reader = con.sql(sql, params=params).to_arrow_reader(BATCH)
    for batch in reader:
        cols = batch.to_pydict()
        names = list(cols)
        for values in zip(*(cols[n] for n in names)):
            yield dict(zip(names, values))


class _Tracks:
    """Track descriptors, written when first used; per track its lanes and overlap sub-tracks."""

    def __init__(self, writer, summary: ExportSummary):
        self.w, self.summary = writer, summary
        self.known: set[int] = set()
        self.lanes: dict[int, _Lanes] = {}
        self.order: dict[int, int] = {}
        self.meta: dict[int, tuple[str, int]] = {}

    def process(self, rank: int, name: str) -> int:
        uuid = _uuid("rank", rank)
        if uuid not in self.known:
            self.known.add(uuid)
            self.w.process(uuid, rank + 1, name)
        return uuid

    def track(self, parent: int, key: tuple, name: str, pid: int, description: str | None = None) -> int:
        uuid = _uuid(*key)
        if uuid not in self.known:
            self.known.add(uuid)
            n = self.order[parent] = self.order.get(parent, 0) + 1
            self.w.track(uuid, name, parent, n, pid, description)
            self.meta[uuid] = (name, pid)
        return uuid

    def place(self, track: int, start: int, dur: int, nest: bool) -> int:
        """The track (or overlap sub-track) this slice goes on."""
        lanes = self.lanes.setdefault(track, _Lanes(nest))
        lane = lanes.place(start, start + dur)
        if lane == 0:
            return track
        uuid = _uuid("lane", track, lane)
        if uuid not in self.known:
            name, pid = self.meta[track]
            self.known.add(uuid)
            self.summary.lanes += 1
            self.w.track(
                uuid,
                f"{name} (overlap {lane})",
                track,
                lane,
                pid,
                "slices that overlap an earlier slice of the track without nesting in it",
            )
            self.meta[uuid] = (f"{name} (overlap {lane})", pid)
        return uuid


def _windows(
    con, run_id: str, rank: int | None, step: int | None, window: tuple[int, int] | None
) -> dict[int, tuple[int, int]]:
    ranks = [
        r
        for (r,) in con.execute(
            "SELECT DISTINCT rank FROM kernels WHERE run_id = ? UNION "
            "SELECT DISTINCT rank FROM cpu_ops WHERE run_id = ? ORDER BY 1",
            [run_id, run_id],
        ).fetchall()
    ]
    if rank is not None:
        if rank not in ranks:
            raise ExportError(
                f"run {run_id} has no rank {rank}", hint=f"its ranks: {', '.join(map(str, ranks)) or 'none'}"
            )
        ranks = [rank]
    if step is not None:
        rows = {r: (a, b) for r, st, a, b, _ in step_windows(con, run_id) if st == step and r in ranks}
        if not rows:
            known = [
                s
                for (s,) in con.execute(
                    "SELECT DISTINCT step FROM step_spans WHERE run_id = ? ORDER BY 1", [run_id]
                ).fetchall()
            ]
            raise ExportError(
                f"run {run_id} has no step {step}" + (f" on rank {rank}" if rank is not None else ""),
                hint=f"its steps: {', '.join(map(str, known[:20])) or 'none'}",
            )
        return rows
    lo, hi = window if window else (-FAR, FAR)
    return {r: (lo, hi) for r in ranks}


@dataclass
class ClockAlignment:
    """Per rank the ns subtracted from its times (0: not shifted), and what was estimated."""

    reference: int | None = None
    shifts: dict[int, int] = field(default_factory=dict)
    estimates: list[dict] = field(default_factory=list)  # export_clock_offset's rows
    notes: list[str] = field(default_factory=list)
    applied: bool = True  # False: --no-align

    def meta(self) -> dict:
        out = {"clock_reference_rank": self.reference, "clock_aligned": self.applied}
        for e in self.estimates:
            r = e["rank"]
            out[f"rank {r} clock_shift_ns"] = self.shifts.get(r, 0)
            out[f"rank {r} clock_offset_estimate_ns"] = e["offset_ns"]
            out[f"rank {r} clock_offset_spread_ns"] = e["spread_ns"]
            out[f"rank {r} clock_offset_matched"] = e["matched"]
        return out


def clock_alignment(con, run_id: str, align: bool = True) -> ClockAlignment:
    """The shift of each rank (sql/export_clock_offset): ranks whose offset from the reference rank is
    significant are grouped into hosts (sorted by offset, a rank joins the previous one's host when their
    offsets differ by at most max(ALIGN_FACTOR x the larger spread, ALIGN_FLOOR_NS)); every rank of a host is
    shifted by the lower median of its ranks' offsets, so ranks of one clock stay exactly as recorded
    against each other. A rank whose offset is not significant keeps its times (the reference's clock)."""
    rows = con.execute(
        """
        SELECT rank, reference_rank, matched, offset_ns, spread_ns, significant FROM export_clock_offset
        WHERE run_id = ? ORDER BY rank""",
        [run_id],
    ).fetchall()
    out = ClockAlignment(applied=align)
    if not rows:
        return out
    out.reference = rows[0][1]
    out.estimates = [
        dict(zip(("rank", "reference_rank", "matched", "offset_ns", "spread_ns", "significant"), r))
        for r in rows
    ]
    ref = out.reference
    same = [e["rank"] for e in out.estimates if not e["significant"] and e["matched"] >= 3]
    unmatched = [e["rank"] for e in out.estimates if e["matched"] < 3]
    moved = sorted((e for e in out.estimates if e["significant"]), key=lambda e: e["offset_ns"])
    hosts: list[list[dict]] = []
    for e in moved:
        prev = hosts[-1][-1] if hosts else None
        if prev is not None and e["offset_ns"] - prev["offset_ns"] <= max(
            ALIGN_FACTOR * max(e["spread_ns"], prev["spread_ns"]), ALIGN_FLOOR_NS
        ):
            hosts[-1].append(e)
        else:
            hosts.append([e])
    for host in hosts:
        offsets = sorted(e["offset_ns"] for e in host)
        shift = offsets[(len(offsets) - 1) // 2]
        ranks = ", ".join(str(e["rank"]) for e in host)
        worst = max(e["spread_ns"] for e in host)
        if align:
            for e in host:
                out.shifts[e["rank"]] = shift
            out.notes.append(
                f"clocks: rank(s) {ranks} shifted by {-shift:+,} ns onto rank {ref}'s clock (median "
                f"end difference of the collectives they ran with rank {ref}; the ends' spread "
                f"{worst:,} ns); --no-align keeps their own times"
            )
        else:
            out.notes.append(
                f"clocks: rank(s) {ranks} are {shift:+,} ns off rank {ref}'s clock (collective ends); "
                "not shifted (--no-align)"
            )
    if same:
        out.notes.append(
            f"clocks: rank(s) {', '.join(map(str, same))} on rank {ref}'s clock (collective ends agree "
            f"within max({ALIGN_FACTOR} x their spread, {ALIGN_FLOOR_NS // 1000} us)): not shifted"
        )
    if unmatched:
        out.notes.append(
            f"clocks: rank(s) {', '.join(map(str, unmatched))} not aligned: fewer than 3 collectives "
            f"matched with rank {ref}'s; their own times are kept (if they ran on another host, "
            "their clock may be offset)"
        )
    return out


def export_run(
    warehouse: Warehouse,
    run: str,
    path: str | Path,
    *,
    rank: int | None = None,
    step: int | None = None,
    window: tuple[int, int] | None = None,
    fmt: str = "perfetto",
    analysis: bool = True,
    analysis_steps: int = ANALYSIS_STEPS,
    align: bool = True,
    progress: Callable[[str], None] | None = None,
) -> ExportSummary:
    """Write the run (or its selection) to `path` in `fmt`; the file appears only when complete.

    align: shift the ranks of another clock onto the reference rank's (clock_alignment); a --window
    given for every rank is then in the reference rank's time base (with --rank: that rank's own)."""
    if fmt not in EXPORT_FORMATS:
        raise ExportError(f"unknown format {fmt!r}", hint=f"choose {' or '.join(EXPORT_FORMATS)}")
    if step is not None and window is not None:
        raise ExportError("give --step or --window, not both")
    lookup = open_connection(warehouse)
    try:
        run_id = resolve_run(lookup, run)
    finally:
        lookup.close()
    spill = _spill_dir(warehouse)
    con = open_connection(
        warehouse,
        runs=[run_id],
        settings={
            "memory_limit": MEMORY_LIMIT,
            "temp_directory": str(spill),
            "max_temp_directory_size": SPILL_LIMIT,
        },
    )
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.partial")
    try:
        clocks = clock_alignment(con, run_id, align)
        windows = _windows(con, run_id, rank, step, window)
        if window is not None and rank is None:
            windows = {
                r: (lo + clocks.shifts.get(r, 0), hi + clocks.shifts.get(r, 0))
                for r, (lo, hi) in windows.items()
            }
        summary = ExportSummary(run_id, path, fmt, sorted(windows), windows)
        summary.clocks = clocks
        summary.notes.extend(n for n in clocks.notes)
        con.execute(
            "CREATE OR REPLACE TEMP TABLE export_window (rank INTEGER, start_ns BIGINT, end_ns BIGINT)"
        )
        con.executemany(
            "INSERT INTO export_window VALUES (?, ?, ?)", [[r, s, e] for r, (s, e) in windows.items()]
        )
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(tmp, "wb", buffering=1 << 20) as handle:
            shifts = {r: s for r, s in clocks.shifts.items() if r in windows}
            writer = (_PerfettoWriter if fmt == "perfetto" else _JsonWriter)(handle, shifts)
            tracks = _Tracks(writer, summary)
            stream_names = {
                (r, d, s): n
                for r, d, s, n in con.execute(
                    "SELECT rank, device, stream, name FROM streams WHERE run_id = ?", [run_id]
                ).fetchall()
            }
            procs = {r: tracks.process(r, f"rank {r}") for r in sorted(windows)}
            _gpu(con, run_id, tracks, procs, stream_names, summary, progress)
            _host(con, run_id, tracks, procs, summary, progress)
            _python(con, run_id, tracks, procs, summary, progress)
            if analysis:
                _analysis(warehouse, con, run_id, tracks, procs, windows, summary, progress, analysis_steps)
            writer.close(summary.notes, {"run_id": run_id, "format": fmt, **clocks.meta()}, procs[min(procs)])
        os.replace(tmp, path)
        return summary
    except (duckdb.OutOfMemoryException, duckdb.IOException) as e:
        tmp.unlink(missing_ok=True)
        first = str(e).strip().splitlines()[0][:200]
        raise ExportError(
            f"the run's activities did not fit DuckDB's memory limit {MEMORY_LIMIT}: {first}; nothing "
            "written",
            hint="export a --step, a --window or one --rank, or raise TRACEHOUSE_EXPORT_MEMORY",
        ) from None
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    finally:
        con.close()
        if spill.is_dir():
            import shutil

            shutil.rmtree(spill, ignore_errors=True)


def _spill_dir(warehouse: Warehouse) -> Path:
    """Where this export's DuckDB connections spill (removed when it ends)."""
    return warehouse.staging_dir / f"export-{os.getpid()}"


def _say(progress, text: str) -> None:
    if progress:
        progress(text)


def _row_tiles(con, table: str, run_id: str, rank: int) -> list[tuple[int, int]]:
    """[lo, hi) tiles of start time holding about TILE_ROWS of the rank's rows of `table` in its window each
    (cut at approximate quantiles of their starts; the first from -FAR, the last to FAR: together they hold
    every row once). A tile's query sorts and joins that many rows, whatever the run's size: one query over
    a 1 GB run's activities, sorted whole, ran out of a 2 GB limit (bench/results.md)."""
    where = f"t.run_id = ? AND t.rank = ? AND {_overlaps('t')}"
    rows = f"FROM {table} AS t JOIN export_window AS w ON w.rank = t.rank WHERE {where}"
    [(n,)] = con.execute(f"SELECT count(*) {rows}", [run_id, rank]).fetchall()
    parts = -(-n // TILE_ROWS)
    if parts <= 1:
        return [(-FAR, FAR)]
    fractions = ", ".join(f"{i / parts:.6f}" for i in range(1, parts))
    [(cuts,)] = con.execute(
        f"SELECT approx_quantile(t.start_ns, [{fractions}]) {rows}", [run_id, rank]
    ).fetchall()
    return list(pairwise([-FAR, *sorted(set(cuts)), FAR]))


@contextmanager
def _launch_links(con, run_id: str, rank: int):
    """While inside: temp.export_flow, one row per GPU activity of the rank in its window whose launch call
    (kernels.launch_op_id) is exported too (the two ends of a flow), with the call's start; narrow, so each
    tile joins it instead of the wide host rows."""
    try:
        con.execute(
            f"""
            CREATE OR REPLACE TEMP TABLE export_flow AS
            SELECT k.kernel_id, k.launch_op_id, lo.start_ns AS op_start_ns
            FROM kernels AS k
            JOIN export_window AS w ON w.rank = k.rank
            JOIN cpu_ops AS lo ON lo.run_id = k.run_id AND lo.rank = k.rank AND lo.op_id = k.launch_op_id
            WHERE k.run_id = ? AND k.rank = ? AND {_overlaps("k")} AND {_overlaps("lo")}""",
            [run_id, rank],
        )
        yield
    finally:
        con.execute("DROP TABLE IF EXISTS temp.export_flow")


def _gpu_track(tracks: _Tracks, procs, stream_names, rank: int, device, stream) -> int:
    """The track of a (rank, device, stream), named by the stream's recorded name (declared on first use)."""
    label = (stream_names.get((rank, device, stream)) or f"stream {stream}").strip()
    return tracks.track(procs[rank], ("gpu", rank, device, stream), f"GPU {device} {label}", rank + 1)


def _gpu(con, run_id, tracks: _Tracks, procs, stream_names, summary, progress) -> None:
    _say(progress, "GPU activities")
    n = flows = 0
    for rank in sorted(procs):
        # the tracks first, in (device, stream) order, whichever tile a stream first appears in
        for device, stream in con.execute(
            f"""
            SELECT DISTINCT k.device, k.stream FROM kernels AS k JOIN export_window AS w ON w.rank = k.rank
            WHERE k.run_id = ? AND k.rank = ? AND {_overlaps("k")}
            ORDER BY 1 NULLS FIRST, 2 NULLS FIRST""",
            [run_id, rank],
        ).fetchall():
            _gpu_track(tracks, procs, stream_names, rank, device, stream)
        # the categories of the rank into a temp table (narrow; DuckDB spills it), over the rank's rows only
        with _scope(con, run_id, rank, None):
            con.execute(
                "CREATE OR REPLACE TEMP TABLE export_category AS SELECT a.kernel_id, k.start_ns, a.category "
                "FROM activity_category AS a JOIN kernels AS k ON k.run_id = a.run_id AND k.rank = a.rank "
                "AND k.kernel_id = a.kernel_id WHERE a.run_id = ? AND a.rank = ?",
                [run_id, rank],
            )
        try:
            with _launch_links(con, run_id, rank):
                for lo, hi in _row_tiles(con, "kernels", run_id, rank):
                    n, flows = _gpu_tile(con, run_id, rank, lo, hi, tracks, procs, stream_names, n, flows)
        finally:
            con.execute("DROP TABLE IF EXISTS temp.export_category")
    summary.counts["gpu"] = n
    summary.counts["flows"] = flows


def _gpu_tile(con, run_id, rank, lo, hi, tracks: _Tracks, procs, stream_names, n, flows) -> tuple[int, int]:
    sql = f"""
        SELECT k.device, k.stream, k.kernel_id, k.kind, k.name, k.start_ns, coalesce(k.dur_ns, 0) AS dur_ns,
               k.step, k.correlation, k.launch_call, k.grid, k.block, k.bytes, k.collective_name,
               c.category, s.file AS site_file, s.line AS site_line, s.function AS site_function,
               f.kernel_id IS NOT NULL AS has_flow
        FROM kernels AS k
        JOIN export_window AS w ON w.rank = k.rank
        LEFT JOIN (SELECT kernel_id, category FROM temp.export_category WHERE start_ns >= ? AND start_ns < ?) AS c
          ON c.kernel_id = k.kernel_id
        LEFT JOIN (SELECT kernel_id FROM temp.export_flow) AS f ON f.kernel_id = k.kernel_id
        LEFT JOIN kernel_sites AS s ON s.run_id = k.run_id AND s.rank = k.rank AND s.kernel_id = k.kernel_id
        WHERE k.run_id = ? AND k.rank = ? AND k.start_ns >= ? AND k.start_ns < ? AND {_overlaps("k")}
        ORDER BY k.device NULLS FIRST, k.stream NULLS FIRST, k.start_ns, k.kernel_id"""
    for r in _batches(con, sql, [lo, hi, run_id, rank, lo, hi]):
        device, stream = r["device"], r["stream"]
        track = _gpu_track(tracks, procs, stream_names, rank, device, stream)
        lane = tracks.place(track, r["start_ns"], r["dur_ns"], nest=False)
        category = r["category"] or ("memory" if r["kind"] in ("memcpy", "memset") else "other")
        site = (
            f"{r['site_file']}:{r['site_line']} {r['site_function'] or ''}".strip()
            if r["site_file"]
            else None
        )
        args = {
            "kernel_id": r["kernel_id"],
            "kind": r["kind"],
            "category": category,
            "step": r["step"],
            "stream": stream,
            "device": device,
            "correlation": r["correlation"],
            "launch_call": r["launch_call"],
            "python_site": site,
            "grid": r["grid"],
            "block": r["block"],
            "bytes": r["bytes"],
            "collective": r["collective_name"],
        }
        term = (_flow_id(rank, r["kernel_id"]),) if r["has_flow"] else ()
        flows += len(term)
        tracks.w.slice(
            lane, r["start_ns"], r["dur_ns"], f"[{category}] {r['name']}", r["kind"], args, terminating=term
        )
        n += 1
    return n, flows


def _host_key(rank: int, pid, tid, cat, stream) -> tuple[tuple, str]:
    if cat == "cuda_sync":
        return ("sync", rank, pid, stream), f"GPU sync records stream {stream}"
    return ("host", rank, pid, tid), f"thread {tid} (pid {pid})"


def _host(con, run_id, tracks: _Tracks, procs, summary, progress) -> None:
    _say(progress, "host ops")
    n = 0
    for rank in sorted(procs):
        # the tracks first, in the order of their first op (by pid, tid, start)
        for pid, tid, cat, stream in con.execute(
            f"""
            SELECT o.pid, o.tid, if(o.cat = 'cuda_sync', 'cuda_sync', NULL) AS sync, if(sync IS NULL, NULL, o.stream)
            FROM cpu_ops AS o JOIN export_window AS w ON w.rank = o.rank
            WHERE o.run_id = ? AND o.rank = ? AND {_overlaps("o")}
            GROUP BY ALL ORDER BY o.pid, o.tid, min(o.start_ns), 3 NULLS FIRST, 4 NULLS FIRST""",
            [run_id, rank],
        ).fetchall():
            key, name = _host_key(rank, pid, tid, cat, stream)
            tracks.track(procs[rank], key, name, rank + 1)
        with _launch_links(con, run_id, rank):
            for lo, hi in _row_tiles(con, "cpu_ops", run_id, rank):
                n = _host_tile(con, run_id, rank, lo, hi, tracks, procs, n)
    summary.counts["host"] = n


def _host_tile(con, run_id, rank, lo, hi, tracks: _Tracks, procs, n) -> int:
    sql = f"""
        WITH launched AS (
            SELECT launch_op_id, list(kernel_id ORDER BY kernel_id) AS kernel_ids FROM temp.export_flow
            WHERE op_start_ns >= ? AND op_start_ns < ? GROUP BY launch_op_id
        )
        SELECT o.op_id, o.pid, o.tid, o.cat, o.name, o.start_ns, coalesce(o.dur_ns, 0) AS dur_ns,
               o.external_id, o.correlation, o.input_dims, o.stream, o.sync_kind, l.kernel_ids
        FROM cpu_ops AS o
        JOIN export_window AS w ON w.rank = o.rank
        LEFT JOIN launched AS l ON l.launch_op_id = o.op_id
        WHERE o.run_id = ? AND o.rank = ? AND o.start_ns >= ? AND o.start_ns < ? AND {_overlaps("o")}
        ORDER BY o.pid, o.tid, o.start_ns, o.dur_ns DESC, o.op_id"""
    for r in _batches(con, sql, [lo, hi, run_id, rank, lo, hi]):
        key, name = _host_key(rank, r["pid"], r["tid"], r["cat"], r["stream"])
        track = tracks.track(procs[rank], key, name, rank + 1)
        lane = tracks.place(track, r["start_ns"], r["dur_ns"], nest=True)
        flows = tuple(_flow_id(rank, k) for k in (r["kernel_ids"] or ()))
        args = {
            "op_id": r["op_id"],
            "cat": r["cat"],
            "external_id": r["external_id"],
            "correlation": r["correlation"],
            "input_dims": r["input_dims"],
            "sync_kind": r["sync_kind"],
            "launched": len(flows) or None,
        }
        tracks.w.slice(lane, r["start_ns"], r["dur_ns"], r["name"], r["cat"] or "host", args, flows=flows)
        n += 1
    return n


def _python(con, run_id, tracks: _Tracks, procs, summary, progress) -> None:
    _say(progress, "Python frames")
    n = 0
    for rank in sorted(procs):
        for pid, tid in con.execute(
            f"""
            SELECT DISTINCT f.pid, f.tid FROM python_frames AS f JOIN export_window AS w ON w.rank = f.rank
            WHERE f.run_id = ? AND f.rank = ? AND {_overlaps("f")} ORDER BY 1, 2""",
            [run_id, rank],
        ).fetchall():
            tracks.track(procs[rank], ("python", rank, pid, tid), f"python thread {tid}", rank + 1)
        for lo, hi in _row_tiles(con, "python_frames", run_id, rank):
            sql = f"""
                SELECT f.frame_id, f.pid, f.tid, f.name, f.start_ns, coalesce(f.dur_ns, 0) AS dur_ns
                FROM python_frames AS f JOIN export_window AS w ON w.rank = f.rank
                WHERE f.run_id = ? AND f.rank = ? AND f.start_ns >= ? AND f.start_ns < ? AND {_overlaps("f")}
                ORDER BY f.pid, f.tid, f.start_ns, f.dur_ns DESC, f.frame_id"""
            for r in _batches(con, sql, [run_id, rank, lo, hi]):
                track = tracks.track(
                    procs[rank], ("python", rank, r["pid"], r["tid"]), f"python thread {r['tid']}", rank + 1
                )
                lane = tracks.place(track, r["start_ns"], r["dur_ns"], nest=True)
                tracks.w.slice(
                    lane, r["start_ns"], r["dur_ns"], r["name"], "python", {"frame_id": r["frame_id"]}
                )
                n += 1
    summary.counts["python"] = n


# ---- analysis tracks -----------------------------------------------------------------------------------------

CP_DESCRIPTION = (
    "sql/critical_path: the chain of dependencies that determined when the step's GPU work ended; "
    "its segments tile the path (one slice per segment)"
)


def step_windows(con, run_id: str) -> list[tuple[int, int, int, int, int]]:
    """(rank, step, start, end, activities) of every step: its wall as step_breakdown defines it (the earlier
    of its host start and first GPU start to the later of its host end and last GPU end), from the tables."""
    return con.execute(
        """
        WITH gpu AS (
            SELECT rank, step, min(start_ns) AS first_ns, max(end_ns) AS last_ns, count(*) AS n
            FROM kernels WHERE run_id = ? AND step IS NOT NULL GROUP BY rank, step
        )
        SELECT s.rank, s.step, least(s.start_ns, coalesce(g.first_ns, s.start_ns)),
               greatest(s.end_ns, coalesce(g.last_ns, s.end_ns)), coalesce(g.n, 0)
        FROM step_spans AS s LEFT JOIN gpu AS g ON g.rank = s.rank AND g.step = s.step
        WHERE s.run_id = ? ORDER BY s.rank, s.step""",
        [run_id, run_id],
    ).fetchall()


def _steps_in(con, run_id: str, rank: int, lo: int, hi: int) -> list[int]:
    """The steps of the rank with GPU work whose wall overlaps [lo, hi)."""
    return [st for r, st, a, b, n in step_windows(con, run_id) if r == rank and n and a < hi and b > lo]


# the base tables the analysis views read, scoped per rank (and per batch of steps) by _scope
# (start, length) of each timed table's rows; kernel_sites follows the scoped kernels (its rows are theirs)
SCOPED_TABLES = {
    "kernels": ("start_ns", "coalesce(dur_ns, 0)"),
    "cpu_ops": ("start_ns", "coalesce(dur_ns, 0)"),
    "python_frames": ("start_ns", "coalesce(dur_ns, 0)"),
    "step_spans": ("start_ns", "end_ns - start_ns"),
    "flows": ("least(src_ns, dst_ns)", "abs(dst_ns - src_ns)"),
    "kernel_sites": "kernels",
    "streams": None,
}
STEP_BATCH = int(os.environ.get("TRACEHOUSE_EXPORT_STEP_BATCH", "64"))


def _guard(summary: ExportSummary, what: str, compute: Callable, *args):
    """compute(*args), or None when DuckDB cannot finish it within the export's memory (or spill space): the
    track is then not written, and a note says so (stderr and the file's notes), never silently."""
    try:
        return compute(*args)
    except (duckdb.OutOfMemoryException, duckdb.IOException) as e:
        first = str(e).strip().splitlines()[0][:160]
        summary.notes.append(
            f"{what} not drawn: {first} (memory limit {MEMORY_LIMIT}, spill {SPILL_LIMIT}: export "
            "a --step or --window, or set TRACEHOUSE_EXPORT_MEMORY / TRACEHOUSE_EXPORT_SPILL)"
        )
        return None


def _fetch(con, sql: str, params: list) -> list:
    return con.execute(sql, params).fetchall()


def _temp(con, name: str, sql: str, params: list) -> int:
    con.execute(f"CREATE OR REPLACE TEMP TABLE {name} AS {sql}", params)
    return con.execute(f"SELECT count(*) FROM temp.{name}").fetchone()[0]


def _batch_span(con, run_id: str, rank: int, steps: list[int], walls) -> tuple[int, int]:
    """[lo, hi): from the earliest of the steps' walls and the launch calls of their GPU activities (work
    queued from before the step) to the latest wall end: every row a per-step view of these steps reads."""
    chosen = set(steps)
    lo = min(a for r, st, a, b, _ in walls if r == rank and st in chosen)
    hi = max(b for r, st, a, b, _ in walls if r == rank and st in chosen)
    (launch,) = con.execute(
        f"""
        SELECT min(o.start_ns) FROM kernels AS k JOIN cpu_ops AS o
          ON o.run_id = k.run_id AND o.rank = k.rank AND o.op_id = k.launch_op_id
        WHERE k.run_id = ? AND k.rank = ? AND k.step IN ({", ".join(map(str, steps))})""",
        [run_id, rank],
    ).fetchone()
    return (min(lo, launch) if launch is not None else lo), hi + 1


@contextmanager
def _scope(con, run_id: str, rank: int, span: tuple[int, int] | None):
    """While inside: the base tables as temp views of this rank's rows (and, with a span, of the rows that
    overlap it), so the analysis views compute over those only; the catalogue's views read them by name."""
    (attached,) = con.execute(
        "SELECT count(*) FROM duckdb_databases() WHERE database_name = 'catalog'"
    ).fetchone()
    schema = "catalog.main" if attached else "main"
    rows = f"run_id = {sql_string(run_id)} AND rank = {int(rank)}"
    try:
        for table, timed in SCOPED_TABLES.items():
            where = rows
            if span is not None and isinstance(timed, tuple):
                start, dur = timed
                where += f" AND {start} < {int(span[1])} AND {start} + {dur} >= {int(span[0])}"
            elif span is not None and timed == "kernels":
                where += " AND kernel_id IN (SELECT kernel_id FROM temp.kernels)"
            # a span's rows are few (one batch of steps): a temp table, read once; the views would re-scan the
            # rank's files at every reference (the critical path reads kernels a dozen times: 25x slower on a
            # 300 MB run). A whole rank stays a view (a table would hold it in memory)
            what = "TABLE" if span is not None else "VIEW"
            con.execute(
                f"CREATE OR REPLACE TEMP {what} {table} AS SELECT * FROM {schema}.{table} WHERE {where}"
            )
        yield
    finally:
        for table in SCOPED_TABLES:
            con.execute(f"DROP {'TABLE' if span is not None else 'VIEW'} IF EXISTS temp.{table}")


# data_quality's flags that are about one step and read a per-step analysis (critical_path, step_queueing): they
# are computed per batch of analysed steps over the batch's rows (_scope); every other flag reads whole-run
# aggregates (counts and sums per rank) and is computed once, with the per-step views it reads shadowed
STEP_FLAGS = ("critical_path_one_host_call", "gpu_queueing")
FLAG_COLUMNS = "flag, severity, rank, step, message, array_to_string(affects, ', ')"


def _catalog_schema(con) -> str:
    (attached,) = con.execute(
        "SELECT count(*) FROM duckdb_databases() WHERE database_name = 'catalog'"
    ).fetchone()
    return "catalog.main" if attached else "main"


def _run_flags(con, run_id: str) -> list:
    """data_quality's rows but the STEP_FLAGS, in bounded memory: the per-step views it reads (critical_path,
    step_queueing, whose rows only feed STEP_FLAGS, and step_breakdown, of which few_steps reads each step's
    phase and activity count) are shadowed by temp views: the first two empty, the third its columns from
    the tables (step_spans.phase, the step's activities, which is its count of kernels rows: the `exact`
    timeline counts every GPU activity, and its wall, from the host window to the last GPU end, as
    step_breakdown's, which step_warmup reads). What is left are streaming aggregates over the tables."""
    schema = _catalog_schema(con)
    shadows = []
    try:
        for view in ("critical_path", "step_queueing"):
            cols = con.execute(f"DESCRIBE SELECT * FROM {schema}.{view}").fetchall()
            typed = ", ".join(f'NULL::{c[1]} AS "{c[0]}"' for c in cols)
            con.execute(f"CREATE OR REPLACE TEMP VIEW {view} AS SELECT {typed} WHERE false")
            shadows.append(view)
        con.execute("""
            CREATE OR REPLACE TEMP VIEW step_breakdown AS
            SELECT run_id, rank, step, phase, activities, wall_start_ns, wall_end_ns,
                   wall_end_ns - wall_start_ns AS wall_ns
            FROM (
                SELECT s.run_id, s.rank, s.step, s.phase, coalesce(k.n, 0) AS activities,
                       least(s.start_ns, coalesce(k.gpu_start_ns, s.start_ns)) AS wall_start_ns,
                       greatest(s.end_ns, coalesce(k.gpu_end_ns, s.end_ns)) AS wall_end_ns
                FROM step_spans AS s
                LEFT JOIN (SELECT run_id, rank, step, count(*) AS n, min(start_ns) AS gpu_start_ns,
                                  max(end_ns) AS gpu_end_ns
                           FROM kernels WHERE step IS NOT NULL GROUP BY run_id, rank, step) AS k
                  ON k.run_id = s.run_id AND k.rank = s.rank AND k.step = s.step
            )""")
        shadows.append("step_breakdown")
        return _fetch(
            con,
            f"""
            SELECT {FLAG_COLUMNS} FROM data_quality
            WHERE run_id = ? AND flag NOT IN {STEP_FLAGS!r}
            ORDER BY rank NULLS FIRST, step NULLS FIRST, flag""",
            [run_id],
        )
    finally:
        for view in shadows:
            con.execute(f"DROP VIEW IF EXISTS temp.{view}")


def _tiles(walls, rank: int) -> list[tuple[int, int]]:
    """The rank's time cut into tiles [lo, hi) of STEP_BATCH steps each (cut at the wall start of every
    STEP_BATCH-th step, in start order), the first from -FAR, the last to FAR: they tile all of its time."""
    starts = sorted(a for r, _, a, _, _ in walls if r == rank)
    edges = [-FAR, *sorted(set(starts[STEP_BATCH::STEP_BATCH])), FAR]
    return list(pairwise(edges))


def _tile_span(con, run_id: str, rank: int, lo: int, hi: int) -> tuple[int, int]:
    """The rows a tile's idle gaps read: from the earliest of lo, the latest end before lo on each device (where
    the first gap of the tile starts: it runs from the end of whatever ran before it) and the launch calls of
    the tile's activities, to hi (or a later launch call)."""
    if lo == -FAR:
        return lo, hi
    (before,) = con.execute(
        """
        SELECT min(pe) FROM (SELECT max(end_ns) AS pe FROM kernels WHERE run_id = ? AND rank = ? AND start_ns < ?
                             GROUP BY device)""",
        [run_id, rank, lo],
    ).fetchone()
    first, last = con.execute(
        """
        SELECT min(launch_start_ns), max(launch_start_ns) FROM kernels
        WHERE run_id = ? AND rank = ? AND start_ns >= ? AND start_ns < ?""",
        [run_id, rank, lo, hi],
    ).fetchone()
    start = min(x for x in (lo, before, first) if x is not None)
    return start, max(hi, last + 1 if last is not None else hi)


GAP_SQL = f"""
    SELECT g.device, g.step, g.gap_start_ns, g.gap_ns, g.class, g.wait_ns, g.host_ns, g.queued_ns,
           g.host_op, g.host_op_ns, g.next_name, g.next_kernel_id
    FROM idle_gaps AS g JOIN export_window AS w ON w.rank = g.rank
    WHERE g.run_id = ? AND g.rank = ? AND g.scope = 'device' AND g.class <> 'tiny'
      AND g.gap_end_ns >= ? AND g.gap_end_ns < ? AND {_overlaps("g", "gap_start_ns", "gap_ns")}"""
COMM_SQL = """
    SELECT x.device, greatest(x.start_ns, ?) AS start_ns, least(x.end_ns, ?) AS end_ns
    FROM export_exposed_comm AS x WHERE x.run_id = ? AND x.rank = ? AND x.start_ns < ? AND x.end_ns > ?"""


def _gaps_and_comm(
    con, run_id: str, rank: int, lo: int, hi: int, walls, summary, progress
) -> tuple[bool, bool]:
    """Idle gaps (device scope, not tiny) and exposed communication of the rank that overlap [lo, hi), per tile
    of STEP_BATCH steps (_tiles), each over the rows its figures read (_scope): the same rows as the whole-rank
    views. A gap belongs to the tile where it ends (its next activity starts); the tile's rows reach back to
    where it begins (_tile_span). Exposed communication is exact at every instant inside a tile whose rows
    overlap it, so each tile gives its pieces clipped to the tile, and touching pieces are joined into the
    intervals after the last tile (as the view joins them). Results go to temp tables export_gaps and
    export_comm (written whole, or, when a tile does not fit, dropped: the track is not drawn and said).
    Tiles read: those overlapping the window, those after it up to each device's first activity after it (a gap
    across the window's end), and, for exposed communication, neighbours while an interval runs across the
    tile's bound. Returns whether each of the two tables holds the track."""
    tiles = _tiles(walls, rank)
    after = None
    if hi < FAR:
        (after,) = con.execute(
            """
            SELECT max(first) FROM (SELECT min(start_ns) AS first FROM kernels
                                    WHERE run_id = ? AND rank = ? AND start_ns >= ? GROUP BY device)""",
            [run_id, rank, hi],
        ).fetchone()
    ok = {"gaps": True, "comm": True}
    done: set[int] = set()

    def tile(i: int) -> None:
        if i in done:
            return
        done.add(i)
        t_lo, t_hi = tiles[i]
        _say(progress, f"rank {rank}: idle gaps and exposed communication, tile {i + 1} of {len(tiles)}")
        # a single tile is the whole rank: its rows stay a view (_scope)
        span = None if (t_lo, t_hi) == (-FAR, FAR) else _tile_span(con, run_id, rank, t_lo, t_hi)
        with _scope(con, run_id, rank, span):
            for key, what, name, sql, params in (
                ("gaps", "idle gaps", "export_gaps_tile", GAP_SQL, [run_id, rank, t_lo, t_hi]),
                (
                    "comm",
                    "exposed communication",
                    "export_comm_tile",
                    COMM_SQL,
                    [t_lo, t_hi, run_id, rank, t_hi, t_lo],
                ),
            ):
                if not ok[key]:
                    continue
                if _guard(summary, f"rank {rank}: {what}", _temp, con, name, sql, params) is None:
                    ok[key] = False
                    continue
                target = "export_gaps" if key == "gaps" else "export_comm_pieces"
                if con.execute(
                    "SELECT count(*) FROM duckdb_tables() WHERE temporary AND table_name = ?", [target]
                ).fetchone()[0]:
                    con.execute(f"INSERT INTO temp.{target} SELECT * FROM temp.{name}")
                else:
                    con.execute(f"CREATE TEMP TABLE {target} AS SELECT * FROM temp.{name}")
                con.execute(f"DROP TABLE temp.{name}")

    for t in ("export_gaps", "export_comm_pieces", "export_comm"):
        con.execute(f"DROP TABLE IF EXISTS temp.{t}")
    wanted = [
        i for i, (a, b) in enumerate(tiles) if b > lo and (a < hi or (after is not None and a <= after))
    ]
    for i in wanted:
        tile(i)

    def touching(at: int, column: str) -> bool:
        if not ok["comm"] or at in (-FAR, FAR):
            return False
        if not con.execute(
            "SELECT count(*) FROM duckdb_tables() WHERE temporary AND table_name = 'export_comm_pieces'"
        ).fetchone()[0]:
            return False
        return bool(
            con.execute(f"SELECT count(*) FROM temp.export_comm_pieces WHERE {column} = ?", [at]).fetchone()[
                0
            ]
        )

    if wanted:
        first, last = wanted[0], wanted[-1]
        while first > 0 and touching(tiles[first][0], "start_ns"):
            first -= 1
            tile(first)
        while last < len(tiles) - 1 and touching(tiles[last][1], "end_ns"):
            last += 1
            tile(last)
    have = {t for (t,) in con.execute("SELECT table_name FROM duckdb_tables() WHERE temporary").fetchall()}
    if ok["comm"] and "export_comm_pieces" in have:
        pieces = "temp.export_comm_pieces"
        # touching pieces (of one interval cut by tile bounds) joined: the view's islands
        con.execute(
            f"""
            CREATE OR REPLACE TEMP TABLE export_comm AS
            SELECT x.device, x.start_ns, x.dur_ns FROM (
                SELECT device, min(start_ns) AS start_ns, max(end_ns) - min(start_ns) AS dur_ns
                FROM (SELECT *, sum(CASE WHEN start_ns = prev_end THEN 0 ELSE 1 END)
                                    OVER (PARTITION BY device ORDER BY start_ns) AS island
                      FROM (SELECT *, lag(end_ns) OVER (PARTITION BY device ORDER BY start_ns) AS prev_end
                            FROM {pieces}) AS p) AS q
                GROUP BY device, island) AS x
            JOIN export_window AS w ON w.rank = ?
            WHERE {_overlaps("x")}""",
            [rank],
        )
    con.execute("DROP TABLE IF EXISTS temp.export_comm_pieces")
    if not ok["gaps"]:
        con.execute("DROP TABLE IF EXISTS temp.export_gaps")
    # False: nothing to write (not drawn, said by _guard; or no row at all)
    return ok["gaps"] and "export_gaps" in have, ok["comm"] and "export_comm_pieces" in have


def _analysis(
    warehouse,
    con,
    run_id,
    tracks: _Tracks,
    procs,
    windows,
    summary,
    progress,
    analysis_steps: int = ANALYSIS_STEPS,
) -> None:
    counts = dict.fromkeys(("critical_path", "idle_gaps", "exposed_comm", "layers", "flags", "takeaways"), 0)
    _say(progress, "data-quality flags")
    # the flags of the run and its ranks (streaming aggregates); the per-step ones come with each step batch
    flag_rows = _guard(summary, "data-quality flags of the run and its ranks", _run_flags, con, run_id) or []
    starts = {
        (r, st): at
        for r, st, at in con.execute(
            "SELECT rank, step, start_ns FROM step_spans WHERE run_id = ?", [run_id]
        ).fetchall()
    }
    walls = step_windows(con, run_id)
    for rank, (lo, hi) in sorted(windows.items()):
        pid = rank + 1
        group = tracks.track(
            procs[rank],
            ("analysis", rank),
            "tracehouse analysis",
            pid,
            "tracehouse's findings, from the views of sql/ (docs/interpretation.md)",
        )
        steps = _steps_in(con, run_id, rank, lo, hi)
        if len(steps) > analysis_steps:
            note = (
                f"rank {rank}: critical path, layers and per-step data-quality flags ({', '.join(STEP_FLAGS)}) "
                f"of the first {analysis_steps} of its {len(steps)} steps in the selection (--analysis-steps N, "
                "or --step / --window for others)"
            )
            summary.notes.append(note)
            tracks.w.instant(
                group,
                lo
                if lo > -FAR
                else con.execute(
                    "SELECT min(start_ns) FROM step_spans WHERE run_id = ? AND rank = ?", [run_id, rank]
                ).fetchone()[0],
                "note: per-step analyses cut",
                "note",
                {"message": note},
            )
            steps = steps[:analysis_steps]
        # per-step analyses: in batches of STEP_BATCH steps, each over the rank's rows of the batch's span only
        # (_scope): the views' work and memory are those of STEP_BATCH steps, whatever the run's size
        cp_track = layer_track = None
        step_flags = []
        for i in range(0, len(steps), STEP_BATCH):
            batch = steps[i : i + STEP_BATCH]
            _say(
                progress,
                f"rank {rank}: critical path, layers and step flags of steps {batch[0]}..{batch[-1]}",
            )
            span = _batch_span(con, run_id, rank, batch, walls)
            in_steps = ", ".join(map(str, batch))
            with _scope(con, run_id, rank, span):
                cp = _guard(
                    summary,
                    f"rank {rank}: critical path of steps {batch[0]}..{batch[-1]}",
                    _fetch,
                    con,
                    f"""
                    SELECT step, seq, kind, category, name, start_ns, dur_ns, kernel_id, op_id, stream, edge
                    FROM critical_path WHERE run_id = ? AND rank = ? AND step IN ({in_steps})
                    ORDER BY start_ns, step, seq""",
                    [run_id, rank],
                )
                layers = _guard(
                    summary,
                    f"rank {rank}: layers of steps {batch[0]}..{batch[-1]}",
                    _fetch,
                    con,
                    f"""
                    SELECT step, device, stream, layer, period, start_ns, end_ns - start_ns AS dur_ns
                    FROM export_layers WHERE run_id = ? AND rank = ? AND step IN ({in_steps})
                    ORDER BY start_ns, layer""",
                    [run_id, rank],
                )
                step_flags += (
                    _guard(
                        summary,
                        f"rank {rank}: data-quality flags of steps {batch[0]}..{batch[-1]}",
                        _fetch,
                        con,
                        f"""
                    SELECT {FLAG_COLUMNS} FROM data_quality
                    WHERE run_id = ? AND rank = ? AND step IN ({in_steps}) AND flag IN {STEP_FLAGS!r}
                    ORDER BY step, flag""",
                        [run_id, rank],
                    )
                    or []
                )
            for st, seq, kind, cat, name, start, dur, kid, op, stream, edge in cp or ():
                cp_track = cp_track or tracks.track(group, ("cp", rank), "critical path", pid, CP_DESCRIPTION)
                label = (
                    kind
                    + (f" [{cat}]" if cat else "")
                    + (f" {name}" if name else "")
                    + (f" ({edge})" if edge else "")
                )
                lane = tracks.place(cp_track, start, dur, nest=False)
                tracks.w.slice(
                    lane,
                    start,
                    dur,
                    label,
                    "critical_path",
                    {
                        "step": st,
                        "seq": seq,
                        "kind": kind,
                        "category": cat,
                        "edge": edge,
                        "kernel_id": kid,
                        "op_id": op,
                        "stream": stream,
                    },
                )
                counts["critical_path"] += 1
            for st, device, stream, layer, period, start, dur in layers or ():
                layer_track = layer_track or tracks.track(
                    group,
                    ("layers", rank),
                    "layers",
                    pid,
                    "sql/export_layers: the repeating layer of each step's main stream",
                )
                tracks.w.slice(
                    tracks.place(layer_track, start, dur, nest=False),
                    start,
                    dur,
                    f"layer {layer}",
                    "layer",
                    {"step": st, "layer": layer, "period": period, "device": device, "stream": stream},
                )
                counts["layers"] += 1
        # idle gaps and exposed communication of the selection: per tile of STEP_BATCH steps into temp tables
        # (_gaps_and_comm), so that a track is written whole or, when a tile does not fit, not at all and said so
        has_gaps, has_comm = _gaps_and_comm(con, run_id, rank, lo, hi, walls, summary, progress)
        if has_gaps:
            for row in _batches(con, "SELECT * FROM temp.export_gaps ORDER BY device, gap_start_ns", []):
                track = tracks.track(
                    group,
                    ("gaps", rank, row["device"]),
                    f"idle gaps GPU {row['device']}",
                    pid,
                    "sql/idle_gaps (scope device): why no stream of the device was busy; gaps under "
                    "1 us (class tiny) are left out",
                )
                lane = tracks.place(track, row["gap_start_ns"], row["gap_ns"], nest=False)
                tracks.w.slice(
                    lane,
                    row["gap_start_ns"],
                    row["gap_ns"],
                    f"idle: {row['class']}",
                    "idle_gap",
                    {
                        k: row[k]
                        for k in (
                            "step",
                            "class",
                            "wait_ns",
                            "host_ns",
                            "queued_ns",
                            "host_op",
                            "host_op_ns",
                            "next_name",
                            "next_kernel_id",
                        )
                    },
                )
                counts["idle_gaps"] += 1
        if has_comm:
            for row in _batches(con, "SELECT * FROM temp.export_comm ORDER BY device, start_ns", []):
                track = tracks.track(
                    group,
                    ("comm", rank, row["device"]),
                    f"exposed communication GPU {row['device']}",
                    pid,
                    "sql/export_exposed_comm: communication running with no compute beside it",
                )
                tracks.w.slice(
                    tracks.place(track, row["start_ns"], row["dur_ns"], nest=False),
                    row["start_ns"],
                    row["dur_ns"],
                    "exposed communication",
                    "exposed_comm",
                    {"dur_ns": row["dur_ns"]},
                )
                counts["exposed_comm"] += 1
        con.execute("DROP TABLE IF EXISTS temp.export_gaps")
        con.execute("DROP TABLE IF EXISTS temp.export_comm")
        any_step = {st for r, st, a, b, _ in walls if r == rank and a < hi and b > lo}
        counts["flags"] += _flags(flag_rows + step_flags, starts, rank, lo, any_step, tracks, group, pid)
    counts["takeaways"] = _guard(
        summary,
        "the run report's takeaways",
        _takeaways,
        warehouse,
        run_id,
        tracks,
        procs,
        windows,
        progress,
    )
    if counts["takeaways"] is None:
        counts["takeaways"] = 0
    elif counts["takeaways"] < 0:
        counts["takeaways"] = 0
        summary.notes.append(
            "no report takeaways: the run's analyses are not stored (ingested with "
            "--no-analyses, or storing them failed at ingest); run `tracehouse report` once, then "
            "export again"
        )
    summary.counts.update(counts)


def _flags(flag_rows, starts, rank, lo, steps, tracks: _Tracks, group, pid) -> int:
    """data_quality rows of the rank (and the run's), as instants at their step's start (step_spans) or, for a
    rank's or the run's flag, at the rank's first step start (the window's start when later)."""
    first = min((at for (r, _), at in starts.items() if r == rank), default=None)
    n = 0
    for flag, severity, frank, fstep, message, affects in flag_rows:
        if frank is not None and frank != rank:
            continue
        if fstep is not None and fstep not in steps:
            continue
        at = starts.get((rank, fstep)) if fstep is not None else (None if first is None else max(lo, first))
        if at is None:
            continue
        track = tracks.track(
            group,
            ("flags", rank),
            "data quality",
            pid,
            "sql/data_quality: why some figures cannot be trusted as they stand",
        )
        tracks.w.instant(
            track,
            int(at),
            f"{severity}: {flag}",
            "data_quality",
            {
                "flag": flag,
                "severity": severity,
                "rank": frank,
                "step": fstep,
                "affects": affects,
                "message": message,
            },
        )
        n += 1
    return n


def _takeaways(warehouse, run_id, tracks: _Tracks, procs, windows, progress) -> int:
    """The run report's takeaways, each over its window on its rank (the report's step rank for step windows,
    the lowest exported rank for the whole trace)."""
    if not is_stored(warehouse, run_id):
        # computing the report's analyses of a whole run here would cost more than the export itself
        # (they are stored at ingest; `ingest --no-analyses` leaves them to the first report)
        return -1
    _say(progress, "the run report's takeaways")
    # the report's connection within the export's memory and spill (it reads views that are not stored too,
    # the serving section's, over the whole run), spilling beside the export's connection
    spill = _spill_dir(warehouse) / "report"
    spill.mkdir(parents=True, exist_ok=True)  # DuckDB makes the last folder only
    settings = {
        "memory_limit": MEMORY_LIMIT,
        "temp_directory": str(spill),
        "max_temp_directory_size": SPILL_LIMIT,
    }
    con = open_connection(warehouse, runs=[run_id], stored=True, settings=settings)
    try:
        report = build_run_report(con, run_id)
    finally:
        con.close()
    n = 0
    for t in report.takeaways:
        w = t.where
        if w is None or w.start_ns is None or w.end_ns is None:
            continue
        if w.rank is not None and w.rank not in windows:
            continue
        rank = w.rank if w.rank is not None else min(windows)
        start, end = w.start_ns, w.end_ns
        lo, hi = windows[rank]
        if not (start < hi and (end > lo or start >= lo)):
            continue
        group = tracks.track(procs[rank], ("analysis", rank), "tracehouse analysis", rank + 1)
        track = tracks.track(
            group,
            ("takeaways", rank),
            "report takeaways",
            rank + 1,
            "the run report's takeaways (reports/takeaways.py) over the windows they name",
        )
        args = {
            "figure": t.figure,
            "value": t.value,
            "subject": t.subject,
            "window_of": t.window_of,
            "step": w.step,
            "text": t.text,
            "export": w.command,
        }
        tracks.w.slice(
            tracks.place(track, start, end - start, nest=False),
            start,
            end - start,
            t.text[:120],
            "takeaway",
            args,
        )
        n += 1
    return n


def progress_printer() -> Callable[[str], None] | None:
    if not sys.stderr.isatty():
        return None
    return lambda text: print(f"  {text}", file=sys.stderr)

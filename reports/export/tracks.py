"""The tracks of an export: track descriptors and their overlap sub-tracks (Tracks), and the recorded rows of
each rank, read per tile of about params.tile_rows rows in start order: GPU activities per (device, stream)
with the launch flows, host ops per thread, Python frames per thread."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

import duckdb
from tracehouse.reports.export import scoped
from tracehouse.reports.export.params import FAR, ExportParams, ExportSummary
from tracehouse.reports.export.scoped import overlaps
from tracehouse.reports.export.writers import track_uuid
from tracehouse.warehouse.store import Warehouse


def flow_id(rank: int, kernel_id: int) -> int:
    return ((rank + 1) << 44) ^ (int(kernel_id) + 1)


class Lanes:
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


class Tracks:
    """Track descriptors, written when first used; per track its lanes and overlap sub-tracks."""

    def __init__(self, writer, summary: ExportSummary):
        self.w, self.summary = writer, summary
        self.known: set[int] = set()
        self.lanes: dict[int, Lanes] = {}
        self.order: dict[int, int] = {}
        self.meta: dict[int, tuple[str, int]] = {}

    def process(self, rank: int, name: str) -> int:
        uuid = track_uuid("rank", rank)
        if uuid not in self.known:
            self.known.add(uuid)
            self.w.process(uuid, rank + 1, name)
        return uuid

    def track(self, parent: int, key: tuple, name: str, pid: int, description: str | None = None) -> int:
        uuid = track_uuid(*key)
        if uuid not in self.known:
            self.known.add(uuid)
            n = self.order[parent] = self.order.get(parent, 0) + 1
            self.w.track(uuid, name, parent, n, pid, description)
            self.meta[uuid] = (name, pid)
        return uuid

    def place(self, track: int, start: int, dur: int, nest: bool) -> int:
        """The track (or overlap sub-track) this slice goes on."""
        lanes = self.lanes.setdefault(track, Lanes(nest))
        lane = lanes.place(start, start + dur)
        if lane == 0:
            return track
        uuid = track_uuid("lane", track, lane)
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

    def slice_on(self, track: int, start: int, dur: int, name: str, category: str, args: dict) -> None:
        """A slice on the track's first lane where it does not overlap (no nesting: analysis tracks)."""
        self.w.slice(self.place(track, start, dur, nest=False), start, dur, name, category, args)


@dataclass
class ExportContext:
    """What every track of one export reads and writes: the warehouse and its connection (with the temp table
    export_window), the run, the params, the summary, the tracks (writer), each rank's process track and
    window, and the progress callback."""

    warehouse: Warehouse
    con: duckdb.DuckDBPyConnection
    run_id: str
    params: ExportParams
    summary: ExportSummary
    tracks: Tracks
    procs: dict[int, int]  # per rank, its process track
    windows: dict[int, tuple[int, int]]
    progress: Callable[[str], None] | None = None
    report: Any = None  # the run report when the caller built it already (report --with-trace): its takeaways

    def say(self, text: str) -> None:
        if self.progress:
            self.progress(text)


def _row_tiles(ctx: ExportContext, table: str, rank: int) -> list[tuple[int, int]]:
    """[lo, hi) tiles of start time holding about params.tile_rows of the rank's rows of `table` in its window
    each (cut at approximate quantiles of their starts; the first from -FAR, the last to FAR: together they hold
    every row once). A tile's query sorts and joins that many rows, whatever the run's size: one query over
    a 1 GB run's activities, sorted whole, ran out of a 2 GB limit (bench/results.md)."""
    con = ctx.con
    where = f"t.run_id = ? AND t.rank = ? AND {overlaps('t')}"
    rows = f"FROM {table} AS t JOIN export_window AS w ON w.rank = t.rank WHERE {where}"
    [(n,)] = con.execute(f"SELECT count(*) {rows}", [ctx.run_id, rank]).fetchall()
    parts = -(-n // ctx.params.tile_rows)
    if parts <= 1:
        return [(-FAR, FAR)]
    fractions = ", ".join(f"{i / parts:.6f}" for i in range(1, parts))
    [(cuts,)] = con.execute(
        f"SELECT approx_quantile(t.start_ns, [{fractions}]) {rows}", [ctx.run_id, rank]
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
            WHERE k.run_id = ? AND k.rank = ? AND {overlaps("k")} AND {overlaps("lo")}""",
            [run_id, rank],
        )
        yield
    finally:
        con.execute("DROP TABLE IF EXISTS temp.export_flow")


class _GpuTracks:
    """The GPU activities of every rank: one track per (rank, device, stream), named by the stream's recorded
    name, declared in (device, stream) order; the flows from the launch calls end on them."""

    def __init__(self, ctx: ExportContext):
        self.ctx = ctx
        self.stream_names = {
            (r, d, s): n
            for r, d, s, n in ctx.con.execute(
                "SELECT rank, device, stream, name FROM streams WHERE run_id = ?", [ctx.run_id]
            ).fetchall()
        }
        self.n = self.flows = 0

    def track(self, rank: int, device, stream) -> int:
        """The track of a (rank, device, stream), named by the stream's recorded name (declared on first use)."""
        label = (self.stream_names.get((rank, device, stream)) or f"stream {stream}").strip()
        return self.ctx.tracks.track(
            self.ctx.procs[rank], ("gpu", rank, device, stream), f"GPU {device} {label}", rank + 1
        )

    def write(self) -> None:
        ctx = self.ctx
        con, run_id = ctx.con, ctx.run_id
        ctx.say("GPU activities")
        for rank in sorted(ctx.procs):
            # the tracks first, in (device, stream) order, whichever tile a stream first appears in
            for device, stream in con.execute(
                f"""
                SELECT DISTINCT k.device, k.stream FROM kernels AS k JOIN export_window AS w ON w.rank = k.rank
                WHERE k.run_id = ? AND k.rank = ? AND {overlaps("k")}
                ORDER BY 1 NULLS FIRST, 2 NULLS FIRST""",
                [run_id, rank],
            ).fetchall():
                self.track(rank, device, stream)
            # the categories of the rank into a temp table (narrow; DuckDB spills it), over the rank's rows only
            with scoped.scope(con, run_id, rank, None):
                con.execute(
                    "CREATE OR REPLACE TEMP TABLE export_category AS SELECT a.kernel_id, k.start_ns, a.category "
                    "FROM activity_category AS a JOIN kernels AS k ON k.run_id = a.run_id AND k.rank = a.rank "
                    "AND k.kernel_id = a.kernel_id WHERE a.run_id = ? AND a.rank = ?",
                    [run_id, rank],
                )
            try:
                with _launch_links(con, run_id, rank):
                    for lo, hi in _row_tiles(ctx, "kernels", rank):
                        self.tile(rank, lo, hi)
            finally:
                con.execute("DROP TABLE IF EXISTS temp.export_category")
        ctx.summary.counts["gpu"] = self.n
        ctx.summary.counts["flows"] = self.flows

    def tile(self, rank: int, lo: int, hi: int) -> None:
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
            WHERE k.run_id = ? AND k.rank = ? AND k.start_ns >= ? AND k.start_ns < ? AND {overlaps("k")}
            ORDER BY k.device NULLS FIRST, k.stream NULLS FIRST, k.start_ns, k.kernel_id"""
        tracks = self.ctx.tracks
        for r in scoped.batches(self.ctx.con, sql, [lo, hi, self.ctx.run_id, rank, lo, hi]):
            track = self.track(rank, r["device"], r["stream"])
            lane = tracks.place(track, r["start_ns"], r["dur_ns"], nest=False)
            category = r["category"] or ("memory" if r["kind"] in ("memcpy", "memset") else "other")
            term = (flow_id(rank, r["kernel_id"]),) if r["has_flow"] else ()
            self.flows += len(term)
            tracks.w.slice(
                lane,
                r["start_ns"],
                r["dur_ns"],
                f"[{category}] {r['name']}",
                r["kind"],
                _gpu_args(r, category),
                terminating=term,
            )
            self.n += 1


def _gpu_args(r: dict, category: str) -> dict:
    site = f"{r['site_file']}:{r['site_line']} {r['site_function'] or ''}".strip() if r["site_file"] else None
    return {
        "kernel_id": r["kernel_id"],
        "kind": r["kind"],
        "category": category,
        "step": r["step"],
        "stream": r["stream"],
        "device": r["device"],
        "correlation": r["correlation"],
        "launch_call": r["launch_call"],
        "python_site": site,
        "grid": r["grid"],
        "block": r["block"],
        "bytes": r["bytes"],
        "collective": r["collective_name"],
    }


def gpu_tracks(ctx: ExportContext) -> None:
    _GpuTracks(ctx).write()


def _host_key(rank: int, pid, tid, cat, stream) -> tuple[tuple, str]:
    if cat == "cuda_sync":
        return ("sync", rank, pid, stream), f"GPU sync records stream {stream}"
    return ("host", rank, pid, tid), f"thread {tid} (pid {pid})"


def host_tracks(ctx: ExportContext) -> None:
    con, run_id, tracks, procs = ctx.con, ctx.run_id, ctx.tracks, ctx.procs
    ctx.say("host ops")
    n = 0
    for rank in sorted(procs):
        # the tracks first, in the order of their first op (by pid, tid, start)
        for pid, tid, cat, stream in con.execute(
            f"""
            SELECT o.pid, o.tid, if(o.cat = 'cuda_sync', 'cuda_sync', NULL) AS sync, if(sync IS NULL, NULL, o.stream)
            FROM cpu_ops AS o JOIN export_window AS w ON w.rank = o.rank
            WHERE o.run_id = ? AND o.rank = ? AND {overlaps("o")}
            GROUP BY ALL ORDER BY o.pid, o.tid, min(o.start_ns), 3 NULLS FIRST, 4 NULLS FIRST""",
            [run_id, rank],
        ).fetchall():
            key, name = _host_key(rank, pid, tid, cat, stream)
            tracks.track(procs[rank], key, name, rank + 1)
        with _launch_links(con, run_id, rank):
            for lo, hi in _row_tiles(ctx, "cpu_ops", rank):
                n += _host_tile(ctx, rank, lo, hi)
    ctx.summary.counts["host"] = n


def _host_tile(ctx: ExportContext, rank: int, lo: int, hi: int) -> int:
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
        WHERE o.run_id = ? AND o.rank = ? AND o.start_ns >= ? AND o.start_ns < ? AND {overlaps("o")}
        ORDER BY o.pid, o.tid, o.start_ns, o.dur_ns DESC, o.op_id"""
    tracks, n = ctx.tracks, 0
    for r in scoped.batches(ctx.con, sql, [lo, hi, ctx.run_id, rank, lo, hi]):
        key, name = _host_key(rank, r["pid"], r["tid"], r["cat"], r["stream"])
        track = tracks.track(ctx.procs[rank], key, name, rank + 1)
        lane = tracks.place(track, r["start_ns"], r["dur_ns"], nest=True)
        flows = tuple(flow_id(rank, k) for k in (r["kernel_ids"] or ()))
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


def python_tracks(ctx: ExportContext) -> None:
    con, run_id, tracks, procs = ctx.con, ctx.run_id, ctx.tracks, ctx.procs
    ctx.say("Python frames")
    n = 0
    for rank in sorted(procs):
        for pid, tid in con.execute(
            f"""
            SELECT DISTINCT f.pid, f.tid FROM python_frames AS f JOIN export_window AS w ON w.rank = f.rank
            WHERE f.run_id = ? AND f.rank = ? AND {overlaps("f")} ORDER BY 1, 2""",
            [run_id, rank],
        ).fetchall():
            tracks.track(procs[rank], ("python", rank, pid, tid), f"python thread {tid}", rank + 1)
        for lo, hi in _row_tiles(ctx, "python_frames", rank):
            sql = f"""
                SELECT f.frame_id, f.pid, f.tid, f.name, f.start_ns, coalesce(f.dur_ns, 0) AS dur_ns
                FROM python_frames AS f JOIN export_window AS w ON w.rank = f.rank
                WHERE f.run_id = ? AND f.rank = ? AND f.start_ns >= ? AND f.start_ns < ? AND {overlaps("f")}
                ORDER BY f.pid, f.tid, f.start_ns, f.dur_ns DESC, f.frame_id"""
            for r in scoped.batches(con, sql, [run_id, rank, lo, hi]):
                track = tracks.track(
                    procs[rank], ("python", rank, r["pid"], r["tid"]), f"python thread {r['tid']}", rank + 1
                )
                lane = tracks.place(track, r["start_ns"], r["dur_ns"], nest=True)
                tracks.w.slice(
                    lane, r["start_ns"], r["dur_ns"], r["name"], "python", {"frame_id": r["frame_id"]}
                )
                n += 1
    ctx.summary.counts["python"] = n

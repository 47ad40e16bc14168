"""Ingest of one trace file (one rank): the stages, in order, from bytes to Parquet files.

    1. source.read_trace     inflate, split metadata from the event array (streaming), cut into pieces
    2. decode.load_raw_events   the array -> typed columns (DuckDB's JSON reader; the pieces side by
                              side, each from when it is written)
    3. sql/NN_*.sql           type, nest, link and step the events (set-based SQL, in file order)
    4. write_tables           one Parquet file per table, for this rank, as warehouse.schema declares it

Stages 1-3 are `staged`, the one sequence every reader of a Kineto file runs (a rank here, a capture
trace in ingest/capture.py, the per-stage benchmark in bench/run.py); what each does with the staged
tables afterwards is its own.

Everything runs in a DuckDB database of its own, in memory with a memory limit and a spill folder in
the staging area, so that a trace larger than memory spills to disk instead of failing.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import duckdb
from tracehouse.ingest.decode import PieceDecoder, event_warnings, load_raw_events, piece_bytes
from tracehouse.ingest.memory import work_threads
from tracehouse.ingest.source import TraceSource, read_trace, remove_array
from tracehouse.warehouse import local_db
from tracehouse.warehouse.quoting import sql_string
from tracehouse.warehouse.schema import cast_select

from tracehouse.errors import TraceFormatError

SQL_DIR = Path(__file__).parent / "sql"
TRANSFORMS = sorted(SQL_DIR.glob("[0-9][0-9]_*.sql"))

# table name in the warehouse -> the staging table it is written from, and its sort order
TABLES = {
    "kernels": ("kernels", "start_ns, kernel_id"),
    "cpu_ops": ("cpu_ops", "pid, tid, start_ns, op_id"),
    "python_frames": ("python_frames", "pid, tid, start_ns, frame_id"),
    "flows": ("flows", "kind, flow_id"),
    "streams": ("streams", "device, stream"),
    "step_spans": ("steps", "step"),
}


@dataclass
class RankResult:
    """What one rank contributed, for the runs row."""

    path: str
    rank: int
    size: int
    sha256: str
    json_bytes: int
    metadata: dict
    events: dict[str, int] = field(default_factory=dict)
    warnings: dict[str, int] = field(default_factory=dict)
    hints: dict[str, int] = field(default_factory=dict)
    span: dict[str, int | None] = field(default_factory=dict)
    rows: dict[str, int] = field(default_factory=dict)
    empty_reason: str | None = None  # no timed event in the file: why (ingest.run refuses the file)


def work_connection(work_dir: Path) -> duckdb.DuckDBPyConnection:
    # In memory, with the policy's limit (in a worker: its share) and a spill folder in the staging area:
    # small traces never touch the disk, large ones spill. Insertion order kept: an event's id is its
    # position in the file.
    return local_db.connect(spill=work_dir / "spill")


def run_transforms(
    con: duckdb.DuckDBPyConnection,
    stage_phase: str | None,
    label_phase: str | None,
    on_file: Callable[[Path, float], None] | None = None,
) -> None:
    """The ingest/sql transforms, in file order, on the `events` table; on_file(file, seconds) after each."""
    con.execute(
        "CREATE OR REPLACE TABLE rank_context AS SELECT ?::VARCHAR AS stage_phase, ?::VARCHAR AS label_phase",
        [stage_phase, label_phase],
    )
    # Ranks ingested side by side share the cores (RankPool sets TRACEHOUSE_THREADS for its workers).
    con.execute(f"SET threads = {work_threads()}")
    for sql_file in TRANSFORMS:
        began = time.perf_counter()
        con.execute(sql_file.read_text())
        if on_file is not None:
            on_file(sql_file, time.perf_counter() - began)


@dataclass
class Staged:
    """A trace file after the shared stages: what stage 1 read, the open work connection (its tables:
    `events` and what ingest/sql/ makes of them), and the repairs counted so far."""

    source: TraceSource
    con: duckdb.DuckDBPyConnection
    repairs: dict[str, int]


@contextmanager
def staged(
    path: Path,
    work_dir: Path,
    stage_phase: str | None = None,
    label_phase: str | None = None,
    *,
    extra_args: dict[str, str] | None = None,
    connect: Callable[[Path], duckdb.DuckDBPyConnection] | None = None,
    on_stage: Callable[[str, duckdb.DuckDBPyConnection | None], None] | None = None,
    on_file: Callable[[Path, float], None] | None = None,
) -> Iterator[Staged]:
    """The stage sequence every reader of a Kineto file shares (a rank, a capture trace, the benchmark):
    a work connection -> read_trace (its array's pieces decoded as they are written) -> load_raw_events
    -> the ingest/sql transforms -> event_warnings. (So "read" below includes the pieces decoded by then.)

    Yields the Staged file with its connection open; the connection is closed and the event array's
    copy removed on leaving, whatever happens. `extra_args`: more `args` keys to read (column -> key);
    `connect`: the work connection (default work_connection); `on_stage(name, con)` is called after
    each stage ("read", con None; "decode"; "transforms") and `on_file` after each transform file, for a
    caller that times them. DuckDB refusing the event array is a TraceFormatError naming the file.
    """
    work_dir.mkdir(parents=True, exist_ok=True)
    events_file = work_dir / "events.json"
    try:
        con = (connect or work_connection)(work_dir)
        try:
            # the array's pieces are decoded as they are written (ingest/decode.py PieceDecoder)
            decoder = PieceDecoder(con, extra_args)
            try:
                source = read_trace(path, events_file, piece_bytes(path), on_piece=decoder.add)
                if on_stage is not None:
                    on_stage("read", None)
                try:
                    repairs = load_raw_events(
                        con, events_file, source, extra_args=extra_args, decoder=decoder
                    )
                except duckdb.OutOfMemoryException:
                    raise  # not the file's fault: ingest.run says which setting to raise
                except duckdb.Error as exc:
                    raise TraceFormatError(
                        str(path), f"invalid trace JSON ({_first_line(exc)})", "event array"
                    )
            finally:
                decoder.close()
            remove_array(events_file)
            if on_stage is not None:
                on_stage("decode", con)
            run_transforms(con, stage_phase, label_phase, on_file)
            repairs.update(event_warnings(con))
            if on_stage is not None:
                on_stage("transforms", con)
            yield Staged(source, con, repairs)
        finally:
            con.close()
    finally:
        remove_array(events_file)


def write_tables(con: duckdb.DuckDBPyConnection, out_dir: Path, rank: int) -> dict[str, int]:
    rows = {}
    for table, (source, order) in TABLES.items():
        target = out_dir / table
        target.mkdir(parents=True, exist_ok=True)
        path = target / f"rank-{rank:05d}.parquet"
        # the declared columns, in order, each cast to its declared type (warehouse.schema): a type that
        # follows the trace's data cannot make one rank's file differ from another's
        con.execute(
            f"COPY (SELECT {int(rank)}::INTEGER AS rank, {cast_select(table, source)} FROM {source} ORDER BY {order}) "
            f"TO {sql_string(path)} (FORMAT parquet, COMPRESSION zstd)"
        )
        rows[table] = con.execute(f"SELECT count(*) FROM {source}").fetchone()[0]
    return rows


def ingest_rank(
    path: Path,
    rank: int,
    stage_phase: str | None,
    out_dir: Path,
    work_dir: Path,
    label_phase: str | None = None,
) -> RankResult:
    """Run every stage for one file; Parquet goes to out_dir/<table>/rank-<rank>.parquet."""
    with staged(path, work_dir, stage_phase, label_phase) as file:
        rows = write_tables(file.con, out_dir, rank)
        summary = file.con.execute("SELECT kind, key, value FROM rank_summary").fetchall()
    source = file.source
    result = RankResult(
        path=str(path),
        rank=rank,
        size=source.size,
        sha256=source.sha256,
        json_bytes=source.json_bytes,
        metadata=source.metadata,
        rows=rows,
        warnings=dict(file.repairs),
        empty_reason=source.empty_reason,
    )
    for kind, key, value in summary:
        if kind == "events":
            result.events[key] = int(value)
        elif kind == "warning" and value:
            result.warnings[key] = int(value)
        elif kind == "hint":
            result.hints[key] = int(value)
        elif kind == "span":
            result.span[key] = None if value is None else int(value)
    return result


def _first_line(exc: Exception) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:300] if text else type(exc).__name__

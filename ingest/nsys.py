"""Ingest of Nsight Systems exports (`nsys export --type sqlite`): the same tables as a Kineto trace.

An export is recognised by its schema (a `META_DATA_EXPORT` table naming NVIDIA Nsight Systems and an
export schema of major version 3), not by its file name. Each process of the export that has GPU activity
or CUDA calls is one rank (several processes in one file, or one file per rank in a folder: ranks are
numbered in file order, then by the lowest device each process used, then by pid). The export's rows are
turned into the typed `events` table that the Kineto path builds (ingest/sql/type_events.sql's columns)
and then the same transforms (ingest/sql/NN_*.sql) run on them, so every table and view means the same
thing for both sources:

    CUPTI_ACTIVITY_KIND_KERNEL   -> kernel      (name: demangled, through StringIds; pid = device,
                                                 tid = stream, correlation = correlationId)
    CUPTI_ACTIVITY_KIND_MEMCPY   -> gpu_memcpy  ("Memcpy HtoD (Pinned -> Device)", as Kineto names them)
    CUPTI_ACTIVITY_KIND_MEMSET   -> gpu_memset  ("Memset (Device)")
    CUPTI_ACTIVITY_KIND_RUNTIME  -> cuda_runtime / cuda_driver (a `cu*` name that is not `cuda*`); the
                                    `_vNNNN` suffix of the API version is dropped (cudaLaunchKernel_v7000
                                    -> cudaLaunchKernel), as Kineto names them
    CUPTI_ACTIVITY_KIND_SYNCHRONIZATION -> cuda_sync ("Event Sync", "Stream Wait Event", "Stream Sync",
                                    "Context Sync"); the recorded stream and the cudaEventRecord's
                                    correlation come from CUPTI_ACTIVITY_KIND_CUDA_EVENT (eventSyncId, else
                                    the last record of the same event issued before the sync)
    NVTX_EVENTS push/pop and start/end ranges -> cpu_op when the range is a PyTorch operator
                                    (`torch.autograd.profiler.emit_nvtx`: a `ns::op` name with a lower-case
                                    namespace, `record_param_comms`, or a `seq = N` field; the
                                    `, op_id = N, seq = N, sizes = ...` fields are cut from the name, seq is
                                    the sequence number, sizes the input dims), else user_annotation (so a
                                    `ProfilerStep#N` range is a step, as in Kineto)

Times are the export's integer ns, untouched (no microsecond decimals on this path). The run's base time is
TARGET_INFO_SESSION_START_TIME's UTC epoch minus its system clock, so base_time_ns + start_ns is UTC.
Rows are read with the standard library's sqlite3 (read-only) and handed to DuckDB in Arrow batches of
BATCH_ROWS, so memory stays bounded whatever the export's size.

Refused with one line (nothing of the run is stored): a `.nsys-rep` report (export it first), a SQLite
file that is not an Nsight Systems export, a truncated or damaged database, an export of another schema
major version, an export without the kernel table's columns.
"""

from __future__ import annotations

import os
import re
import sqlite3
from dataclasses import dataclass
from pathlib import Path

import duckdb
import pyarrow as pa

from errors import TraceFormatError, TracehouseError
from ingest.rank import RankResult, _connect, _run_transforms, write_tables

SQLITE_MAGIC = b"SQLite format 3\x00"
REPORT_SUFFIXES = (".nsys-rep", ".qdrep")
EXPORT_SUFFIXES = (".sqlite", ".sqlite3")
SCHEMA_MAJOR = "3"
BATCH_ROWS = int(os.environ.get("TRACEHOUSE_NSYS_BATCH", "65536"))
HINT = "the file was skipped; export the report again with `nsys export --type sqlite REPORT.nsys-rep`"

# The columns of the typed `events` table (ingest/sql/type_events.sql) this path fills; the others are NULL.
EVENT_SCHEMA = pa.schema([
    ("ev_id", pa.int64()), ("ph", pa.string()), ("cat", pa.string()), ("name", pa.string()),
    ("pid", pa.string()), ("tid", pa.string()), ("start_ns", pa.int64()), ("dur_ns", pa.int64()),
    ("correlation", pa.int64()), ("stream", pa.int64()), ("device", pa.int32()), ("grid", pa.string()),
    ("block", pa.string()), ("registers", pa.int32()), ("shared_memory", pa.int64()), ("bytes", pa.int64()),
    ("input_dims", pa.string()), ("sequence_number", pa.int64()), ("wait_on_stream", pa.int64()),
    ("wait_on_event_corr", pa.int64()), ("sync_kind", pa.string()), ("dur_clamped", pa.bool_()),
])

EVENTS_DDL = """
CREATE OR REPLACE TABLE events (
    ev_id BIGINT, ph VARCHAR, cat VARCHAR, cat_lc VARCHAR, name VARCHAR, pid VARCHAR, tid VARCHAR,
    start_ns BIGINT, dur_ns BIGINT, dur_clamped BOOLEAN DEFAULT false, dur_absurd BOOLEAN DEFAULT false,
    ts_out_of_range BOOLEAN DEFAULT false, flow_id VARCHAR, bp VARCHAR, gpu_kind VARCHAR, external_id BIGINT,
    correlation BIGINT, stream BIGINT, device INTEGER, grid VARCHAR, block VARCHAR, registers INTEGER,
    shared_memory BIGINT, occupancy DOUBLE, bytes BIGINT, python_id BIGINT, python_parent_id BIGINT,
    input_dims VARCHAR, input_types VARCHAR, collective_name VARCHAR, in_msg_nelems BIGINT,
    out_msg_nelems BIGINT, group_size INTEGER, dtype VARCHAR, process_group VARCHAR,
    process_group_desc VARCHAR, meta_name VARCHAR, sequence_number BIGINT, fwd_thread_id BIGINT,
    wait_on_stream BIGINT, wait_on_event_corr BIGINT, sync_kind VARCHAR, dur_missing BOOLEAN DEFAULT false
)
"""

GPU_KIND = {"kernel": "kernel", "gpu_memcpy": "memcpy", "gpu_memset": "memset"}
COPY_KIND = {0: "Unknown", 1: "HtoD", 2: "DtoH", 3: "HtoA", 4: "AtoH", 5: "AtoA", 6: "AtoD", 7: "DtoA",
             8: "DtoD", 9: "HtoH", 10: "PtoP", 11: "HtoD", 12: "DtoH", 13: "DtoD"}
MEM_KIND = {0: "Pageable", 1: "Pinned", 2: "Device", 3: "Array", 4: "Managed", 5: "Device Static",
            6: "Managed Static", 7: "Unknown"}
SYNC_KIND = {0: "Unknown", 1: "Event Sync", 2: "Stream Wait Event", 3: "Stream Sync", 4: "Context Sync"}
NVTX_RANGES = (59, 60)  # NvtxPushPopRange, NvtxStartEndRange
TID_BITS = 24  # globalTid = globalPid | tid; globalPid = (vm << 48) | (pid << 24)

W_NVTX_OPEN = "NVTX ranges without an end skipped"

_VERSION_SUFFIX = re.compile(r"_v\d+$")
_OP_FIELDS = re.compile(r",\s*(op_id|seq|sizes|input_op_ids)\s*=")
_SEQ = re.compile(r",\s*seq\s*=\s*(-?\d+)")
_SIZES = re.compile(r",\s*sizes\s*=\s*(\[.*?\]\])(?:,|$)")
_TORCH_OP = re.compile(r"^[a-z_][a-z0-9_]*::[A-Za-z_]")


@dataclass
class NsysRank:
    """One process of an export, to be ingested as one rank."""

    path: Path
    rank: int
    global_pid: int
    pid: int
    process_name: str | None
    devices: list[int]


# ---- detection and validation --------------------------------------------------------------------
def is_report(path: Path) -> bool:
    return path.name.lower().endswith(REPORT_SUFFIXES)


def is_sqlite(path: Path) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(16) == SQLITE_MAGIC
    except OSError:
        return False


def is_nsys_input(path: Path) -> bool:
    """A file this module reads or refuses: an SQLite database (by its bytes) or an .nsys-rep report."""
    return path.is_file() and (is_report(path) or is_sqlite(path))


def is_export_name(path: Path) -> bool:
    """Names picked up inside a run directory beside Kineto traces."""
    return path.name.lower().endswith(EXPORT_SUFFIXES + REPORT_SUFFIXES)


def _refuse(path: Path, what: str) -> TraceFormatError:
    return TraceFormatError(str(path), what, hint=HINT)


def _check_size(path: Path) -> None:
    """A database shorter than its header says was cut (a copy that did not finish)."""
    with open(path, "rb") as f:
        head = f.read(100)
    if len(head) < 100:
        raise _refuse(path, "truncated SQLite database (shorter than its 100-byte header)")
    page_size = int.from_bytes(head[16:18], "big")
    page_size = 65536 if page_size == 1 else page_size
    pages = int.from_bytes(head[28:32], "big")
    change, valid_for = int.from_bytes(head[24:28], "big"), int.from_bytes(head[92:96], "big")
    size = path.stat().st_size
    if pages and change == valid_for and page_size * pages > size:
        raise _refuse(path, f"truncated SQLite database ({size} bytes, its header says {page_size * pages})")


def open_export(path: Path) -> sqlite3.Connection:
    """A read-only connection to a validated export; TraceFormatError (one line) otherwise."""
    if is_report(path):
        raise TracehouseError(
            f"{path}: an Nsight Systems report (.nsys-rep) is NVIDIA's binary format; export it first with "
            f"`nsys export --type sqlite {path.name}` and ingest the .sqlite file")
    _check_size(path)
    try:
        con = sqlite3.connect(f"file:{path.resolve()}?mode=ro&immutable=1", uri=True)
        tables = {name for (name,) in con.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'view')")}
    except sqlite3.DatabaseError as exc:
        raise _refuse(path, f"not a readable SQLite database ({exc})") from None
    try:
        if "META_DATA_EXPORT" not in tables:
            raise _refuse(path, "an SQLite database but not an Nsight Systems export (no META_DATA_EXPORT table)")
        meta = dict(con.execute("SELECT name, value FROM META_DATA_EXPORT").fetchall())
        product = meta.get("EXPORT_PRODUCT_NAME") or ""
        if "Nsight Systems" not in product:
            raise _refuse(path, f"an SQLite export of {product or 'an unknown product'}, not of Nsight Systems")
        major = str(meta.get("EXPORT_SCHEMA_VERSION_MAJOR") or str(meta.get("EXPORT_SCHEMA_VERSION", "")).split(".")[0])
        if major != SCHEMA_MAJOR:
            raise _refuse(path, f"Nsight Systems export schema {meta.get('EXPORT_SCHEMA_VERSION') or major or '?'} "
                                f"is not supported (tracehouse reads schema {SCHEMA_MAJOR}.x, Nsight Systems 2021.2 "
                                f"and later)")
        need = {"StringIds": {"id", "value"},
                "CUPTI_ACTIVITY_KIND_KERNEL": {"start", "end", "deviceId", "streamId", "correlationId",
                                               "globalPid", "demangledName"}}
        for table, columns in need.items():
            if table == "CUPTI_ACTIVITY_KIND_KERNEL" and table not in tables:
                continue  # an export without GPU kernels (a CPU-only profile): its other tables still land
            have = {row[1] for row in con.execute(f'PRAGMA table_info("{table}")')}
            missing = sorted(columns - have)
            if missing:
                raise _refuse(path, f"Nsight Systems export without {table}.{', '.join(missing)} "
                                    f"(schema {meta.get('EXPORT_SCHEMA_VERSION', '?')})")
    except sqlite3.DatabaseError as exc:
        con.close()
        raise _refuse(path, f"damaged SQLite database ({exc})") from None
    except TracehouseError:
        con.close()
        raise
    return con


def _tables(con: sqlite3.Connection) -> set[str]:
    return {name for (name,) in con.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'view')")}


def _columns(con: sqlite3.Connection, table: str) -> set[str]:
    return {row[1] for row in con.execute(f'PRAGMA table_info("{table}")')}


# ---- ranks ---------------------------------------------------------------------------------------
def processes(path: Path) -> list[tuple[int, list[int]]]:
    """(globalPid, devices it used) of every process with GPU activity or CUDA calls, in rank order."""
    con = open_export(path)
    try:
        tables = _tables(con)
        found: dict[int, set[int]] = {}
        for table in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET"):
            if table in tables:
                for gpid, device in con.execute(f'SELECT DISTINCT globalPid, deviceId FROM "{table}"'):
                    found.setdefault(gpid, set()).add(device)
        if "CUPTI_ACTIVITY_KIND_RUNTIME" in tables:
            for (gpid,) in con.execute(f"SELECT DISTINCT (globalTid >> {TID_BITS}) << {TID_BITS} "
                                       "FROM CUPTI_ACTIVITY_KIND_RUNTIME"):
                found.setdefault(gpid, set())
    except sqlite3.DatabaseError as exc:
        raise _refuse(path, f"damaged SQLite database ({exc})") from None
    finally:
        con.close()
    order = sorted(found, key=lambda g: (min(found[g]) if found[g] else 1 << 30, _pid(g)))
    return [(g, sorted(found[g])) for g in order]


def _pid(global_pid: int) -> int:
    return (global_pid >> TID_BITS) & 0xFFFFFF


def plan_ranks(files: list[Path]) -> tuple[list[NsysRank], list[tuple[Path, str]]]:
    """Ranks of the exports (file order, then process order); files that cannot be read, with why."""
    ranks: list[NsysRank] = []
    problems: list[tuple[Path, str]] = []
    for path in files:
        try:
            procs = processes(path)
        except TracehouseError as exc:
            problems.append((path, f"{exc} ({exc.hint})" if exc.hint else str(exc)))
            continue
        if not procs:
            problems.append((path, f"{path}: nothing to ingest: the export has no GPU activity and no CUDA call "
                                   f"(was it recorded with --trace=cuda?)"))
            continue
        names = _process_names(path)
        for gpid, devices in procs:
            ranks.append(NsysRank(path, len(ranks), gpid, _pid(gpid), names.get(gpid), devices))
    return ranks, problems


def _process_names(path: Path) -> dict[int, str]:
    con = open_export(path)
    try:
        if "PROCESSES" not in _tables(con):
            return {}
        return {g: n for g, n in con.execute("SELECT globalPid, name FROM PROCESSES")}
    finally:
        con.close()


# ---- one rank: export rows -> events -> the Kineto path's transforms -----------------------------
def _batches(cursor: sqlite3.Cursor, convert) -> list:
    while rows := cursor.fetchmany(BATCH_ROWS):
        yield convert(rows)


class _Events:
    """Appends event rows to DuckDB's `events` in Arrow batches, numbering them (ev_id)."""

    def __init__(self, con: duckdb.DuckDBPyConnection) -> None:
        self.con = con
        self.next_id = 0
        con.execute(EVENTS_DDL)

    def add(self, rows: list[dict]) -> None:
        if not rows:
            return
        for row in rows:
            row["ev_id"] = self.next_id
            self.next_id += 1
        batch = pa.Table.from_pylist(rows, schema=EVENT_SCHEMA)  # noqa: F841 - read by DuckDB below
        self.con.execute(
            "INSERT INTO events BY NAME SELECT *, lower(cat) AS cat_lc, "
            "CASE cat WHEN 'kernel' THEN 'kernel' WHEN 'gpu_memcpy' THEN 'memcpy' WHEN 'gpu_memset' THEN 'memset' "
            "END AS gpu_kind FROM batch")


def _interval(start, end) -> tuple[int, int, bool]:
    dur = end - start
    return start, max(dur, 0), dur < 0


def _api_name(name: str | None) -> str:
    return _VERSION_SUFFIX.sub("", name or "")


def nvtx_op(text: str) -> tuple[str, str, int | None, str | None]:
    """(cat, name, sequence number, input dims) of an NVTX range's text (see the module's docstring)."""
    cut = _OP_FIELDS.search(text)
    name = text[: cut.start()] if cut else text
    seq = _SEQ.search(text)
    sizes = _SIZES.search(text)
    torch_op = bool(_TORCH_OP.match(name)) or name == "record_param_comms" or seq is not None
    return ("cpu_op" if torch_op else "user_annotation", name, int(seq.group(1)) if seq else None,
            sizes.group(1) if sizes else None)


def load_events(sq: sqlite3.Connection, con: duckdb.DuckDBPyConnection, global_pid: int) -> dict[str, int]:
    """Fill `events` with one process's rows; returns the counts of what was repaired or skipped."""
    tables = _tables(sq)
    out = _Events(con)
    warnings: dict[str, int] = {}
    lo, hi = global_pid, global_pid + (1 << TID_BITS)
    negative = 0

    def host(rows):
        nonlocal negative
        res = []
        for start, end, gtid, corr, name in rows:
            s, d, neg = _interval(start, end)
            negative += neg
            api = _api_name(name)
            cat = "cuda_driver" if api.startswith("cu") and not api.startswith("cuda") else "cuda_runtime"
            res.append({"ph": "X", "cat": cat, "name": api, "pid": str(_pid(gtid)), "tid": str(gtid & 0xFFFFFF),
                        "start_ns": s, "dur_ns": d, "correlation": corr, "dur_clamped": neg})
        return res

    if "CUPTI_ACTIVITY_KIND_RUNTIME" in tables:
        cur = sq.execute("SELECT r.start, r.end, r.globalTid, r.correlationId, s.value "
                         "FROM CUPTI_ACTIVITY_KIND_RUNTIME r LEFT JOIN StringIds s ON s.id = r.nameId "
                         "WHERE r.globalTid >= ? AND r.globalTid < ?", (lo, hi))
        for batch in _batches(cur, host):
            out.add(batch)

    if "NVTX_EVENTS" in tables:
        has_text_id = "textId" in _columns(sq, "NVTX_EVENTS")
        text = "coalesce(n.text, s.value)" if has_text_id else "n.text"
        join = "LEFT JOIN StringIds s ON s.id = n.textId" if has_text_id else ""
        open_ranges = sq.execute(f"SELECT count(*) FROM NVTX_EVENTS WHERE eventType IN {NVTX_RANGES} "
                                 "AND end IS NULL AND globalTid >= ? AND globalTid < ?", (lo, hi)).fetchone()[0]
        if open_ranges:
            warnings[W_NVTX_OPEN] = open_ranges

        def ranges(rows):
            nonlocal negative
            res = []
            for start, end, gtid, txt in rows:
                cat, name, seq, dims = nvtx_op(txt or "")
                s, d, neg = _interval(start, end)
                negative += neg
                res.append({"ph": "X", "cat": cat, "name": name, "pid": str(_pid(gtid)),
                            "tid": str(gtid & 0xFFFFFF), "start_ns": s, "dur_ns": d, "sequence_number": seq,
                            "input_dims": dims, "dur_clamped": neg})
            return res

        cur = sq.execute(f"SELECT n.start, n.end, n.globalTid, {text} FROM NVTX_EVENTS n {join} "
                         f"WHERE n.eventType IN {NVTX_RANGES} AND n.end IS NOT NULL "
                         "AND n.globalTid >= ? AND n.globalTid < ?", (lo, hi))
        for batch in _batches(cur, ranges):
            out.add(batch)

    def gpu(cat):
        def convert(rows):
            nonlocal negative
            res = []
            for row in rows:
                start, end, device, stream, corr = row[:5]
                s, d, neg = _interval(start, end)
                negative += neg
                e = {"ph": "X", "cat": cat, "pid": str(device), "tid": str(stream), "start_ns": s, "dur_ns": d,
                     "device": device, "stream": stream, "correlation": corr, "dur_clamped": neg}
                if cat == "kernel":
                    name, gx, gy, gz, bx, by, bz, regs, shared = row[5:]
                    e.update({"name": name or "", "grid": f"[{gx},{gy},{gz}]", "block": f"[{bx},{by},{bz}]",
                              "registers": regs, "shared_memory": shared})
                elif cat == "gpu_memcpy":
                    nbytes, kind, src, dst = row[5:]
                    e.update({"name": f"Memcpy {COPY_KIND.get(kind, 'Unknown')} ({MEM_KIND.get(src, 'Unknown')} -> "
                                      f"{MEM_KIND.get(dst, 'Unknown')})", "bytes": nbytes})
                else:
                    nbytes, mem = row[5:]
                    e.update({"name": f"Memset ({MEM_KIND.get(mem, 'Unknown')})", "bytes": nbytes})
                res.append(e)
            return res
        return convert

    base = "a.start, a.end, a.deviceId, a.streamId, a.correlationId"
    if "CUPTI_ACTIVITY_KIND_KERNEL" in tables:
        cols = _columns(sq, "CUPTI_ACTIVITY_KIND_KERNEL")

        def col(name: str) -> str:
            return f"a.{name}" if name in cols else "NULL"

        short = "shortName" in cols
        name = "coalesce(d.value, sn.value)" if short else "d.value"
        shared = (f"coalesce({col('staticSharedMemory')}, 0) + coalesce({col('dynamicSharedMemory')}, 0)")
        cur = sq.execute(
            f"SELECT {base}, {name}, {col('gridX')}, {col('gridY')}, {col('gridZ')}, {col('blockX')}, "
            f"{col('blockY')}, {col('blockZ')}, {col('registersPerThread')}, {shared} "
            "FROM CUPTI_ACTIVITY_KIND_KERNEL a LEFT JOIN StringIds d ON d.id = a.demangledName "
            + ("LEFT JOIN StringIds sn ON sn.id = a.shortName " if short else "")
            + "WHERE a.globalPid = ?", (global_pid,))
        for batch in _batches(cur, gpu("kernel")):
            out.add(batch)
    if "CUPTI_ACTIVITY_KIND_MEMCPY" in tables:
        cur = sq.execute(f"SELECT {base}, a.bytes, a.copyKind, a.srcKind, a.dstKind "
                         "FROM CUPTI_ACTIVITY_KIND_MEMCPY a WHERE a.globalPid = ?", (global_pid,))
        for batch in _batches(cur, gpu("gpu_memcpy")):
            out.add(batch)
    if "CUPTI_ACTIVITY_KIND_MEMSET" in tables:
        cur = sq.execute(f"SELECT {base}, a.bytes, a.memKind FROM CUPTI_ACTIVITY_KIND_MEMSET a "
                         "WHERE a.globalPid = ?", (global_pid,))
        for batch in _batches(cur, gpu("gpu_memset")):
            out.add(batch)
    if "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION" in tables:
        negative += _load_syncs(sq, out, tables, global_pid)
    return warnings  # negative durations are counted by ingest/sql/80_summary.sql (events.dur_clamped)


def _load_syncs(sq: sqlite3.Connection, out: _Events, tables: set[str], global_pid: int) -> int:
    """cuda_sync records; a Stream Wait Event / Event Sync names the recorded stream and the record's
    correlation when the export has the CUDA event records (nsys --cuda-event-trace=true)."""
    sync_cols = _columns(sq, "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION")
    sync_id = "s.eventSyncId" if "eventSyncId" in sync_cols else "NULL"
    records: dict = {}
    by_event: dict = {}
    if "CUPTI_ACTIVITY_KIND_CUDA_EVENT" in tables:
        ev_cols = _columns(sq, "CUPTI_ACTIVITY_KIND_CUDA_EVENT")
        ev_sync = "eventSyncId" if "eventSyncId" in ev_cols else "NULL"
        for event_id, esync, stream, corr in sq.execute(
                f"SELECT eventId, {ev_sync}, streamId, correlationId FROM CUPTI_ACTIVITY_KIND_CUDA_EVENT "
                "WHERE globalPid = ? ORDER BY correlationId", (global_pid,)):
            if esync is not None:
                records[esync] = (stream, corr)
            by_event.setdefault(event_id, []).append((corr, stream))
    negative = 0

    def record_of(event_id, esync, corr):
        if esync is not None and esync in records:
            return records[esync]
        earlier = [r for r in by_event.get(event_id, ()) if corr is None or r[0] < corr]
        return (earlier[-1][1], earlier[-1][0]) if earlier else (None, None)

    def convert(rows):
        nonlocal negative
        res = []
        for start, end, device, stream, corr, kind, event_id, esync in rows:
            s, d, neg = _interval(start, end)
            negative += neg
            name = SYNC_KIND.get(kind, "Unknown")
            rec_stream, rec_corr = record_of(event_id, esync, corr) if name in ("Stream Wait Event", "Event Sync") \
                else (None, None)
            res.append({"ph": "X", "cat": "cuda_sync", "name": name, "pid": str(device), "tid": str(stream),
                        "start_ns": s, "dur_ns": d, "device": device, "stream": stream, "correlation": corr,
                        "sync_kind": name, "wait_on_stream": rec_stream, "wait_on_event_corr": rec_corr,
                        "dur_clamped": neg})
        return res

    cur = sq.execute(f"SELECT s.start, s.end, s.deviceId, s.streamId, s.correlationId, s.syncType, s.eventId, "
                     f"{sync_id} FROM CUPTI_ACTIVITY_KIND_SYNCHRONIZATION s WHERE s.globalPid = ?", (global_pid,))
    for batch in _batches(cur, convert):
        out.add(batch)
    return negative


def export_metadata(sq: sqlite3.Connection, rank: NsysRank, ranks_in_file: list[dict]) -> dict:
    """The rank's metadata (runs.metadata / device_properties): product, schema, host, devices."""
    tables = _tables(sq)
    meta = dict(sq.execute("SELECT name, value FROM META_DATA_EXPORT").fetchall())
    env = {}
    if "TARGET_INFO_SYSTEM_ENV" in tables:
        cols = _columns(sq, "TARGET_INFO_SYSTEM_ENV")
        if {"name", "value"} <= cols:
            env = {n: v for n, v in sq.execute("SELECT name, value FROM TARGET_INFO_SYSTEM_ENV")
                   if n in ("Hostname", "NvDriverVersion", "CudaDriverVersion", "OsDescription", "CpuArchitecture")}
    out = {
        "source_format": "nsys",
        "nsys_version": meta.get("EXPORT_PRODUCT_VERSION"),
        "export_schema": meta.get("EXPORT_SCHEMA_VERSION"),
        "export_input": meta.get("EXPORT_PARAM_INPUT_FILE"),
        "system": env,
        "ranks": ranks_in_file,
    }
    if "TARGET_INFO_SESSION_START_TIME" in tables:
        row = sq.execute("SELECT utcEpochNs, systemClockNs FROM TARGET_INFO_SESSION_START_TIME").fetchone()
        if row and row[0] is not None and row[1] is not None:
            out["baseTimeNanoseconds"] = int(row[0]) - int(row[1])
    props = device_properties(sq, tables)
    if props:
        out["deviceProperties"] = props
    return out


def device_properties(sq: sqlite3.Connection, tables: set[str]) -> list[dict]:
    """One entry per CUDA device, shaped like Kineto's deviceProperties (id = the CUDA device index):
    TARGET_INFO_GPU (name, memory, SMs) joined to TARGET_INFO_CUDA_DEVICE (cudaId) where both exist."""
    if "TARGET_INFO_GPU" not in tables:
        return []
    gpu_cols = _columns(sq, "TARGET_INFO_GPU")
    rows = [dict(zip([c[0] for c in cur.description], r))
            for cur in [sq.execute("SELECT * FROM TARGET_INFO_GPU")] for r in cur.fetchall()]
    cuda_id: dict = {}
    if "TARGET_INFO_CUDA_DEVICE" in tables and {"gpuId", "cudaId"} <= _columns(sq, "TARGET_INFO_CUDA_DEVICE"):
        cuda_id = {g: c for g, c in sq.execute("SELECT DISTINCT gpuId, cudaId FROM TARGET_INFO_CUDA_DEVICE")}
    props = []
    for i, r in enumerate(rows):
        gid = r.get("id", i)
        device = cuda_id.get(gid, r.get("cuDevice", gid))
        p = {"id": device, "name": r.get("name")}
        for src, dst in (("totalMemory", "totalGlobalMem"), ("smCount", "numSms"), ("chipName", "chipName"),
                         ("uuid", "uuid"), ("busLocation", "busLocation"), ("clockRate", "clockRate"),
                         ("memoryBandwidth", "memoryBandwidth"), ("computeMajor", "computeMajor"),
                         ("computeMinor", "computeMinor")):
            if src in gpu_cols and r.get(src) is not None:
                p[dst] = r[src]
        props.append(p)
    return sorted(props, key=lambda p: (p["id"] is None, p["id"] if isinstance(p["id"], int) else 0))


def ingest_nsys_rank(rank: NsysRank, ranks_in_file: list[dict], sha256: str, stage_phase: str | None,
                     label_phase: str | None, out_dir: Path, work_dir: Path) -> RankResult:
    """One process of an export -> out_dir/<table>/rank-<rank>.parquet (the Kineto path's tables)."""
    work_dir.mkdir(parents=True, exist_ok=True)
    sq = open_export(rank.path)
    try:
        con = _connect(work_dir)
        try:
            try:
                warnings = load_events(sq, con, rank.global_pid)
                metadata = export_metadata(sq, rank, ranks_in_file)
            except sqlite3.DatabaseError as exc:
                raise _refuse(rank.path, f"damaged SQLite database ({exc})") from None
            _run_transforms(con, stage_phase, label_phase)
            rows = write_tables(con, out_dir, rank.rank)
            summary = con.execute("SELECT kind, key, value FROM rank_summary").fetchall()
            timed = con.execute("SELECT count(*) FROM events").fetchone()[0]
        finally:
            con.close()
    finally:
        sq.close()
    size = rank.path.stat().st_size
    result = RankResult(path=str(rank.path), rank=rank.rank, size=size, sha256=sha256, json_bytes=size,
                        metadata=metadata, rows=rows, warnings=dict(warnings),
                        empty_reason=None if timed else "nothing to ingest: the process has no timed row")
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


def _ingest_job(args: tuple):
    """Worker entry (ingest.run.RankPool): one rank, or the one-line problem that stopped it."""
    from ingest.run import FileProblem

    rank, ranks_in_file, sha256, stage_phase, label_phase, out_dir, work_dir = args
    try:
        result = ingest_nsys_rank(rank, ranks_in_file, sha256, stage_phase, label_phase, Path(out_dir),
                                  Path(work_dir))
        if result.empty_reason:
            raise _refuse(rank.path, result.empty_reason)
        return result
    except TracehouseError as exc:
        for table_dir in Path(out_dir).iterdir() if Path(out_dir).is_dir() else []:
            (table_dir / f"rank-{rank.rank:05d}.parquet").unlink(missing_ok=True)
        return FileProblem(str(rank.path), f"{exc} ({exc.hint})" if exc.hint else str(exc))
    except MemoryError:
        return FileProblem(str(rank.path), f"{rank.path}: out of memory while reading; raise TRACEHOUSE_MEMORY_LIMIT")
    except Exception as exc:  # a bug must not cost the other ranks of the command
        return FileProblem(str(rank.path), f"{rank.path}: could not be ingested ({type(exc).__name__}: {exc}); "
                                           "this is a tracehouse bug, please report it")


def ingest_exports(files: list[Path], label_phase: str | None, out_dir: Path, work_dir: Path, progress=None,
                   pool=None, hashes: dict[Path, str] | None = None) -> list:
    """Every process of every export, one rank each (ingest.run.ingest_files' counterpart): RankResults
    and FileProblems (a file that cannot be read costs only its own ranks)."""
    from ingest.naming import parse_trace_name
    from ingest.run import FileProblem, RankPool, _borrowed, file_sha256

    ranks, problems = plan_ranks(files)
    results: list = [FileProblem(str(p), message) for p, message in problems]
    if not ranks:
        return results
    per_file: dict[Path, list[dict]] = {}
    for r in ranks:
        per_file.setdefault(r.path, []).append({"rank": r.rank, "pid": r.pid, "process": r.process_name,
                                                "devices": r.devices})
    shas = dict(hashes or {})
    jobs = []
    for r in ranks:
        if r.path not in shas:
            shas[r.path] = file_sha256(r.path)
        jobs.append((r, per_file[r.path], shas[r.path], parse_trace_name(r.path.name).phase, label_phase,
                     str(out_dir), str(work_dir / f"rank-{r.rank}")))
    with (RankPool() if pool is None else _borrowed(pool)) as workers:
        results += workers.map(jobs, fn=_ingest_job,
                               done=(lambda job: progress(f"ingested {job[0].path} (pid {job[0].pid})"))
                               if progress else None)
    return results

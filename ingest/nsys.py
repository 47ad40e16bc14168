"""Ingest of Nsight Systems exports (`nsys export --type sqlite`): the same tables as a Kineto trace.

An export is recognised by its tables, not by its file name or version: the CUPTI / NVTX tables
(CUPTI_ACTIVITY_KIND_*, NVTX_EVENTS) with StringIds, whatever the metadata table is called (META_DATA_EXPORT
in schema 3.x, EXPORT_META_DATA in 2.x, none in some older exports; where there is one it must name NVIDIA
Nsight Systems). Optional tables and columns are read where present (sqlite_master / PRAGMA table_info),
so exports of schema 2.x (Nsight Systems 2021-2022) through 3.25 (2026.2) read alike; see docs/inputs.md. Each process of the export that has GPU activity
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
TARGET_INFO_SESSION_START_TIME's UTC epoch minus its system clock (`systemClockNs`, schema 3.2x: times are
the system clock's), or the UTC epoch itself where that column is absent (older exports count times from
the session's start), so base_time_ns + start_ns is UTC. Text that is not UTF-8 (a Windows user name, a
binary blob in TARGET_INFO_SYSTEM_ENV) is read with replacement characters. Rows are read with the
standard library's sqlite3 (read-only) and handed to DuckDB in Arrow batches of BATCH_ROWS, so memory
stays bounded whatever the export's size.

Refused with one line (nothing of the run is stored): a `.nsys-rep` report (export it first), a SQLite
file that is not an Nsight Systems export, a truncated database, one SQLite itself cannot read
("damaged"), an export without the columns a row needs (named), and an export with no GPU activity and no
CUDA call ("no GPU activity in this export: CUDA tracing was off").
"""

from __future__ import annotations

import os
import re
import sqlite3
from pathlib import Path

import duckdb
from tracehouse.ingest.files import (
    FileProblem,
    file_sha256,
    files_size,
)
from tracehouse.ingest.naming import parse_trace_name
from tracehouse.ingest.nsys_export import (
    TID_BITS,
    NsysRank,
    export_meta_table,
    nvtx_range_types,
    open_export,
    plan_ranks,
    refuse,
    table_columns,
    table_names,
)
from tracehouse.ingest.rank import RankResult, run_transforms, work_connection, write_tables
from tracehouse.ingest.run import RankPool, borrowed
from tracehouse.warehouse import memory

from tracehouse.errors import TracehouseError
from tracehouse.interrupts import check as check_interrupt

BATCH_ROWS = int(os.environ.get("TRACEHOUSE_NSYS_BATCH", "65536"))

EVENTS_DDL = """
CREATE OR REPLACE TABLE events (
    ev_id BIGINT, ph VARCHAR, cat VARCHAR, cat_lc VARCHAR, name VARCHAR, pid VARCHAR, tid VARCHAR,
    start_ns BIGINT, dur_ns BIGINT, dur_clamped BOOLEAN DEFAULT false, dur_absurd BOOLEAN DEFAULT false,
    ts_out_of_range BOOLEAN DEFAULT false, name_cut BOOLEAN DEFAULT false, flow_id VARCHAR, bp VARCHAR, gpu_kind VARCHAR, external_id BIGINT,
    correlation BIGINT, stream BIGINT, device INTEGER, grid VARCHAR, block VARCHAR, registers INTEGER,
    shared_memory BIGINT, occupancy DOUBLE, bytes BIGINT, python_id BIGINT, python_parent_id BIGINT,
    input_dims VARCHAR, input_types VARCHAR, collective_name VARCHAR, in_msg_nelems BIGINT,
    out_msg_nelems BIGINT, group_size INTEGER, dtype VARCHAR, process_group VARCHAR,
    process_group_desc VARCHAR, meta_name VARCHAR, sequence_number BIGINT, fwd_thread_id BIGINT,
    wait_on_stream BIGINT, wait_on_event_corr BIGINT, sync_kind VARCHAR, dur_missing BOOLEAN DEFAULT false,
    graph_id BIGINT, graph_node_id BIGINT, module_fqn VARCHAR
)
"""

GPU_KIND = {"kernel": "kernel", "gpu_memcpy": "memcpy", "gpu_memset": "memset"}
COPY_KIND = {
    0: "Unknown",
    1: "HtoD",
    2: "DtoH",
    3: "HtoA",
    4: "AtoH",
    5: "AtoA",
    6: "AtoD",
    7: "DtoA",
    8: "DtoD",
    9: "HtoH",
    10: "PtoP",
    11: "HtoD",
    12: "DtoH",
    13: "DtoD",
}
MEM_KIND = {
    0: "Pageable",
    1: "Pinned",
    2: "Device",
    3: "Array",
    4: "Managed",
    5: "Device Static",
    6: "Managed Static",
    7: "Unknown",
}
SYNC_KIND = {0: "Unknown", 1: "Event Sync", 2: "Stream Wait Event", 3: "Stream Sync", 4: "Context Sync"}

W_NVTX_OPEN = "NVTX ranges without an end skipped"

_VERSION_SUFFIX = re.compile(r"_v\d+$")
_OP_FIELDS = re.compile(r",\s*(op_id|seq|sizes|input_op_ids)\s*=")
_SEQ = re.compile(r",\s*seq\s*=\s*(-?\d+)")
_SIZES = re.compile(r",\s*sizes\s*=\s*(\[.*?\]\])(?:,|$)")
_TORCH_OP = re.compile(r"^[a-z_][a-z0-9_]*::[A-Za-z_]")


# ---- one rank: export rows -> events -> the Kineto path's transforms -----------------------------
def _case(column: str, mapping: dict[int, str]) -> str:
    """A SQL CASE naming the enum values of `column` (Unknown otherwise)."""
    whens = " ".join(f"WHEN {k} THEN '{v}'" for k, v in mapping.items())
    return f"coalesce(CASE {column} {whens} END, 'Unknown')"


# The DuckDB side of each source: the batch's columns (named as in its SQLite query) -> events' columns.
# Host rows lie on (pid, tid) of the process's thread, GPU rows on (device, stream) as Kineto puts them.
_HOST = (
    "ev_id, CAST((gtid >> 24) & 16777215 AS VARCHAR) AS pid, CAST(gtid & 16777215 AS VARCHAR) AS tid, "
    'start AS start_ns, greatest("end" - start, 0) AS dur_ns, "end" < start AS dur_clamped'
)
_GPU = (
    "{t}ev_id, CAST({t}device AS VARCHAR) AS pid, CAST({t}stream AS VARCHAR) AS tid, {t}start AS start_ns, "
    'greatest({t}"end" - {t}start, 0) AS dur_ns, {t}"end" < {t}start AS dur_clamped, {t}device AS device, '
    "{t}stream AS stream, {t}corr AS correlation"
)
# Names are string ids, resolved against nsys_strings (StringIds, loaded once per rank: its API names
# without their version suffix are worked out once per distinct name, not once per call).
SELECT_RUNTIME = f"""
SELECT 'X' AS ph, CASE WHEN api LIKE 'cu%' AND api NOT LIKE 'cuda%' THEN 'cuda_driver' ELSE 'cuda_runtime' END AS cat,
       api AS name, corr AS correlation, {_HOST}
FROM (SELECT b.*, coalesce(n.api, '') AS api FROM batch b LEFT JOIN nsys_strings n ON n.id = b.name_id)
"""
# PyTorch's emit_nvtx text: `aten::mm, seq = 12, op_id = 34, sizes = [[8, 16], [16, 4]], input_op_ids = [...]`
SELECT_NVTX = rf"""
SELECT 'X' AS ph,
       CASE WHEN regexp_matches(op, '^[a-z_][a-z0-9_]*::[A-Za-z_]') OR op = 'record_param_comms' OR seq IS NOT NULL
            THEN 'cpu_op' ELSE 'user_annotation' END AS cat,
       op AS name, seq AS sequence_number, dims AS input_dims, {_HOST}
FROM (
    SELECT *, coalesce(nullif(regexp_extract(txt, '^(.*?),\s*(?:op_id|seq|sizes|input_op_ids)\s*=', 1), ''), txt) AS op,
           TRY_CAST(nullif(regexp_extract(txt, ',\s*seq\s*=\s*(-?[0-9]+)', 1), '') AS BIGINT) AS seq,
           nullif(regexp_extract(txt, ',\s*sizes\s*=\s*(\[.*?\]\])(?:,|$)', 1), '') AS dims
    FROM (SELECT *, coalesce(text, '') AS txt FROM batch)
)
"""
SELECT_KERNEL = f"""
SELECT 'X' AS ph, 'kernel' AS cat, 'kernel' AS gpu_kind, coalesce(d.value, sn.value, '') AS name, grid, block,
       registers, shared_memory, nullif(graph_id, 0) AS graph_id, nullif(graph_node_id, 0) AS graph_node_id,
       {_GPU.format(t="b.")}
FROM batch b LEFT JOIN nsys_strings d ON d.id = b.demangled LEFT JOIN nsys_strings sn ON sn.id = b.short
"""
SELECT_MEMCPY = f"""
SELECT 'X' AS ph, 'gpu_memcpy' AS cat, 'memcpy' AS gpu_kind,
       'Memcpy ' || {_case("copy_kind", COPY_KIND)} || ' (' || {_case("src", MEM_KIND)} || ' -> '
           || {_case("dst", MEM_KIND)} || ')' AS name, nbytes AS bytes, {_GPU.format(t="")}
FROM batch
"""
SELECT_MEMSET = f"""
SELECT 'X' AS ph, 'gpu_memset' AS cat, 'memset' AS gpu_kind, 'Memset (' || {_case("mem", MEM_KIND)} || ')' AS name,
       nbytes AS bytes, {_GPU.format(t="")}
FROM batch
"""
# A wait or an event sync names the recorded stream and the cudaEventRecord's correlation: the CUDA event
# record with the sync's eventSyncId, else the last record of the same event issued before the sync.
SELECT_SYNC = f"""
SELECT 'X' AS ph, 'cuda_sync' AS cat, {_case("s.kind", SYNC_KIND)} AS name, {_case("s.kind", SYNC_KIND)} AS sync_kind,
       CASE WHEN s.kind IN (1, 2) THEN coalesce(r1.stream, r2.stream) END AS wait_on_stream,
       CASE WHEN s.kind IN (1, 2) THEN coalesce(r1.corr, r2.corr) END AS wait_on_event_corr,
       {_GPU.format(t="s.")}
FROM batch s
LEFT JOIN nsys_event_by_sync r1 ON r1.sync_id = s.sync_id
ASOF LEFT JOIN nsys_event_records r2 ON r2.event_id = s.event_id AND s.corr > r2.corr
"""


# Signs that the process ran PyTorch (ingest.run.detect_framework: an export without them is framework
# "cuda"): PyTorch's operator ranges (emit_nvtx / --pytorch=autograd-nvtx: `aten::` names, `seq = N`
# fields, record_param_comms) or kernels of ATen's own CUDA code (`at::native::`).
TORCH_EVIDENCE = """
SELECT count(*) FROM events
WHERE (cat = 'cpu_op' AND (name LIKE 'aten::%' OR name = 'record_param_comms' OR sequence_number IS NOT NULL))
   OR (cat = 'kernel' AND name LIKE '%at::native::%')
"""


class _Events:
    """Appends batches to DuckDB's `events`, numbering the rows (ev_id) in the order they come."""

    def __init__(self, con: duckdb.DuckDBPyConnection) -> None:
        self.con = con
        self.next_id = 0
        con.execute(EVENTS_DDL)

    def copy(
        self, sq: sqlite3.Connection, query: str, params: tuple, select: str, target: str = "events"
    ) -> None:
        """Rows of `query` (SQLite) into `target` through `select` (DuckDB over the batch), BATCH_ROWS at a time:
        Python only moves columns; every conversion is SQL."""
        import pyarrow as pa  # only here: an nsys export's batches (a PyTorch trace's ingest never imports it)

        cur = sq.execute(query, params)
        names = [d[0] for d in cur.description]
        while rows := cur.fetchmany(BATCH_ROWS):
            n = len(rows)
            arrays = {name: pa.array(col) for name, col in zip(names, zip(*rows))}
            arrays["ev_id"] = pa.array(range(self.next_id, self.next_id + n), pa.int64())
            batch = pa.table(arrays)  # noqa: F841 - read by DuckDB below
            if target == "events":
                self.next_id += n
                self.con.execute(f"INSERT INTO events BY NAME SELECT *, lower(cat) AS cat_lc FROM ({select})")
            else:
                self.con.execute(f"INSERT INTO {target} BY NAME {select}")


def load_events(sq: sqlite3.Connection, con: duckdb.DuckDBPyConnection, global_pid: int) -> dict[str, int]:
    """Fill `events` with one process's rows; returns the counts of what was repaired or skipped."""
    tables = table_names(sq)
    out = _Events(con)
    con.execute("CREATE OR REPLACE TEMP TABLE nsys_strings (id BIGINT, value VARCHAR, api VARCHAR)")
    out.copy(
        sq,
        "SELECT id, value FROM StringIds",
        (),
        "SELECT id, value, regexp_replace(value, '_v[0-9]+$', '') AS api FROM batch",
        target="nsys_strings",
    )
    warnings: dict[str, int] = {}
    threads = (global_pid, global_pid + (1 << TID_BITS))  # the process's globalTid range
    if "CUPTI_ACTIVITY_KIND_RUNTIME" in tables:
        out.copy(
            sq,
            'SELECT r.start, r."end", r.globalTid AS gtid, r.correlationId AS corr, r.nameId AS name_id '
            "FROM CUPTI_ACTIVITY_KIND_RUNTIME r WHERE r.globalTid >= ? AND r.globalTid < ?",
            threads,
            SELECT_RUNTIME,
        )
    if "NVTX_EVENTS" in tables:
        nvtx_cols = table_columns(sq, "NVTX_EVENTS")
        has_text_id = "textId" in nvtx_cols
        inline = "n.text" if "text" in nvtx_cols else "NULL"
        text = f"coalesce({inline}, s.value)" if has_text_id else inline
        join = "LEFT JOIN StringIds s ON s.id = n.textId" if has_text_id else ""
        ranges = nvtx_range_types(sq, tables)
        open_ranges = sq.execute(
            f"SELECT count(*) FROM NVTX_EVENTS WHERE eventType IN ({', '.join(map(str, ranges))}) "
            'AND "end" IS NULL AND globalTid >= ? AND globalTid < ?',
            threads,
        ).fetchone()[0]
        if open_ranges:
            warnings[W_NVTX_OPEN] = open_ranges
        out.copy(
            sq,
            f'SELECT n.start, n."end", n.globalTid AS gtid, {text} AS text FROM NVTX_EVENTS n {join} '
            f'WHERE n.eventType IN ({", ".join(map(str, ranges))}) AND n."end" IS NOT NULL '
            "AND n.globalTid >= ? AND n.globalTid < ?",
            threads,
            SELECT_NVTX,
        )
    base = 'a.start, a."end", a.deviceId AS device, a.streamId AS stream, a.correlationId AS corr'
    if "CUPTI_ACTIVITY_KIND_KERNEL" in tables:
        cols = table_columns(sq, "CUPTI_ACTIVITY_KIND_KERNEL")

        def col(name: str) -> str:
            return f"a.{name}" if name in cols else "NULL"

        # the demangled name where the export has it, else the short (schema 2.x/3.x have both) or mangled one
        demangled = next(c for c in ("demangledName", "shortName", "mangledName") if c in cols)
        out.copy(
            sq,
            f"SELECT {base}, a.{demangled} AS demangled, {col('shortName')} AS short, "
            f"'[' || {col('gridX')} || ',' || {col('gridY')} || ',' || {col('gridZ')} || ']' AS grid, "
            f"'[' || {col('blockX')} || ',' || {col('blockY')} || ',' || {col('blockZ')} || ']' AS block, "
            f"{col('registersPerThread')} AS registers, "
            f"coalesce({col('staticSharedMemory')}, 0) + coalesce({col('dynamicSharedMemory')}, 0) AS shared_memory, "
            f"{col('graphId')} AS graph_id, {col('graphNodeId')} AS graph_node_id "
            "FROM CUPTI_ACTIVITY_KIND_KERNEL a WHERE a.globalPid = ?",
            (global_pid,),
            SELECT_KERNEL,
        )
    if "CUPTI_ACTIVITY_KIND_MEMCPY" in tables:
        out.copy(
            sq,
            f"SELECT {base}, a.bytes AS nbytes, {_col(sq, 'CUPTI_ACTIVITY_KIND_MEMCPY', 'copyKind')} AS copy_kind, "
            f"{_col(sq, 'CUPTI_ACTIVITY_KIND_MEMCPY', 'srcKind')} AS src, "
            f"{_col(sq, 'CUPTI_ACTIVITY_KIND_MEMCPY', 'dstKind')} AS dst "
            "FROM CUPTI_ACTIVITY_KIND_MEMCPY a WHERE a.globalPid = ?",
            (global_pid,),
            SELECT_MEMCPY,
        )
    if "CUPTI_ACTIVITY_KIND_MEMSET" in tables:
        out.copy(
            sq,
            f"SELECT {base}, a.bytes AS nbytes, {_col(sq, 'CUPTI_ACTIVITY_KIND_MEMSET', 'memKind')} AS mem "
            "FROM CUPTI_ACTIVITY_KIND_MEMSET a "
            "WHERE a.globalPid = ?",
            (global_pid,),
            SELECT_MEMSET,
        )
    if "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION" in tables:
        _load_syncs(sq, out, tables, global_pid)
    con.execute("DROP TABLE nsys_strings")
    return warnings  # negative durations are counted by ingest/sql/80_summary.sql (events.dur_clamped)


def _col(sq: sqlite3.Connection, table: str, column: str) -> str:
    """`a.column` where the table has it, else NULL (an optional column of an older schema)."""
    return f"a.{column}" if column in table_columns(sq, table) else "NULL"


def _load_syncs(sq: sqlite3.Connection, out: _Events, tables: set[str], global_pid: int) -> None:
    """cuda_sync records; the CUDA event records (nsys --cuda-event-trace=true) name what a wait waited on."""
    con = out.con
    con.execute(
        "CREATE OR REPLACE TEMP TABLE nsys_event_records (event_id BIGINT, sync_id BIGINT, stream BIGINT, "
        "corr BIGINT)"
    )
    event_cols = (
        table_columns(sq, "CUPTI_ACTIVITY_KIND_CUDA_EVENT")
        if "CUPTI_ACTIVITY_KIND_CUDA_EVENT" in tables
        else set()
    )
    if {"eventId", "streamId", "correlationId", "globalPid"} <= event_cols:
        has_sync = "eventSyncId" in event_cols
        out.copy(
            sq,
            f"SELECT eventId AS event_id, {'eventSyncId' if has_sync else 'NULL'} AS sync_id, "
            "streamId AS stream, correlationId AS corr FROM CUPTI_ACTIVITY_KIND_CUDA_EVENT WHERE globalPid = ?",
            (global_pid,),
            "SELECT event_id, sync_id, stream, corr FROM batch",
            target="nsys_event_records",
        )
    con.execute(
        "CREATE OR REPLACE TEMP TABLE nsys_event_by_sync AS SELECT sync_id, arg_max(stream, corr) AS stream, "
        "max(corr) AS corr FROM nsys_event_records WHERE sync_id IS NOT NULL GROUP BY sync_id"
    )
    sync_cols = table_columns(sq, "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION")
    sync_id = "s.eventSyncId" if "eventSyncId" in sync_cols else "NULL"
    event_id = "s.eventId" if "eventId" in sync_cols else "NULL"
    out.copy(
        sq,
        'SELECT s.start, s."end", s.deviceId AS device, s.streamId AS stream, s.correlationId AS corr, '
        f"s.syncType AS kind, {event_id} AS event_id, {sync_id} AS sync_id "
        "FROM CUPTI_ACTIVITY_KIND_SYNCHRONIZATION s WHERE s.globalPid = ?",
        (global_pid,),
        SELECT_SYNC,
    )
    con.execute("DROP TABLE nsys_event_records")
    con.execute("DROP TABLE nsys_event_by_sync")


def export_metadata(sq: sqlite3.Connection, rank: NsysRank, ranks_in_file: list[dict]) -> dict:
    """The rank's metadata (runs.metadata / device_properties): product, schema, host, devices."""
    tables = table_names(sq)
    meta = export_meta_table(sq, tables)
    env = {}
    if "TARGET_INFO_SYSTEM_ENV" in tables:
        cols = table_columns(sq, "TARGET_INFO_SYSTEM_ENV")
        if {"name", "value"} <= cols:
            env = {
                n: v
                for n, v in sq.execute("SELECT name, value FROM TARGET_INFO_SYSTEM_ENV")
                if n
                in ("Hostname", "NvDriverVersion", "CudaDriverVersion", "OsDescription", "CpuArchitecture")
            }
    out = {
        "source_format": "nsys",
        "nsys_version": meta.get("EXPORT_PRODUCT_VERSION"),
        "export_schema": meta.get("EXPORT_SCHEMA_VERSION"),
        "export_input": meta.get("EXPORT_PARAM_INPUT_FILE") or meta.get("EXPORT_INPUT_FILE"),
        "system": env,
        "ranks": ranks_in_file,
    }
    base = session_base_ns(sq, tables)
    if base is not None:
        out["baseTimeNanoseconds"] = base
    props = device_properties(sq, tables)
    if props:
        out["deviceProperties"] = props
    return out


def session_base_ns(sq: sqlite3.Connection, tables: set[str]) -> int | None:
    """UTC ns of the export's time 0: utcEpochNs - systemClockNs where the export has the system clock
    (its times are the system clock's), else utcEpochNs (older schemas count times from the session start)."""
    if "TARGET_INFO_SESSION_START_TIME" not in tables:
        return None
    cols = table_columns(sq, "TARGET_INFO_SESSION_START_TIME")
    if "utcEpochNs" not in cols:
        return None
    clock = "systemClockNs" if "systemClockNs" in cols else "0"
    row = sq.execute(f"SELECT utcEpochNs, {clock} FROM TARGET_INFO_SESSION_START_TIME").fetchone()
    if not row or row[0] is None or row[1] is None:
        return None
    return int(row[0]) - int(row[1])


def device_properties(sq: sqlite3.Connection, tables: set[str]) -> list[dict]:
    """One entry per CUDA device, shaped like Kineto's deviceProperties (id = the CUDA device index):
    TARGET_INFO_GPU (name, memory, SMs) joined to TARGET_INFO_CUDA_DEVICE (cudaId) where both exist, else
    TARGET_INFO_GPU.cuDevice. Adapters with no SM (smCount 0: a Windows machine's integrated or software
    display adapter, listed beside the CUDA GPU with the default cuDevice 0) are not CUDA devices."""
    if "TARGET_INFO_GPU" not in tables:
        return []
    gpu_cols = table_columns(sq, "TARGET_INFO_GPU")
    rows = [
        dict(zip([c[0] for c in cur.description], r))
        for cur in [sq.execute("SELECT * FROM TARGET_INFO_GPU")]
        for r in cur.fetchall()
    ]
    cuda_id: dict = {}
    if "TARGET_INFO_CUDA_DEVICE" in tables and {"gpuId", "cudaId"} <= table_columns(
        sq, "TARGET_INFO_CUDA_DEVICE"
    ):
        cuda_id = {g: c for g, c in sq.execute("SELECT DISTINCT gpuId, cudaId FROM TARGET_INFO_CUDA_DEVICE")}
    props = []
    for i, r in enumerate(rows):
        if "smCount" in gpu_cols and r.get("smCount") == 0:
            continue
        gid = r.get("id", i)
        device = cuda_id.get(gid, r.get("cuDevice", gid))
        p = {"id": device, "name": r.get("name")}
        for src, dst in (
            ("totalMemory", "totalGlobalMem"),
            ("smCount", "numSms"),
            ("chipName", "chipName"),
            ("uuid", "uuid"),
            ("busLocation", "busLocation"),
            ("clockRate", "clockRate"),
            ("memoryBandwidth", "memoryBandwidth"),
            ("computeMajor", "computeMajor"),
            ("computeMinor", "computeMinor"),
        ):
            if src in gpu_cols and r.get(src) is not None:
                p[dst] = r[src]
        props.append(p)
    return sorted(props, key=lambda p: (p["id"] is None, p["id"] if isinstance(p["id"], int) else 0))


def ingest_nsys_rank(
    rank: NsysRank,
    ranks_in_file: list[dict],
    sha256: str,
    stage_phase: str | None,
    label_phase: str | None,
    out_dir: Path,
    work_dir: Path,
) -> RankResult:
    """One process of an export -> out_dir/<table>/rank-<rank>.parquet (the Kineto path's tables)."""
    work_dir.mkdir(parents=True, exist_ok=True)
    sq = open_export(rank.path)
    try:
        con = work_connection(work_dir)
        try:
            try:
                warnings = load_events(sq, con, rank.global_pid)
                metadata = export_metadata(sq, rank, ranks_in_file)
                torch_evidence = con.execute(TORCH_EVIDENCE).fetchone()[0]
            except sqlite3.DatabaseError as exc:
                raise refuse(rank.path, f"damaged SQLite database ({exc})") from None
            run_transforms(con, stage_phase, label_phase)
            rows = write_tables(con, out_dir, rank.rank)
            summary = con.execute("SELECT kind, key, value FROM rank_summary").fetchall()
            timed = con.execute("SELECT count(*) FROM events").fetchone()[0]
        finally:
            con.close()
    finally:
        sq.close()
    size = rank.path.stat().st_size
    result = RankResult(
        path=str(rank.path),
        rank=rank.rank,
        size=size,
        sha256=sha256,
        json_bytes=size,
        metadata=metadata,
        rows=rows,
        warnings=dict(warnings),
        empty_reason=None if timed else "nothing to ingest: the process has no timed row",
    )
    result.hints["torch_evidence"] = int(torch_evidence)
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

    rank, ranks_in_file, sha256, stage_phase, label_phase, out_dir, work_dir = args
    try:
        result = ingest_nsys_rank(
            rank, ranks_in_file, sha256, stage_phase, label_phase, Path(out_dir), Path(work_dir)
        )
        if result.empty_reason:
            raise refuse(rank.path, result.empty_reason)
        return result
    except TracehouseError as exc:
        for table_dir in Path(out_dir).iterdir() if Path(out_dir).is_dir() else []:
            (table_dir / f"rank-{rank.rank:05d}.parquet").unlink(missing_ok=True)
        return FileProblem(str(rank.path), f"{exc} ({exc.hint})" if exc.hint else str(exc))
    except Exception as exc:  # noqa: BLE001 - a bug must not cost the other ranks of the command
        check_interrupt()  # DuckDB's "Query interrupted": the ingest stops, this rank is no bad rank
        if memory.is_out_of_memory(exc):  # one line: the setting to raise (warehouse.memory)
            return FileProblem(str(rank.path), memory.out_of_memory_line(str(rank.path)))
        return FileProblem(
            str(rank.path),
            f"{rank.path}: could not be ingested ({type(exc).__name__}: {exc}); "
            "this is a tracehouse bug, please report it",
        )


def ingest_exports(
    files: list[Path],
    label_phase: str | None,
    out_dir: Path,
    work_dir: Path,
    progress=None,
    pool=None,
    hashes: dict[Path, str] | None = None,
) -> list:
    """Every process of every export, one rank each (ingest.run.ingest_files' counterpart): RankResults
    and FileProblems (a file that cannot be read costs only its own ranks)."""

    ranks, problems = plan_ranks(files)
    results: list = [FileProblem(str(p), message) for p, message in problems]
    if not ranks:
        return results
    per_file: dict[Path, list[dict]] = {}
    for r in ranks:
        per_file.setdefault(r.path, []).append(
            {"rank": r.rank, "pid": r.pid, "process": r.process_name, "devices": r.devices}
        )
    shas = dict(hashes or {})
    jobs = []
    for r in ranks:
        if r.path not in shas:
            shas[r.path] = file_sha256(r.path)
        jobs.append(
            (
                r,
                per_file[r.path],
                shas[r.path],
                parse_trace_name(r.path.name).phase,
                label_phase,
                str(out_dir),
                str(work_dir / f"rank-{r.rank}"),
            )
        )
    with RankPool() if pool is None else borrowed(pool) as workers:
        results += workers.map(
            jobs,
            fn=_ingest_job,
            done=(lambda job: progress(f"ingested {job[0].path} (pid {job[0].pid})")) if progress else None,
            input_bytes=files_size(list(per_file)),
        )
    return results

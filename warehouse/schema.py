"""The declared schema of every stored table: its columns, their types (each a DuckDB type and an Arrow
type) and their order, and a line on what each column holds.

This is the one place that says what a table is. Ingest writes to it (the DuckDB-built tables are cast
to it column by column at the write, ingest.rank.write_tables; the rows ingest builds in Python, `runs`,
`kernel_sites` and `step_requests`, are written by write_rows), a new warehouse gets its zero-row files from it (`write_schema_files`, the `run_id=_schema`
partition that gives each table its columns before any run lands), tests check that what ingest writes
equals it (tests/test_schema.py), and `tracehouse schema TABLE` prints its column lines (warehouse.docs).

The hive partition column `run_id` is not in the files of the per-rank tables (it is the folder name);
`runs` carries it in the file. Nullability is not declared: every column may be NULL (DuckDB marks a
column REQUIRED in a file that happens to hold no NULL, which says nothing about the next file).

The types are those ingest wrote when this module was introduced (schema_version 1), kept exactly,
including two oddities: `cpu_ops.depth` and `streams.activities` / `streams.busy_ns` are DOUBLE (a count
and a sum of ns, exact as integers up to 2^53 ns, about 104 days).
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import TYPE_CHECKING

from tracehouse.warehouse.store import SCHEMA_PARTITION  # noqa: F401 - re-exported: the folder of each table's zero-row file

# runs.schema_version of what ingest writes: bump it with any change to a column's name, type or order
# (tests/test_schema.py holds the digest of each version's columns and fails until it is bumped)
SCHEMA_VERSION = 4  # 2: table step_requests; 3: kernels' graph node columns; 4: kernel_sites.capture_waits

if TYPE_CHECKING:
    import pyarrow as pa

# A declared type, without pyarrow (ingest writes through DuckDB and never imports pyarrow, which imports
# numpy: 0.15-0.2 s of a small trace's ingest process): a DuckDB type name for a plain type, a tuple for a
# nested one. duckdb_type and arrow_type render it; the Arrow types are those ingest wrote when this module
# was introduced.
Declared = str | tuple
STR, I32, I64, F64, BOOL = "VARCHAR", "INTEGER", "BIGINT", "DOUBLE", "BOOLEAN"
UTC_TIME = "TIMESTAMP WITH TIME ZONE"  # Arrow timestamp[us, tz=UTC]


def list_of(item: Declared) -> tuple:
    return ("list", item)


def map_of(key: Declared, value: Declared) -> tuple:
    return ("map", key, value)


def struct_of(*fields: tuple[str, Declared]) -> tuple:
    return ("struct", fields)


# table -> [(column, declared type, what it holds)], in file order
COLUMNS: dict[str, list[tuple[str, Declared, str]]] = {
    "runs": [
        ("run_id", STR, "content-derived id of the run: the hash of its files' sha256 (16 hex digits)"),
        ("ingested_at", UTC_TIME, "when this run was ingested"),
        (
            "files",
            list_of(
                struct_of(
                    ("name", STR),
                    ("path", STR),
                    ("size", I64),
                    ("sha256", STR),
                    ("rank", I32),
                    ("json_bytes", I64),
                )
            ),
            "the run's trace files: name, path as given, size in bytes, sha256, rank, inflated JSON bytes",
        ),
        ("labels", map_of(STR, STR), "labels given with --label (and set later with `tracehouse label`)"),
        ("framework", STR, "sglang | vllm | tensorrt-llm | pytorch | cuda (detected, or --label framework=)"),
        ("model", STR, "the model, where the trace or a label names it"),
        ("hardware", STR, "the GPU name from the trace's deviceProperties (or --label hardware=)"),
        ("world_size", I32, "the trace's distributed world size (NULL where it does not say)"),
        ("n_ranks", I32, "rank files ingested for this run"),
        ("tp", I32, "tensor-parallel size, from the file names or the trace"),
        ("pp", I32, "pipeline-parallel size"),
        ("dp", I32, "data-parallel size"),
        ("ep", I32, "expert-parallel size"),
        (
            "phase",
            STR,
            (
                "--label phase=, else the stage the file names say (one for all: it, several: mixed); NULL: "
                "neither (the steps' own phases are step_spans.phase)"
            ),
        ),
        ("capture_mode", STR, "graph | eager | mixed | none: how the GPU work was launched"),
        ("commit", STR, "the commit label (--label commit=), for trends"),
        ("commit_time", STR, "the commit's time label, for ordering a trend"),
        ("series", STR, "the series label: the runs a trend compares"),
        ("base_time_ns", I64, "the trace's baseTimeNanoseconds (the epoch of its `ts`), where given"),
        ("trace_start_ns", I64, "first event start over the run's ranks (the trace's time base, ns)"),
        ("trace_end_ns", I64, "last event end over the run's ranks"),
        ("n_kernels", I64, "GPU activities (kernels, memcpy, memset) over the run's ranks"),
        ("event_counts", map_of(STR, I64), "events read, per kind"),
        ("warnings", map_of(STR, I64), "what was skipped or repaired, with counts"),
        ("metadata", STR, "the trace's top-level metadata, JSON"),
        ("device_properties", STR, "the trace's deviceProperties, JSON"),
        ("schema_version", I32, "the version of this schema the run was written with"),
        ("rules_version", STR, "the version of the kernel-category rules at ingest"),
        ("attributed_activities", I64, "GPU activities with a Python launch site (trace or capture)"),
        ("attributed_gpu_ns", I64, "GPU ns of those activities"),
    ],
    "kernels": [
        ("rank", I32, "the trace file's rank"),
        ("kernel_id", I64, "the activity's event id within its rank"),
        ("device", I32, "GPU device index"),
        ("stream", I64, "CUDA/HIP stream id"),
        ("kind", STR, "kernel | memcpy | memset"),
        ("name", STR, "kernel (or memcpy/memset) name as the trace writes it"),
        ("start_ns", I64, "start, in the trace's time base (ns)"),
        ("dur_ns", I64, "duration (ns)"),
        ("end_ns", I64, "start_ns + dur_ns"),
        ("correlation", I64, "the launch's correlation id (links it to its runtime/driver call)"),
        ("external_id", I64, "the trace's External id (links it to the cpu_op that launched it)"),
        ("linked", BOOL, "its launching runtime/driver call is in the trace"),
        (
            "launch_call",
            STR,
            "name of the launching runtime/driver call (cudaLaunchKernel, cudaGraphLaunch, ...)",
        ),
        ("launch_op_id", I64, "cpu_ops.op_id of the launch call"),
        ("launch_start_ns", I64, "start of the launch call"),
        ("launch_dur_ns", I64, "duration of the launch call"),
        ("launch_tid", STR, "thread of the launch call"),
        ("cpu_op_id", I64, "cpu_ops.op_id of the innermost cpu_op around the launch"),
        ("python_frame_id", I64, "python_frames.frame_id of the innermost Python frame around the launch"),
        (
            "step",
            I64,
            (
                "the step whose host window holds its launch call (unlinked: the step whose linked GPU "
                "work spans it); NULL: outside every step"
            ),
        ),
        ("phase", STR, "its step's phase: prefill | decode | mixed | unknown (NULL where step is NULL)"),
        ("grid", STR, "launch grid, as the trace writes it"),
        ("block", STR, "launch block"),
        ("registers", I32, "registers per thread"),
        ("shared_memory", I64, "shared memory per block (bytes)"),
        ("occupancy", F64, "the trace's `est. achieved occupancy %`"),
        ("bytes", I64, "bytes moved (memcpy / memset)"),
        ("collective_name", STR, "the collective (allreduce, allgather, ...) of a communication kernel"),
        ("process_group", STR, "the collective's process group"),
        ("in_msg_nelems", I64, "collective input elements"),
        ("out_msg_nelems", I64, "collective output elements"),
        ("group_size", I32, "ranks in the collective's group"),
        ("dtype", STR, "the collective's element type"),
        ("pid", STR, "the trace's process id of the activity (a device lane)"),
        ("tid", STR, "the trace's thread id of the activity (a stream lane)"),
        (
            "graph_id",
            I64,
            "the CUDA graph a replayed activity belongs to (the trace's `graph id`; NULL: none)",
        ),
        (
            "graph_node_id",
            I64,
            "its node in that graph (`graph node id`): the same node in every replay (NULL: not from a graph)",
        ),
        ("graph_annotation", STR, "the `name` a mark_kernels annotation gave its graph node (NULL: none)"),
        ("module_fqn", STR, "the module FQN a mark_kernels annotation gave its graph node (NULL: none)"),
    ],
    "cpu_ops": [
        ("rank", I32, "the trace file's rank"),
        ("op_id", I64, "the event's id within its rank"),
        ("pid", STR, "process id"),
        ("tid", STR, "thread id"),
        ("cat", STR, "the event category: cpu_op, user_annotation, cuda_runtime, cuda_driver, ..."),
        ("name", STR, "the event name"),
        ("start_ns", I64, "start, in the trace's time base (ns)"),
        ("dur_ns", I64, "duration (ns)"),
        ("parent_op_id", I64, "op_id of the range that encloses it on its thread (NULL: top level)"),
        ("depth", F64, "nesting depth on its thread (0: top level)"),
        ("external_id", I64, "the trace's External id (links a cpu_op to the GPU work it launched)"),
        ("correlation", I64, "correlation id of a runtime/driver call"),
        ("stream", I64, "the stream a runtime call names, where it does"),
        ("input_dims", STR, "input shapes, JSON as the trace writes them"),
        ("input_types", STR, "input types, JSON"),
        ("sequence_number", I64, "autograd sequence number (forward-backward pairing)"),
        ("fwd_thread_id", I64, "the forward thread of a backward op"),
        ("wait_on_stream", I64, "the stream a synchronization waits on"),
        ("wait_on_event_corr", I64, "correlation of the event a synchronization waits on"),
        ("sync_kind", STR, "the trace's `cuda_sync_kind` of a synchronization event"),
        ("collective_name", STR, "the collective a record_param_comms op names"),
        ("in_msg_nelems", I64, "collective input elements"),
        ("out_msg_nelems", I64, "collective output elements"),
        ("group_size", I32, "ranks in the collective's group"),
        ("dtype", STR, "the collective's element type"),
        ("process_group", STR, "the collective's process group"),
    ],
    "python_frames": [
        ("rank", I32, "the trace file's rank"),
        ("frame_id", I64, "the event's id within its rank"),
        ("parent_frame_id", I64, "frame_id of the calling frame (NULL: outermost)"),
        ("python_id", I64, "the trace's Python id of the frame"),
        ("pid", STR, "process id"),
        ("tid", STR, "thread id"),
        ("name", STR, "the event name (file(line): function)"),
        ("file", STR, "source file"),
        ("line", I32, "source line"),
        ("function", STR, "function name"),
        ("start_ns", I64, "start, in the trace's time base (ns)"),
        ("dur_ns", I64, "duration (ns)"),
    ],
    "flows": [
        ("rank", I32, "the trace file's rank"),
        ("flow_id", STR, "the flow's id"),
        ("kind", STR, "ac2g (launch -> GPU activity), fwdbwd, ..."),
        ("src_event_id", I64, "id of the source event (cpu_ops.op_id)"),
        ("dst_event_id", I64, "id of the destination event (kernels.kernel_id or cpu_ops.op_id)"),
        ("src_ns", I64, "time of the flow's start"),
        ("dst_ns", I64, "time of the flow's end"),
    ],
    "streams": [
        ("rank", I32, "the trace file's rank"),
        ("device", I32, "GPU device index"),
        ("stream", I64, "stream id"),
        ("name", STR, "the stream's name in the trace, else 'stream N'"),
        ("activities", F64, "GPU activities on the stream"),
        ("busy_ns", F64, "union of its activities' intervals (ns)"),
        ("first_start_ns", I64, "first activity start"),
        ("last_end_ns", I64, "last activity end"),
    ],
    "step_spans": [
        ("rank", I32, "the trace file's rank"),
        ("step", I64, "the step number (0 with source 'whole': no step marker, the whole trace)"),
        ("name", STR, "the marker's name (ProfilerStep#N, or the framework's own)"),
        (
            "source",
            STR,
            "the marker kind: profiler_step | sglang_step | vllm_execute_model | vllm_execute | atom_step | trtllm_iteration | host_burst | whole",
        ),
        ("start_ns", I64, "host window start"),
        ("end_ns", I64, "host window end"),
        ("phase", STR, "prefill | decode | mixed | unknown"),
    ],
    "kernel_sites": [
        ("rank", I32, "the trace file's rank"),
        ("kernel_id", I64, "kernels.kernel_id of the replayed activity"),
        ("file", STR, "Python launch site: source file (from the capture trace)"),
        ("line", I32, "source line"),
        ("function", STR, "function"),
        ("cpu_op_name", STR, "the cpu_op around the launch in the capture"),
        ("cpu_op_input_dims", STR, "its input shapes"),
        ("source", STR, "where the site came from: capture (a capture trace)"),
        ("capture_file", STR, "the capture trace it came from"),
        ("capture_window", I32, "the capture window (graph) within that file"),
        ("capture_seq", I32, "the launch's position within the capture window"),
        ("capture_kernel_name", STR, "the kernel name in the capture"),
        ("match", STR, "how replay and capture were aligned (node, name, order, stream, greedy)"),
        ("graph_correlation", I64, "correlation of the graph launch that replayed it"),
        ("stack", list_of(STR), "the Python stack of the launch, innermost first"),
        (
            "capture_waits",
            list_of(I32),
            "capture_seq of the launches it waits for (capture trace's event waits)",
        ),
    ],
    "step_requests": [  # the run's requests file given at ingest (ingest/requests.py); zero rows without one
        ("rank", I32, "the rank the row is about (NULL: every rank that has the step)"),
        ("step", I64, "the step number, as step_spans.step"),
        ("request_id", STR, "the request's id, as the serving engine names it"),
        ("tokens", I64, "its query (new) tokens in the step (NULL: not stated)"),
        ("kv_tokens", I64, "the KV tokens its attention read in the step (NULL: not stated)"),
        ("phase", STR, "prefill | decode as stated (NULL: inferred by _step_request)"),
        ("line", I64, "the row's line (CSV, JSON Lines) or item (JSON list) in the file"),
    ],
}

STORED_TABLES = tuple(COLUMNS)  # runs first, then the per-rank tables: warehouse.store.ALL_TABLES


def schema(table: str) -> pa.Schema:
    """The Arrow schema of a stored table (the column lines are column_docs: not written into the files)."""
    import pyarrow as pa

    return pa.schema([(name, arrow_type(kind)) for name, kind, _ in COLUMNS[table]])


def column_docs(table: str) -> dict[str, str]:
    return {name: doc for name, _, doc in COLUMNS[table]}


def duckdb_type(kind: Declared) -> str:
    """The DuckDB type that reads and writes as this declared type (and as its arrow_type)."""
    if isinstance(kind, str):
        return kind
    if kind[0] == "list":
        return f"{duckdb_type(kind[1])}[]"
    if kind[0] == "map":
        return f"MAP({duckdb_type(kind[1])}, {duckdb_type(kind[2])})"
    return "STRUCT(" + ", ".join(f'"{name}" {duckdb_type(t)}' for name, t in kind[1]) + ")"


def arrow_type(kind: Declared) -> pa.DataType:
    """The Arrow type of a declared type (what pyarrow reads from the files ingest writes)."""
    import pyarrow as pa

    plain = {
        STR: pa.string(),
        I32: pa.int32(),
        I64: pa.int64(),
        F64: pa.float64(),
        BOOL: pa.bool_(),
        UTC_TIME: pa.timestamp("us", tz="UTC"),
    }
    if isinstance(kind, str):
        return plain[kind]
    if kind[0] == "list":
        return pa.list_(arrow_type(kind[1]))
    if kind[0] == "map":
        return pa.map_(arrow_type(kind[1]), arrow_type(kind[2]))
    return pa.struct([(name, arrow_type(t)) for name, t in kind[1]])


def cast_select(table: str, source: str, with_rank: bool = False) -> str:
    """SELECT of the staging table `source` as the declared columns, in order, each cast to its type: what
    ingest writes for a DuckDB-built table (a column whose type follows the trace's data, a JSON field
    read as DOUBLE in one file and BIGINT in the next, lands as declared). `rank` comes from the caller,
    unless with_rank (then `source` has it too)."""
    return ", ".join(
        f'CAST({source}."{name}" AS {duckdb_type(kind)}) AS "{name}"'
        for name, kind, _ in COLUMNS[table]
        if with_rank or name != "rank"
    )


def mismatches(table: str, found: pa.Schema) -> list[str]:
    """How a written file's schema differs from the declared one (names, types, order; not nullability,
    nor the names Parquet gives list and map entries): one line each, empty when it conforms."""
    declared = [(name, _canonical(arrow_type(kind))) for name, kind, _ in COLUMNS[table]]
    got = [(f.name, _canonical(f.type)) for f in found]
    if [n for n, _ in got] != [n for n, _ in declared]:
        missing = [n for n, _ in declared if n not in dict(got)]
        extra = [n for n, _ in got if n not in dict(declared)]
        return [
            f"{table}: columns {[n for n, _ in got]} differ from the declared {[n for n, _ in declared]}"
            + (f" (missing {missing})" if missing else "")
            + (f" (not declared {extra})" if extra else "")
        ]
    return [f"{table}.{n}: {g} where {d} is declared" for (n, d), (_, g) in zip(declared, got) if d != g]


def _canonical(kind: pa.DataType) -> str:
    import pyarrow as pa

    if pa.types.is_list(kind):
        return f"list<{_canonical(kind.value_type)}>"
    if pa.types.is_map(kind):
        return f"map<{_canonical(kind.key_type)}, {_canonical(kind.item_type)}>"
    if pa.types.is_struct(kind):
        return "struct<" + ", ".join(f"{f.name}: {_canonical(f.type)}" for f in kind) + ">"
    return str(kind)


def columns_digest() -> str:
    """sha256 of every table's column names and types, in order (not their lines of documentation)."""
    spec = [
        (table, [(name, _canonical(arrow_type(kind))) for name, kind, _ in COLUMNS[table]])
        for table in COLUMNS
    ]
    return hashlib.sha256(repr(spec).encode()).hexdigest()


def zero_row_file(table: str) -> str:
    """The file name of a table's zero-row file in SCHEMA_PARTITION (as ingest names a rank's file)."""
    return "run.parquet" if table == "runs" else "rank-00000.parquet"


def write_schema_files(out: Path) -> None:
    """The zero-row file of every table: out/<table>/<zero_row_file>, written from the declared schema."""
    for table in STORED_TABLES:
        folder = out / table
        folder.mkdir(parents=True, exist_ok=True)
        write_rows(table, [], folder / zero_row_file(table))


def write_rows(table: str, rows: list[dict], path: Path) -> None:
    """Write these rows as a Parquet file of the declared table (zstd, as every table's files): a dict per
    row, keyed by column name; a column or a struct key left out is NULL; a map may be given as a dict or
    as (key, value) pairs, in their order. What pyarrow reads back equals
    `pa.Table.from_pylist(rows, schema=schema(table))` (tests/test_schema.py).

    DuckDB writes it, from the rows' JSON, so that ingest never imports pyarrow (and with it numpy, and
    pandas where installed: pyarrow imports pandas on its first conversion of Python values). Every value
    of the declared types survives JSON exactly (64-bit integers, strings, UTC timestamps to the
    microsecond); a value not of its column's type is an error, never a NULL (json_transform_strict)."""
    from tracehouse.warehouse.quoting import sql_string

    target = f"TO {sql_string(str(path))} (FORMAT parquet, COMPRESSION zstd)"
    with _writer() as con:
        if not rows:  # the declared columns, no row: nothing to convert
            columns = ", ".join(f'CAST(NULL AS {duckdb_type(k)}) AS "{n}"' for n, k, _ in COLUMNS[table])
            con.execute(f"COPY (SELECT {columns} WHERE false) {target}")
            return
        select, params = rows_select([(name, kind) for name, kind, _ in COLUMNS[table]], rows)
        con.execute(f"COPY ({select}) {target}", params)


def rows_select(columns: list[tuple[str, Declared]], rows: list[dict]) -> tuple[str, dict]:
    """A DuckDB SELECT (and its parameters) of these rows (dicts keyed by column name, as write_rows takes
    them) as the columns [(column, declared type)], in their order: for the few rows Python builds (a
    thousand, not a million: they go through one JSON document)."""
    import orjson

    row_type = struct_of(*columns)
    names = ", ".join(f'r."{column}"' for column, _ in columns)
    return (
        f"SELECT {names} FROM (SELECT unnest(json_transform_strict($rows, $shape)) AS r)",
        {
            "rows": orjson.dumps([_complete(row, row_type) for row in rows]).decode(),
            "shape": orjson.dumps([_json_shape(row_type)]).decode(),
        },
    )


# (pid, the memory settings it has, the in-memory DuckDB database write_rows writes with)
_WRITER: tuple[int, dict, object] | None = None
# write_rows writes a thousand rows at most (a zero-row schema file, a runs row): its database gets the
# policy's limit but never less than this, so the bookkeeping of an ingest under a tiny limit does not fail
# before the ingest itself can say, in its one line, which setting to raise
WRITER_FLOOR = 64 * 10**6


def _writer_settings() -> dict[str, str]:
    from tracehouse.warehouse import memory

    now = memory.settings()
    if (memory.parse_size(now["memory_limit"]) or WRITER_FLOOR) < WRITER_FLOOR:
        now["memory_limit"] = f"{WRITER_FLOOR // 10**6}MB"
    return now


def scratch():
    """A cursor on this process's one in-memory DuckDB database (write_rows's), for a small read of staged
    files (ingest.capture.coverage): a database of its own would cost another 10-40 ms to open."""
    return _writer()


def _writer():
    """A cursor on this process's one in-memory DuckDB database for write_rows: opening a database costs
    10-40 ms, and an ingest writes a dozen small files (the zero-row files of a new warehouse, the runs
    row). One per process (a child made by fork gets its own), with the memory policy's settings of now
    (at least WRITER_FLOOR): set again when they changed (before, the database kept the limit it was opened
    under for every later write of the process, whatever TRACEHOUSE_MEMORY_LIMIT said then)."""
    from tracehouse.warehouse import local_db, memory

    global _WRITER
    now = _writer_settings()
    if _WRITER is None or _WRITER[0] != os.getpid():
        _WRITER = (os.getpid(), now, local_db.connect())
        memory.apply(_WRITER[2], now)
    elif _WRITER[1] != now:
        memory.apply(_WRITER[2], now)
        _WRITER = (_WRITER[0], now, _WRITER[2])
    return _WRITER[2].cursor()


def _complete(value, kind: Declared):
    """value with every key of its struct types present (a key left out is None, as from_pylist reads it)
    and each map as a JSON object (a dict or (key, value) pairs, in their order)."""
    if value is None or isinstance(kind, str):
        return value
    if kind[0] == "struct":
        return {name: _complete(value.get(name), t) for name, t in kind[1]}
    if kind[0] == "list":
        return [_complete(item, kind[1]) for item in value]
    return dict(value)


def _json_shape(kind: Declared):
    """The structure json_transform reads a value of this type with: an object per struct, a one-item list
    per list, the DuckDB type name otherwise."""
    if isinstance(kind, str) or kind[0] == "map":
        return duckdb_type(kind)
    if kind[0] == "struct":
        return {name: _json_shape(t) for name, t in kind[1]}
    return [_json_shape(kind[1])]

"""Stage 2 of ingest: the event array on disk -> one typed DuckDB table, `raw_events`.

DuckDB's JSON reader is the typed decoder: it reads the array in buffers (bounded memory), parses
numbers exactly into DECIMAL (so epoch-microsecond timestamps keep every nanosecond), and yields
columns, not Python objects. Every `args` key we use is read as text and typed later with TRY_CAST,
so an odd value in one event (a string where a number belongs) cannot fail the whole file.
"""

from __future__ import annotations

from pathlib import Path

import duckdb

# Output column of raw_events -> the key of the event's `args` object it comes from.
ARGS_KEYS: dict[str, str] = {
    "external_id": "External id",
    "correlation": "correlation",
    "stream": "stream",
    "device": "device",
    "grid": "grid",
    "block": "block",
    "registers": "registers per thread",
    "shared_memory": "shared memory",
    "occupancy": "est. achieved occupancy %",
    "bytes": "bytes",
    "python_id": "Python id",
    "python_parent_id": "Python parent id",
    "input_dims": "Input Dims",
    "input_types": "Input type",
    "collective_name": "Collective name",
    "in_msg_nelems": "In msg nelems",
    "out_msg_nelems": "Out msg nelems",
    "group_size": "Group size",
    "dtype": "dtype",
    "process_group": "Process Group Name",
    "process_group_desc": "Process Group Description",
    "meta_name": "name",  # the name carried by `M` (metadata) events
    "sequence_number": "Sequence number",
    "fwd_thread_id": "Fwd thread id",
    "wait_on_stream": "wait_on_stream",
    "wait_on_event_corr": "wait_on_cuda_event_record_corr_id",
    "sync_kind": "cuda_sync_kind",
}

# The older Kineto format spells this key in lower case (DuckDB struct fields are case-insensitive,
# so the two spellings cannot both be read; such files are recognised and read with this one).
LEGACY_EXTERNAL_ID = "external id"

EVENT_KEYS = {
    "ph": "VARCHAR",
    "cat": "VARCHAR",
    "name": "VARCHAR",
    "pid": "VARCHAR",
    "tid": "VARCHAR",
    "ts": "DECIMAL(38,3)",
    "dur": "DECIMAL(38,3)",
    "id": "VARCHAR",
    "bp": "VARCHAR",
}


def _sql_string(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _columns_spec(legacy: bool) -> str:
    keys = dict(ARGS_KEYS)
    if legacy:
        keys["external_id"] = LEGACY_EXTERNAL_ID
    fields = ", ".join('"%s" VARCHAR' % key.replace('"', '""') for key in keys.values())
    spec = dict(EVENT_KEYS)
    spec["args"] = f"STRUCT({fields})"
    return "{" + ", ".join(f"{_sql_string(k)}: {_sql_string(v)}" for k, v in spec.items()) + "}"


def _looks_legacy(events_file: Path) -> bool:
    with open(events_file, "rb") as f:
        head = f.read(1 << 20)
    return b'"external id"' in head and b'"External id"' not in head


# DuckDB's reader keeps buffers of twice the largest object it may meet; most events are < 10 kB, so
# start small and retry with room for huge ones (a 100 MB kernel name) only when a file needs it.
OBJECT_SIZES = (32 << 20, 1 << 30)


def load_raw_events(con: duckdb.DuckDBPyConnection, events_file: Path) -> None:
    """Create table raw_events(ev_id, ph, cat, name, pid, tid, ts, dur, id, bp, <ARGS_KEYS...>)."""
    for size in OBJECT_SIZES:
        try:
            return _load(con, events_file, size)
        except duckdb.InvalidInputException as exc:
            if "maximum_object_size" not in str(exc) or size == OBJECT_SIZES[-1]:
                raise


def _load(con: duckdb.DuckDBPyConnection, events_file: Path, max_object_size: int) -> None:
    legacy = _looks_legacy(events_file)
    keys = dict(ARGS_KEYS)
    if legacy:
        keys["external_id"] = LEGACY_EXTERNAL_ID
    arg_columns = ", ".join(
        f'args."{key.replace(chr(34), chr(34) * 2)}" AS {column}' for column, key in keys.items()
    )
    # One thread keeps file order, so ev_id (the event's position in the file) is deterministic.
    con.execute("SET threads = 1")
    con.execute(
        f"""
        CREATE OR REPLACE TABLE raw_events AS
        SELECT row_number() OVER () - 1 AS ev_id, ph, cat, name, pid, tid, ts, dur, id, bp, {arg_columns}
        FROM read_json({_sql_string(str(events_file))}, format = 'array',
                       columns = {_columns_spec(legacy)}, maximum_object_size = {int(max_object_size)})
        """
    )

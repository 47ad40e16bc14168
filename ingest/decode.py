"""Stage 2 of ingest: the event array on disk -> one typed DuckDB table, `events`.

DuckDB's JSON reader is the typed decoder: it reads the array in buffers (bounded memory), parses
numbers exactly into DECIMAL (so epoch-microsecond timestamps keep every nanosecond), and yields
columns, not Python objects; sql/type_events.sql types them in the same pass. Numeric `args` keys are
read as numbers; an odd value in one event (a string where a number belongs) fails that fast read, and
the file is read again with every `args` key as text, typed with TRY_CAST, so it cannot fail the file.

Bad bytes cost only the events they are in (README, "Broken traces"). The fast path is one strict
read. When DuckDB refuses a *value* (NaN, Infinity, a number out of range, text where a number
belongs, a scalar where an event belongs), the file is read again leniently: that value becomes NULL
and is counted. When DuckDB refuses the *JSON* (invalid UTF-8, raw control characters, a broken event),
the array is split into its events in Python (streaming) and each is repaired where the repair is
certain (invalid UTF-8 -> U+FFFD, control characters in strings escaped, NaN/Infinity -> null) or
else skipped and counted; the rest lands. Every repair is a counted warning in `runs.warnings`.
"""

from __future__ import annotations

import re
from pathlib import Path

import duckdb
import orjson
from tracehouse.ingest import jsonscan
from tracehouse.ingest.memory import work_threads
from tracehouse.ingest.source import join_pieces
from tracehouse.warehouse import memory
from tracehouse.warehouse.quoting import sql_identifier, sql_string

from tracehouse.errors import TraceFormatError

# Output column of events -> the key of the event's `args` object it comes from.
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
    # CUDA-graph node identity of a replayed activity (Kineto with CUDA >= 12; 0 when not from a graph)
    "graph_id": "graph id",
    "graph_node_id": "graph node id",
    # a `mark_kernels` annotation baked into a graph node's events by PyTorch's export (its string form
    # lands in `name`, read above as meta_name; torchtitan tags the module under `module_fqn`)
    "module_fqn": "module_fqn",
}

# args read as numbers on the fast path (type_events.sql types them again, a no-op there).
ARGS_NUMERIC: dict[str, str] = {
    "external_id": "BIGINT",
    "correlation": "BIGINT",
    "stream": "BIGINT",
    "device": "BIGINT",
    "registers": "BIGINT",
    "shared_memory": "BIGINT",
    "occupancy": "DOUBLE",
    "bytes": "BIGINT",
    "python_id": "BIGINT",
    "python_parent_id": "BIGINT",
    "in_msg_nelems": "BIGINT",
    "out_msg_nelems": "BIGINT",
    "group_size": "BIGINT",
    "sequence_number": "BIGINT",
    "fwd_thread_id": "BIGINT",
    "wait_on_stream": "BIGINT",
    "wait_on_event_corr": "BIGINT",
    "graph_id": "BIGINT",
    "graph_node_id": "BIGINT",
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


def _columns_spec(keys: dict[str, str], typed: bool, numbers_as: str | None = None) -> str:
    """read_json's `columns`: the event keys and an `args` STRUCT of the keys asked for (column -> key).
    typed: numeric args read as numbers (the fast path; a value that does not convert fails the read,
    and the file is read again with every `args` key as text, typed by TRY_CAST). numbers_as: the type
    the event's own numeric keys (ts, dur) are read as instead (the lenient path reads them as JSON)."""

    def arg_type(column: str) -> str:
        return ARGS_NUMERIC.get(column, "VARCHAR") if typed else "VARCHAR"

    fields = ", ".join(f"{sql_identifier(key)} {arg_type(column)}" for column, key in keys.items())
    spec = {k: (numbers_as if numbers_as and v == "DECIMAL(38,3)" else v) for k, v in EVENT_KEYS.items()}
    spec["args"] = f"STRUCT({fields})"
    return "{" + ", ".join(f"{sql_string(k)}: {sql_string(v)}" for k, v in spec.items()) + "}"


def _looks_legacy(events_file: Path) -> bool:
    with open(events_file, "rb") as f:
        head = f.read(1 << 20)
    return b'"external id"' in head and b'"External id"' not in head


# DuckDB's reader keeps buffers of twice the largest object it may meet; most events are < 10 kB, so
# start small and retry with room for huge ones (a 100 MB kernel name) only when a file needs it.
OBJECT_SIZES = (32 << 20, 256 << 20, 1 << 30)  # 1 GB needs a memory limit over 2 GB

# Warning keys (runs.warnings); README "Broken traces" lists them.
W_BAD_VALUE = "non-numeric ts/dur values read as null (NaN, Infinity, out of range, text)"
W_UTF8 = "events with invalid UTF-8 repaired (U+FFFD)"
W_CONTROL = "events with raw control characters in strings escaped"
W_UNREADABLE = "unreadable events skipped"
W_NO_DUR = "complete events (ph X) without a duration, read as 0"
W_ABSURD = "durations over one day set to 0"
W_TS_RANGE = "timestamps out of range skipped"
W_LONG_NAME = "names over 65,536 characters cut (their md5 kept)"


def load_raw_events(
    con: duckdb.DuckDBPyConnection,
    events_file: Path,
    source=None,
    extra_args: dict[str, str] | None = None,
    decoder: PieceDecoder | None = None,
) -> dict[str, int]:
    """Create the typed table `events` (ingest/sql/type_events.sql) from the event array in events_file.

    `source` (ingest.source.TraceSource) names the file in errors and positions; `extra_args` adds
    columns (column -> `args` key, read as text) for a caller that needs more keys. Returns the warnings
    (what was repaired or skipped, with counts). When no event has a timestamp, says why in
    source.empty_reason (ingest.run refuses such a file: nothing usable remains). The array's pieces
    (source.pieces) are decoded side by side: by `decoder`, where it was read_trace's on_piece (decoding
    began while the file was read), else here.
    """
    label = str(source.path) if source is not None else str(events_file)
    warnings: dict[str, int] = dict(source.warnings) if source is not None else {}
    pieces = source.pieces if source is not None and source.pieces else [events_file]
    if len(pieces) == 1 and pieces[0] != events_file:
        pieces[0].replace(events_file)
        pieces = [events_file]
    if len(pieces) > 1 and (decoder is None or not decoder.started):  # pieces read_trace did not announce
        decoder = PieceDecoder(con, extra_args)
        for k, piece in enumerate(pieces):
            decoder.add(k, piece)
    try:
        if len(pieces) == 1 or not decoder.finish():
            join_pieces(pieces, events_file)
            _load_sizes(con, events_file, "strict", extra_args)
    except duckdb.InvalidInputException as exc:
        malformed = "Malformed JSON" in str(exc)
        try:
            if not malformed:  # a value DuckDB could not convert: read again, it becomes NULL, counted
                try:
                    warnings.update(_load_sizes(con, events_file, "lenient", extra_args))
                except duckdb.InvalidInputException as again:
                    if "Malformed JSON" not in str(again):
                        raise
                    malformed = True
            if malformed:  # the JSON itself is broken somewhere: split into events, repair or skip each
                ndjson = events_file.with_suffix(".ndjson")
                try:
                    warnings.update(_split_events(events_file, ndjson, source.array_offset if source else 0))
                    warnings.update(_load_sizes(con, ndjson, "ndjson", extra_args))
                finally:
                    ndjson.unlink(missing_ok=True)
        except duckdb.Error as again:
            raise _refusal(label, again) from None
    timed, total, no_dur = con.execute(
        "SELECT count(*) FILTER (WHERE (start_ns IS NOT NULL OR ts_out_of_range) AND coalesce(ph, '') <> 'M'), "
        "count(*), count(*) FILTER (WHERE dur_missing) FROM events"
    ).fetchone()
    if source is not None and source.truncation:
        warnings[f"{source.truncation}: events kept"] = total
    if not timed and source is not None:  # refused by ingest.run (the schema bootstrap reads `[]` here)
        source.empty_reason = (
            "nothing to ingest: the event array is empty"
            if not total
            else f"nothing to ingest: none of its {total} events has a timestamp (metadata only)"
        )
        if source.truncation:
            source.empty_reason = f"{source.truncation}, and no complete timed event before it"
    if no_dur:
        warnings[W_NO_DUR] = no_dur
    return {k: v for k, v in warnings.items() if v}


def event_warnings(con: duckdb.DuckDBPyConnection) -> dict[str, int]:
    """Repairs counted on the typed `events` table (after sql/10_events.sql)."""
    absurd, out_of_range, cut = con.execute(
        "SELECT count(*) FILTER (WHERE dur_absurd), count(*) FILTER (WHERE ts_out_of_range), "
        "count(*) FILTER (WHERE name_cut) FROM events"
    ).fetchone()
    return {k: v for k, v in {W_ABSURD: absurd, W_TS_RANGE: out_of_range, W_LONG_NAME: cut}.items() if v}


def _first_line(exc: Exception) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:300] if text else type(exc).__name__


def _refusal(label: str, exc: duckdb.Error) -> Exception:
    """What a failed read raises: the file refused as invalid JSON, or, out of memory, the error itself (not
    the file's fault: ingest.run names the setting to raise)."""
    if isinstance(exc, duckdb.OutOfMemoryException):
        return exc
    return TraceFormatError(
        label,
        f"invalid trace JSON ({_first_line(exc)})",
        "event array",
        hint="the file was skipped; check that it is a complete PyTorch-profiler trace",
    )


def _load_sizes(
    con, events_file: Path, mode: str, extra_args: dict[str, str] | None = None
) -> dict[str, int]:
    for size, bigger in zip(OBJECT_SIZES, OBJECT_SIZES[1:] + (None,)):
        try:
            return _load(con, events_file, size, mode, extra_args)
        except duckdb.InvalidInputException as exc:
            if "maximum_object_size" not in str(exc) or bigger is None:
                raise
            _allow_objects_of(con, bigger)  # the reader keeps buffers of about 2-3x the object size
    return {}


def _allow_objects_of(con: duckdb.DuckDBPyConnection, size: int) -> None:
    """Raise DuckDB's memory limit to 3x an object of `size` bytes, if it is lower: a file with one huge
    event (a 100 MB kernel name) needs the room; every other file keeps the worker's limit."""
    (text,) = con.execute("SELECT current_setting('memory_limit')").fetchone()
    current = memory.parse_size(str(text)) or 0
    if current and current < 3 * size:
        con.execute(f"SET memory_limit = {sql_string(f'{3 * size // (1 << 20)}MiB')}")


def _arg_keys(first_file: Path, extra_args: dict[str, str] | None) -> dict[str, str]:
    """{column: `args` key} to read: ARGS_KEYS (the legacy spelling of External id where the array's
    first bytes use it) and the caller's extra keys."""
    keys = dict(ARGS_KEYS)
    if _looks_legacy(first_file):
        keys["external_id"] = LEGACY_EXTERNAL_ID
    keys.update(extra_args or {})
    return keys


def _strict_read(path: Path, keys: dict[str, str], max_object_size: int) -> str:
    """The SELECT of the fast path over one array file: every event, numeric `args` as numbers, ev_id
    its position in that file (on one thread, the reader's order)."""
    arg_columns = ", ".join(f"args.{sql_identifier(key)} AS {column}" for column, key in keys.items())
    return (
        f"SELECT row_number() OVER () - 1 AS ev_id, ph, cat, name, pid, tid, ts, dur, id, bp, {arg_columns} "
        f"FROM read_json({sql_string(path)}, format = 'array', columns = {_columns_spec(keys, typed=True)}, "
        f"maximum_object_size = {int(max_object_size)})"
    )


def _load(
    con: duckdb.DuckDBPyConnection,
    events_file: Path,
    max_object_size: int,
    mode: str = "strict",
    extra_args: dict[str, str] | None = None,
) -> dict[str, int]:
    """Create `events`. strict: the fast path, one pass (raw_events is a view over the reader, numeric
    `args` read as numbers). lenient: values that do not convert become NULL (ts/dur counted), `args`
    read as text. ndjson: the same over one event per line (the output of _split_events)."""
    keys = _arg_keys(events_file, extra_args)
    arg_columns = ", ".join(f"args.{sql_identifier(key)} AS {column}" for column, key in keys.items())
    path = sql_string(events_file)
    # One thread keeps file order, so ev_id (the event's position in the file) is deterministic.
    con.execute("SET threads = 1")
    if mode == "strict":
        con.execute(
            f"CREATE OR REPLACE VIEW raw_events AS {_strict_read(events_file, keys, max_object_size)}"
        )
        try:
            _type_events(con, extra_args)
        finally:
            con.execute("DROP VIEW IF EXISTS raw_events")
        return {}
    spec = _columns_spec(keys, typed=False, numbers_as="JSON")
    fmt = "array" if mode == "lenient" else "newline_delimited"
    con.execute(
        f"""
        CREATE OR REPLACE TABLE raw_lenient AS
        SELECT row_number() OVER () - 1 AS ev_id, ph, cat, name, pid, tid, ts AS ts_json, dur AS dur_json,
               TRY_CAST(ts->>'$' AS DECIMAL(38,3)) AS ts, TRY_CAST(dur->>'$' AS DECIMAL(38,3)) AS dur,
               id, bp, {arg_columns}
        FROM read_json({path}, format = '{fmt}', ignore_errors = true,
                       columns = {spec}, maximum_object_size = {int(max_object_size)})
        """
    )
    bad = con.execute(
        "SELECT count(*) FILTER (WHERE ts IS NULL AND ts_json IS NOT NULL AND json_type(ts_json) <> 'NULL') "
        "+ count(*) FILTER (WHERE dur IS NULL AND dur_json IS NOT NULL AND json_type(dur_json) <> 'NULL') "
        "FROM raw_lenient"
    ).fetchone()[0]
    con.execute("CREATE OR REPLACE VIEW raw_events AS SELECT * EXCLUDE (ts_json, dur_json) FROM raw_lenient")
    try:
        _type_events(con, extra_args)
    finally:
        con.execute("DROP VIEW IF EXISTS raw_events")
        con.execute("DROP TABLE raw_lenient")
    return {W_BAD_VALUE: bad}


TYPE_EVENTS_SQL = (Path(__file__).parent / "sql" / "type_events.sql").read_text()
CATEGORIES_SQL = (Path(__file__).parent / "sql" / "categories.sql").read_text()


def define_categories(con: duckdb.DuckDBPyConnection) -> None:
    """The macro kineto_category (ingest/sql/categories.sql: every version's spelling of a category ->
    the modern one), which type_events.sql calls."""
    con.execute(CATEGORIES_SQL)


def type_events_sql(extra_columns: list[str]) -> str:
    """ingest/sql/type_events.sql, with these columns of raw_events (extra `args` a caller asked for)
    appended to its select list: the statement's tree edited with sqlglot, never its text."""
    if not extra_columns:
        return TYPE_EVENTS_SQL
    import sqlglot  # here only: 0.05-0.2 s of every ingest's start, for the few that ask extra args

    tree = sqlglot.parse_one(TYPE_EVENTS_SQL, read="duckdb")
    tree.select(*(sqlglot.exp.column(c, quoted=True) for c in extra_columns), copy=False)
    return tree.sql(dialect="duckdb")


def _type_events(con: duckdb.DuckDBPyConnection, extra_args: dict[str, str] | None) -> None:
    define_categories(con)
    con.execute(f"CREATE OR REPLACE TABLE events AS {type_events_sql(list(extra_args or {}))}")


# ---- the fast path of a large array: its pieces decoded side by side ------------------------------------
# One piece per thread: every reader of `events` then scans a union of that many tables, which costs more
# the more tables (4 per thread: the transforms +45 % on a 300 MB trace; 1: +5 %). Under 8 MB the
# statements cost about what the threads save; from 15 MB decode is ~1.4x faster (bench/decode_pieces.py).
CUT_FROM = 8 << 20


def piece_bytes(path: Path) -> int | None:
    """The size of the pieces read_trace should cut this file's event array into (one per thread), or
    None: one file (one thread, or a small array). From the JSON's size: a gzip file's own trailer (its
    size mod 4 GiB, taken past the compressed size), else the file's size."""
    threads = work_threads()
    if threads < 2:
        return None
    size = path.stat().st_size
    json_bytes = size
    with open(path, "rb") as f:
        if f.read(2) == b"\x1f\x8b" and size >= 18:
            f.seek(-4, 2)
            json_bytes = int.from_bytes(f.read(4), "little")
            while json_bytes < size:
                json_bytes += 1 << 32
    if json_bytes < CUT_FROM:
        return None
    return json_bytes // threads + (1 << 20)  # the last piece is not a sliver


class PieceDecoder:
    """The strict fast path over the pieces of the array (read_trace's), decoded as read_trace closes
    them (`add` is its on_piece), work_threads() at a time, while the rest of the file is still being
    inflated: each piece is read and typed by one thread (as one file is: in file order) into
    events_piece_<k> with its own ev_id from 0; `finish` makes `events` the view of the pieces in order,
    ev_id offset by the events of the pieces before (the same rows as one read of the whole array:
    tests/test_decode_pieces.py), or returns False, with nothing left behind, when any piece was refused
    (a bad value, a huge event, or a cut that fell inside a string): the caller then reads the joined
    array as one file, with its repairs. `close` waits for what was started (always call it)."""

    def __init__(self, con: duckdb.DuckDBPyConnection, extra_args: dict[str, str] | None = None):
        self.con = con
        self.extra_args = extra_args
        self.pool = None
        self.loads: list = []
        self.published = False  # `events` is the view of the pieces

    @property
    def started(self) -> bool:
        return self.pool is not None

    def add(self, k: int, piece: Path) -> None:
        if self.pool is None:
            from concurrent.futures import ThreadPoolExecutor

            self.keys = _arg_keys(piece, self.extra_args)
            self.typed = type_events_sql(list(self.extra_args or {}))
            define_categories(self.con)
            self.con.execute("SET threads = 1")  # each piece in file order on the thread that reads it
            self.pool = ThreadPoolExecutor(work_threads())
        self.loads.append(self.pool.submit(self._load, k, piece))

    def _load(self, k: int, piece: Path) -> int:
        cursor = self.con.cursor()  # its own temp view raw_events
        try:
            cursor.execute(
                f"CREATE TEMP VIEW raw_events AS {_strict_read(piece, self.keys, OBJECT_SIZES[0])}"
            )
            cursor.execute(f"CREATE OR REPLACE TABLE events_piece_{k} AS {self.typed}")
            return cursor.execute(f"SELECT count(*) FROM events_piece_{k}").fetchone()[0]
        finally:
            cursor.close()

    def finish(self) -> bool:
        try:
            counts = [load.result() for load in self.loads]
        except duckdb.OutOfMemoryException:
            self.close()
            raise  # reading the array whole would need more: the caller says which setting to raise
        except duckdb.Error:
            self.close()
            return False
        parts, before = [], 0
        for k, count in enumerate(counts):
            parts.append(f"SELECT * REPLACE (ev_id + {before} AS ev_id) FROM events_piece_{k}")
            before += count
        self.con.execute("CREATE OR REPLACE VIEW events AS " + " UNION ALL ".join(parts))
        self.published = True
        return True

    def close(self) -> None:
        """Wait for the pieces started; drop their tables unless `events` reads them."""
        if self.pool is None:
            return
        self.pool.shutdown(wait=True)
        if not self.published:
            for k in range(len(self.loads)):
                self.con.execute(f"DROP TABLE IF EXISTS events_piece_{k}")


# ---- the salvage path: split the array into events, repair or skip each ------------------------------
_FIX = re.compile(rb'("[^"\\]*(?:\\.[^"\\]*)*")|-?Infinity|NaN')
_CONTROL = re.compile(rb"[\x00-\x1f]")
SPLIT_READ = 8 << 20


def _escape_controls(match: re.Match) -> bytes:
    return b"\\u%04x" % match.group(0)[0]


def _repair(elem: bytes, counts: dict[str, int]) -> bytes | None:
    """The event's bytes as valid JSON (repaired where certain), or None when it cannot be read."""
    try:
        orjson.loads(elem)
        return elem
    except orjson.JSONDecodeError:
        pass
    fixed = elem
    try:
        fixed.decode("utf-8")
    except UnicodeDecodeError:
        fixed = fixed.decode("utf-8", "replace").encode("utf-8")
        counts[W_UTF8] = counts.get(W_UTF8, 0) + 1
    seen = {"control": False, "nan": 0}

    def fix(match: re.Match) -> bytes:
        if match.group(1) is None:
            seen["nan"] += 1
            return b"null"
        text = match.group(1)
        if _CONTROL.search(text):
            seen["control"] = True
            return _CONTROL.sub(_escape_controls, text)
        return text

    fixed = _FIX.sub(fix, fixed)
    if seen["control"]:
        counts[W_CONTROL] = counts.get(W_CONTROL, 0) + 1
    if seen["nan"]:
        counts[W_BAD_VALUE] = counts.get(W_BAD_VALUE, 0) + seen["nan"]
    try:
        orjson.loads(fixed)
    except orjson.JSONDecodeError as exc:
        if "number" not in str(exc):  # a huge number is still JSON: DuckDB reads it as NULL, counted
            return None
    return fixed


def _split_events(events_file: Path, out_file: Path, offset: int = 0) -> dict[str, int]:
    """Write each element of the array in `events_file` on a line of its own, repaired or skipped.

    Streaming (ingest.jsonscan.elements: one read buffer plus the event being cut). Returns the
    warnings (repairs, skipped events and where the first skipped one was: `offset` + its byte in the
    array = its byte in the uncompressed file).
    """
    counts: dict[str, int] = {}
    skipped, first_bad = 0, None
    with open(events_file, "rb") as src, open(out_file, "wb") as out:
        for piece in jsonscan.elements(src, SPLIT_READ):
            fixed = (
                _repair(piece.data, counts) if piece.kind == "element" and piece.data[:1] == b"{" else None
            )
            if (
                fixed is None
            ):  # garbage between events, an array or scalar where an event belongs, a cut event
                skipped += 1
                first_bad = first_bad if first_bad is not None else piece.offset
            else:
                out.write(fixed.replace(b"\n", b" ").replace(b"\r", b" ") + b"\n")
    if skipped:
        counts[f"{W_UNREADABLE} (the first at byte {offset + first_bad} of the file)"] = skipped
    return counts

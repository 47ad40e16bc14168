"""The floor and the other parsers bench/run.py compares ingest with: inflate (zlib, isal), msgspec, orjson,
json, DuckDB's read_json (whole and in pieces on threads), HTA's trace loader."""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path

import duckdb
import orjson
from tracehouse.warehouse.quoting import sql_string

try:
    from isal import isal_zlib
except ImportError:  # pragma: no cover
    isal_zlib = None

try:
    import msgspec
except ImportError:  # pragma: no cover - msgspec is a bench-only extra
    msgspec = None


# --------------------------------------------------------------------------------------------------
# the floor and the other parsers


def inflate(path: Path, module, keep: bool) -> tuple[int, bytes | None]:
    """Inflate a .gz (or read a plain file) in 8 MB pieces, as ingest does; keep the bytes if asked."""
    pieces: list[bytes] = []
    total = 0
    with open(path, "rb") as f:
        first = f.read(8 << 20)
        d = module.decompressobj(16 + module.MAX_WBITS) if first[:2] == b"\x1f\x8b" else None
        chunk = first
        while chunk:
            out = chunk if d is None else d.decompress(chunk)
            while d is not None and d.eof and d.unused_data:  # concatenated gzip members
                rest = d.unused_data
                d = module.decompressobj(16 + module.MAX_WBITS)
                out += d.decompress(rest)
            total += len(out)
            if keep:
                pieces.append(out)
            chunk = f.read(8 << 20)
    return total, (b"".join(pieces) if keep else None)


if msgspec is not None:

    class Event(msgspec.Struct):
        """The typed decoder of the floor: the keys ingest reads, `args` left as raw JSON bytes."""

        ph: str = ""
        cat: str = ""
        name: str = ""
        pid: int | str = 0
        tid: int | str = 0
        ts: float = 0.0
        dur: float | None = None
        id: int | str | None = None
        args: msgspec.Raw = msgspec.Raw(b"null")

    class Trace(msgspec.Struct):
        traceEvents: list[Event] = msgspec.field(default_factory=list)

    class ExactEvent(Event):
        """The same with exact timestamps: a float64 cannot hold epoch microseconds to the ns
        (1.7e15 us has a 0.25 us step), so a lossless decoder must read them as decimals, as ingest does."""

        ts: Decimal = Decimal(0)
        dur: Decimal | None = None

    class ExactTrace(msgspec.Struct):
        traceEvents: list[ExactEvent] = msgspec.field(default_factory=list)

    _MSGSPEC_DECODER = msgspec.json.Decoder(Trace)
    _MSGSPEC_EXACT_DECODER = msgspec.json.Decoder(ExactTrace)


def parse_msgspec(data: bytes) -> int:
    return len(_MSGSPEC_DECODER.decode(data).traceEvents)


def parse_msgspec_exact(data: bytes) -> int:
    return len(_MSGSPEC_EXACT_DECODER.decode(data).traceEvents)


def duckdb_read(events_file: Path) -> int:
    """DuckDB's JSON reader alone on the event array, with the columns ingest asks for (typed args):
    the decoder ingest is built on, without the typing, nesting, linking and Parquet."""
    from tracehouse.ingest import decode

    keys = dict(decode.ARGS_KEYS)
    con = duckdb.connect()
    try:
        con.execute("SET threads = 1")
        con.execute(
            f"CREATE TABLE t AS SELECT * FROM read_json({sql_string(events_file)}, format = 'array', "
            f"columns = {decode._columns_spec(keys, typed=True)})"
        )
        return con.execute("SELECT count(*) FROM t").fetchone()[0]
    finally:
        con.close()


def duckdb_read_parallel(pieces: list[Path]) -> int:
    """Issue 15's exact floor's decode: DuckDB's typed read (the columns ingest asks for, exact decimal
    ts/dur) of the event array cut into pieces, one piece per thread, each thread its own connection."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(len(pieces)) as pool:
        return sum(pool.map(duckdb_read, pieces))


def parse_orjson(data: bytes) -> int:
    return len(orjson.loads(data)["traceEvents"])


def parse_json(data: bytes) -> int:
    return len(json.loads(data)["traceEvents"])


def hta_loader():
    """HTA's trace load (parse + its DataFrame build; 0.5.0 is the reference), or None with the reason."""
    try:
        from hta.common.trace_parser import parse_trace_dataframe
    except Exception as exc:  # noqa: BLE001 - any failure means: skip
        return None, (
            f"HTA is not importable ({type(exc).__name__}): its row is skipped; install "
            "HolisticTraceAnalysis==0.5.0 (with pandas<3) into the venv to compare."
        )
    try:
        from hta.configs.parser_config import ParserConfig

        cfg = ParserConfig()
    except Exception:  # noqa: BLE001 - older HTA: the config argument is optional
        cfg = None

    def load(path: Path) -> int:
        _meta, df, _symbols = parse_trace_dataframe(str(path), cfg)
        return len(df)

    return load, None

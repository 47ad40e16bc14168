"""An Nsight Systems SQLite export as a file: recognised and checked by its tables and columns (open_export),
its processes with GPU activity or CUDA calls (processes), and those of several files numbered as ranks
(plan_ranks). ingest.nsys reads each rank's rows from it."""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from pathlib import Path

from tracehouse.ingest.files import is_report

from tracehouse.errors import TraceFormatError, TracehouseError

META_TABLES = ("META_DATA_EXPORT", "EXPORT_META_DATA")  # schema 3.x, schema 2.x
GPU_TABLES = ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET")
CUPTI_TABLES = (*GPU_TABLES, "CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION")
NO_GPU = "no GPU activity in this export: CUDA tracing was off (record with `nsys profile --trace=cuda`)"
HINT = "the file was skipped; export the report again with `nsys export --type sqlite REPORT.nsys-rep`"
NVTX_RANGES = {"NvtxPushPopRange": 59, "NvtxStartEndRange": 60}  # ENUM_NSYS_EVENT_TYPE's ids, where absent
TID_BITS = 24  # globalTid = globalPid | tid; globalPid = (vm << 48) | (pid << 24)


@dataclass
class NsysRank:
    """One process of an export, to be ingested as one rank."""

    path: Path
    rank: int
    global_pid: int
    pid: int
    process_name: str | None
    devices: list[int]


# ---- detection (ingest.files: is_report, is_sqlite, is_nsys_input) and validation --------------------


def refuse(path: Path, what: str) -> TraceFormatError:
    return TraceFormatError(str(path), what, hint=HINT)


def _check_size(path: Path) -> None:
    """A database shorter than its header says was cut (a copy that did not finish)."""
    with open(path, "rb") as f:
        head = f.read(100)
    if len(head) < 100:
        raise refuse(path, "truncated SQLite database (shorter than its 100-byte header)")
    page_size = int.from_bytes(head[16:18], "big")
    page_size = 65536 if page_size == 1 else page_size
    pages = int.from_bytes(head[28:32], "big")
    change, valid_for = int.from_bytes(head[24:28], "big"), int.from_bytes(head[92:96], "big")
    size = path.stat().st_size
    if pages and change == valid_for and page_size * pages > size:
        raise refuse(path, f"truncated SQLite database ({size} bytes, its header says {page_size * pages})")


def _text(raw: bytes) -> str:
    """SQLite text as str; bytes that are not UTF-8 become U+FFFD (never an error)."""
    return raw.decode("utf-8", "replace")


def _connect(path: Path) -> sqlite3.Connection:
    con = sqlite3.connect(f"file:{path.resolve()}?mode=ro&immutable=1", uri=True)
    con.text_factory = _text
    return con


# Columns a table's rows need (one of a tuple: any of them), checked where the table exists.
NEED = {
    "StringIds": ("id", "value"),
    "CUPTI_ACTIVITY_KIND_KERNEL": (
        "start",
        "end",
        "deviceId",
        "streamId",
        "correlationId",
        "globalPid",
        ("demangledName", "shortName", "mangledName"),
    ),
    "CUPTI_ACTIVITY_KIND_MEMCPY": (
        "start",
        "end",
        "deviceId",
        "streamId",
        "correlationId",
        "globalPid",
        "bytes",
    ),
    "CUPTI_ACTIVITY_KIND_MEMSET": (
        "start",
        "end",
        "deviceId",
        "streamId",
        "correlationId",
        "globalPid",
        "bytes",
    ),
    "CUPTI_ACTIVITY_KIND_RUNTIME": ("start", "end", "globalTid", "correlationId", "nameId"),
    "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION": (
        "start",
        "end",
        "deviceId",
        "streamId",
        "correlationId",
        "globalPid",
        "syncType",
    ),
    "NVTX_EVENTS": ("start", "end", "eventType", "globalTid", ("text", "textId")),
}


def _missing(have: set[str], need: tuple) -> list[str]:
    return [
        c if isinstance(c, str) else " / ".join(c)
        for c in need
        if not set((c,) if isinstance(c, str) else c) & have
    ]


def open_export(path: Path) -> sqlite3.Connection:
    """A read-only connection to a validated export; TraceFormatError (one line) otherwise."""
    if is_report(path):
        raise TracehouseError(
            f"{path}: an Nsight Systems report (.nsys-rep) is NVIDIA's binary format; export it first with "
            f"`nsys export --type sqlite {path.name}` and ingest the .sqlite file"
        )
    _check_size(path)
    try:
        con = _connect(path)
        tables = table_names(con)
    except sqlite3.DatabaseError as exc:
        raise refuse(path, f"damaged SQLite database ({exc})") from None
    try:
        meta = export_meta_table(con, tables)
        activity = [t for t in (*CUPTI_TABLES, "NVTX_EVENTS") if t in tables]
        if any(t in tables for t in META_TABLES):
            product = meta.get("EXPORT_PRODUCT_NAME") or ""
            if "Nsight Systems" not in product:
                raise refuse(
                    path, f"an SQLite export of {product or 'an unknown product'}, not of Nsight Systems"
                )
        elif not activity:
            raise refuse(
                path,
                "an SQLite database but not an Nsight Systems export (no META_DATA_EXPORT / EXPORT_META_DATA "
                "table and no CUPTI_ACTIVITY_KIND_* / NVTX_EVENTS table)",
            )
        if activity and "StringIds" not in tables:
            raise refuse(
                path,
                "CUPTI tables without a StringIds table: not an Nsight Systems export (an nvprof database? "
                "open it in Nsight Systems and export it with `nsys export --type sqlite`)",
            )
        schema = meta.get("EXPORT_SCHEMA_VERSION", "?")
        for table, need in NEED.items():
            if table not in tables:
                continue  # tables are created lazily: an export without copies has no MEMCPY table
            missing = _missing(table_columns(con, table), need)
            if missing:
                raise refuse(
                    path, f"Nsight Systems export without {table}.{', '.join(missing)} (schema {schema})"
                )
    except sqlite3.DatabaseError as exc:
        con.close()
        raise refuse(path, f"damaged SQLite database ({exc})") from None
    except TracehouseError:
        con.close()
        raise
    return con


def table_names(con: sqlite3.Connection) -> set[str]:
    return {name for (name,) in con.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'view')")}


def table_columns(con: sqlite3.Connection, table: str) -> set[str]:
    return {row[1] for row in con.execute(f'PRAGMA table_info("{table}")')}


def export_meta_table(con: sqlite3.Connection, tables: set[str]) -> dict:
    """The export's name -> value metadata (META_DATA_EXPORT, EXPORT_META_DATA in schema 2.x); {} without."""
    table = next((t for t in META_TABLES if t in tables), None)
    if table is None or not {"name", "value"} <= table_columns(con, table):
        return {}
    return dict(con.execute(f'SELECT name, value FROM "{table}"').fetchall())


def nvtx_range_types(con: sqlite3.Connection, tables: set[str]) -> tuple[int, ...]:
    """eventType ids of NVTX push/pop and start/end ranges: ENUM_NSYS_EVENT_TYPE's where the export has it."""
    ids = dict(NVTX_RANGES)
    if "ENUM_NSYS_EVENT_TYPE" in tables and {"id", "name"} <= table_columns(con, "ENUM_NSYS_EVENT_TYPE"):
        for id_, name in con.execute("SELECT id, name FROM ENUM_NSYS_EVENT_TYPE"):
            if name in ids:
                ids[name] = int(id_)
    return tuple(sorted(ids.values()))


# ---- ranks ---------------------------------------------------------------------------------------
def processes(path: Path) -> list[tuple[int, list[int]]]:
    """(globalPid, devices it used) of every process with GPU activity, in rank order; when none has any
    (a CPU-side capture), every process with CUDA calls. A process that only made CUDA calls beside
    processes with GPU work (a launcher, an API server asking for the device count) is no rank."""
    con = open_export(path)
    try:
        tables = table_names(con)
        found: dict[int, set[int]] = {}
        for table in (
            "CUPTI_ACTIVITY_KIND_KERNEL",
            "CUPTI_ACTIVITY_KIND_MEMCPY",
            "CUPTI_ACTIVITY_KIND_MEMSET",
        ):
            if table in tables:
                for gpid, device in con.execute(f'SELECT DISTINCT globalPid, deviceId FROM "{table}"'):
                    found.setdefault(gpid, set()).add(device)
        if not found and "CUPTI_ACTIVITY_KIND_RUNTIME" in tables:
            for (gpid,) in con.execute(
                f"SELECT DISTINCT (globalTid >> {TID_BITS}) << {TID_BITS} FROM CUPTI_ACTIVITY_KIND_RUNTIME"
            ):
                found.setdefault(gpid, set())
    except sqlite3.DatabaseError as exc:
        raise refuse(path, f"damaged SQLite database ({exc})") from None
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
            problems.append((path, f"{path}: {NO_GPU}"))
            continue
        names = _process_names(path)
        for gpid, devices in procs:
            ranks.append(NsysRank(path, len(ranks), gpid, _pid(gpid), names.get(gpid), devices))
    return ranks, problems


def _process_names(path: Path) -> dict[int, str]:
    con = open_export(path)
    try:
        if "PROCESSES" not in table_names(con):
            return {}
        return {g: n for g, n in con.execute("SELECT globalPid, name FROM PROCESSES")}
    except sqlite3.DatabaseError:  # the names are a nicety; a damaged table is reported by the rank's read
        return {}
    finally:
        con.close()

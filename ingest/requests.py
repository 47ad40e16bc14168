"""The requests of a serving run, from a file given at ingest: which request ran in which step, with how many
tokens. A Kineto trace names batches (SGLang's step[DECODE bs=64]) but not the requests in them; the serving
engine's own log does. With this table, sql/request_step_cost splits each step's GPU time over its requests.

The file: CSV with a header row (.csv), JSON Lines (.jsonl / .ndjson: one object a line), or a JSON list of
objects (.json); one row per (step, request):
  step        required: the step number as tracehouse numbers it (the `step` of the `steps` view:
              `tracehouse sql "select rank, step, name, batch_size from steps where run_id = '<RUN>'"`)
  request_id  required: the request's id (any text)
  tokens      the request's query (new) tokens in that step: its prompt chunk in a prefill step, 1 in a plain
              decode step, the draft length under speculative decoding (empty: not known)
  kv_tokens   the KV tokens its attention read in that step (its context length, new tokens included)
  phase       prefill or decode (empty: from the step's phase, else tokens = 1 is decode, more is prefill)
  rank        the rank the row is about (empty: every rank, as under tensor parallelism)
Other columns are ignored. A bad row is an error naming its line: nothing is stored from a bad file.

Table `step_requests` (one row per row of the file, in file order): run_id (partition), rank (NULL: every
rank), step, request_id, tokens, kv_tokens, phase, line (the row's line in the file).
"""

from __future__ import annotations

import csv
import os
from pathlib import Path

import orjson
from tracehouse.warehouse import local_db
from tracehouse.warehouse.derived import forget_derived
from tracehouse.warehouse.quoting import sql_string
from tracehouse.warehouse.schema import write_rows

from tracehouse.errors import TracehouseError

TABLE = "step_requests"
FILE_NAME = "requests.parquet"
HINT = (
    "one row per (step, request): step, request_id, and optionally tokens, kv_tokens, phase (prefill|decode), "
    "rank; as .csv with a header, .jsonl, or a .json list"
)


class RequestsFileError(TracehouseError):
    hint = HINT


def _integer(value, column: str, where: str, path: Path, minimum: int = 0) -> int | None:
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    if isinstance(value, bool):
        raise RequestsFileError(f"{path}: {where}: {column} {value!r} is not a whole number")
    try:
        number = int(value.strip()) if isinstance(value, str) else int(value)
    except ValueError:
        raise RequestsFileError(f"{path}: {where}: {column} {value!r} is not a whole number") from None
    if isinstance(value, float) and value != number:
        raise RequestsFileError(f"{path}: {where}: {column} {value!r} is not a whole number")
    if number < minimum:
        raise RequestsFileError(f"{path}: {where}: {column} {number} is below {minimum}")
    return number


def _records(path: Path) -> list[tuple[int, dict]]:
    """(line, record) pairs of the file, by its suffix."""
    suffix = path.suffix.lower()
    try:
        if suffix == ".csv":
            with open(path, newline="", encoding="utf-8") as handle:
                reader = csv.DictReader(handle)
                return [(reader.line_num, row) for row in reader]
        if suffix in (".jsonl", ".ndjson"):
            out = []
            with open(path, "rb") as handle:
                for number, raw in enumerate(handle, start=1):
                    if raw.strip():
                        record = orjson.loads(raw)
                        if not isinstance(record, dict):
                            raise RequestsFileError(f"{path}: line {number}: not a JSON object")
                        out.append((number, record))
            return out
        if suffix == ".json":
            records = orjson.loads(path.read_bytes())
            if not isinstance(records, list) or not all(isinstance(r, dict) for r in records):
                raise RequestsFileError(f"{path}: not a JSON list of objects")
            return list(enumerate(records, start=1))
    except orjson.JSONDecodeError as e:
        raise RequestsFileError(f"{path}: not valid JSON ({e})") from None
    except UnicodeDecodeError:
        raise RequestsFileError(f"{path}: not UTF-8 text") from None
    except OSError as e:
        raise RequestsFileError(f"{path}: cannot be read ({e.strerror or e})") from None
    raise RequestsFileError(f"{path}: unknown requests file type {suffix or '(none)'!r}")


def read_requests(path: Path) -> list[dict]:
    """The requests file as step_requests rows (without run_id); a bad file raises RequestsFileError."""
    path = Path(path)
    if not path.is_file():
        raise RequestsFileError(f"--requests {path}: no such file")
    records = _records(path)
    if not records:
        raise RequestsFileError(f"{path}: no rows")
    rows = []
    seen: dict[tuple, int] = {}
    for line, record in records:
        where = f"line {line}" if path.suffix.lower() != ".json" else f"item {line}"
        missing = [c for c in ("step", "request_id") if record.get(c) in (None, "")]
        if missing:
            raise RequestsFileError(f"{path}: {where}: no {' and no '.join(missing)}")
        phase = record.get("phase")
        phase = phase.strip().lower() if isinstance(phase, str) and phase.strip() else None
        if phase not in (None, "prefill", "decode"):
            raise RequestsFileError(
                f"{path}: {where}: phase {record.get('phase')!r} is not prefill or decode"
            )
        row = {
            "rank": _integer(record.get("rank"), "rank", where, path),
            "step": _integer(record.get("step"), "step", where, path),
            "request_id": str(record["request_id"]).strip(),
            "tokens": _integer(record.get("tokens"), "tokens", where, path),
            "kv_tokens": _integer(record.get("kv_tokens"), "kv_tokens", where, path),
            "phase": phase,
            "line": line,
        }
        key = (row["rank"], row["step"], row["request_id"])
        if key in seen:
            raise RequestsFileError(
                f"{path}: {where}: request {row['request_id']!r} in step {row['step']} again "
                f"(first at {seen[key]})"
            )
        seen[key] = where
        rows.append(row)
    return rows


def write_requests(rows: list[dict], partition: Path) -> None:
    """Write (or replace) a run's step_requests file atomically: a reader sees the old rows or the new."""
    partition.mkdir(parents=True, exist_ok=True)
    partial = partition / f".{FILE_NAME}.{os.getpid()}.tmp"
    write_rows(TABLE, rows, partial)
    os.replace(partial, partition / FILE_NAME)


def write_empty(out_dir: Path) -> None:
    """The zero-row step_requests file of a run ingested without a requests file (and the schema partition)."""
    target = out_dir / TABLE
    if target.is_dir() and any(target.iterdir()):
        return
    write_requests([], target)


def attach_requests(warehouse, run_id: str, rows: list[dict]) -> dict[str, int]:
    """Store (replace) a stored run's step_requests; returns counts to tell the user: rows stored, and rows
    whose step (on their rank, or on any rank) the run does not have (kept, but they match no step)."""
    files = sql_string(str(warehouse.partition("step_spans", run_id) / "*.parquet"))
    with local_db.connect() as con:
        steps = set(con.execute(f"SELECT rank, step FROM read_parquet({files})").fetchall())
    any_rank = {step for _, step in steps}
    unmatched = sum(
        1
        for r in rows
        if (r["step"] not in any_rank if r["rank"] is None else (r["rank"], r["step"]) not in steps)
    )
    with warehouse.lock():
        write_requests(rows, warehouse.partition(TABLE, run_id))
    # what was derived of the run (a diff's per-request medians) is stale now: the next derive computes it
    forget_derived(warehouse, run_id)
    return {"rows": len(rows), "unmatched": unmatched}

"""What `tracehouse schema` prints: the queryable tables and views, and each one's columns with meaning.

Views carry their documentation as DuckDB comments (warehouse.docs, from each sql/ file's header);
the base tables list their columns and types, and their grain below (the column meanings of tables
are in docs/tables.md). Helpers (names starting with `_`) and rule tables are left out of the overview
but can be described by name.
"""

from __future__ import annotations

import duckdb
from tracehouse.warehouse.store import ALL_TABLES

from tracehouse.errors import TracehouseError

TABLE_GRAIN = {
    "runs": "one row per run: files, labels, framework, model, hardware, ranks, parallelism, capture mode, "
    "event counts, warnings (what was skipped or repaired, with counts), versions",
    "kernels": "one row per GPU activity (kernel, memcpy, memset) of a rank: device, stream, name, start_ns, "
    "dur_ns, launch call and site, step, phase, grid and block, collective sizes",
    "cpu_ops": "one row per host range event (cpu_op, user_annotation, cuda_runtime, cuda_driver, ...): "
    "thread, name, start_ns, dur_ns, parent, depth, correlation, input shapes",
    "python_frames": "one row per python_function event: file, line, function, parent frame, start_ns, dur_ns",
    "flows": "one row per flow (ac2g launch→kernel, fwdbwd, ...): source and destination events, kind",
    "streams": "one row per (run_id, rank, device, stream): name, activities, busy ns, first start, last end",
    "step_spans": "one row per (run_id, rank, step) marker found in the trace (ProfilerStep#N or the "
    "framework's own), with its host window",
    "kernel_sites": "one row per GPU activity replayed from a CUDA/HIP graph whose Python launch site came "
    "from a capture trace",
    "step_requests": "one row per (step, request) of a requests file given at ingest (--requests): rank "
    "(NULL: every rank), step, request_id, tokens, kv_tokens, phase, line in the file",
}


def _first_sentence(comment: str | None) -> str:
    """`one row per (run_id, phase, category)`: the grain, from the comment's `one row` on, up to the
    first `.` or `:` outside parentheses (an `i.e.` or `e.g.` does not end it)."""
    if not comment:
        return ""
    start = comment.lower().find("one row")
    text = comment[start:] if start >= 0 else comment
    depth = 0
    for i, ch in enumerate(text):
        depth += (ch == "(") - (ch == ")")
        if depth == 0 and ch in ".:" and (i + 1 == len(text) or text[i + 1] == " "):
            if text[max(0, i - 3) : i + 1].lower() in ("i.e.", "e.g."):
                continue
            return text[:i]
    return text


def overview(con: duckdb.DuckDBPyConnection) -> list[tuple[str, str, str]]:
    rows = [(t, "table", TABLE_GRAIN.get(t, "")) for t in ALL_TABLES]
    for name, comment in con.execute(
        # the catalogue's own views: a reader's temp view over kept rows (database `temp`) has the same name
        "SELECT view_name, comment FROM duckdb_views() WHERE NOT internal AND schema_name = 'main' "
        "AND database_name = current_database() ORDER BY view_name"
    ).fetchall():
        if name.startswith("_") or name in ALL_TABLES:
            continue
        rows.append((name, "view", _first_sentence(comment)))
    return rows


def describe(con: duckdb.DuckDBPyConnection, name: str) -> list[tuple[str, str, str]]:
    known = {
        r[0]
        for r in con.execute(
            "SELECT view_name FROM duckdb_views() WHERE NOT internal UNION SELECT table_name FROM duckdb_tables()"
        ).fetchall()
    }
    if name not in known:
        close = sorted(k for k in known if not k.startswith("_") and (name in k or k in name))
        public = sorted(k for k in known if not k.startswith("_"))
        raise TracehouseError(
            f"no table or view {name!r}",
            hint=(
                "did you mean " + ", ".join(close)
                if close
                else "`tracehouse schema` lists them: " + ", ".join(public[:12]) + ", ..."
            ),
        )
    rows = con.execute(
        "SELECT column_name, data_type, coalesce(comment, '') FROM duckdb_columns() "
        # the catalogue's own view: a reader's temp view over kept rows (database `temp`) has the same
        # name and columns, without their meanings
        "WHERE table_name = ? AND schema_name = 'main' AND database_name = current_database() "
        "ORDER BY column_index",
        [name],
    ).fetchall()
    comment = con.execute(
        "SELECT comment FROM duckdb_views() WHERE view_name = ? AND database_name = current_database() "
        "UNION ALL SELECT comment FROM duckdb_tables() WHERE table_name = ? AND database_name = current_database()",
        [name, name],
    ).fetchone()
    grain = TABLE_GRAIN.get(name) or (comment[0] if comment and comment[0] else "")
    return [("(row)", "", grain)] + [tuple(r) for r in rows]

"""Read-only ad-hoc SQL over the catalogue.

Two locks, so that either alone would hold: DuckDB's own parser must read the text as exactly one
read-only statement (a query, DESCRIBE, SHOW or SUMMARIZE; EXPLAIN of a query) whose syntax tree calls no
function that reads files and names no table by path, and the DuckDB connection it runs on cannot touch
files outside the warehouse nor change its settings (catalog.connect). (The check parsed with sqlglot
until its import, 0.05-0.2 s, was a third of a `tracehouse sql` process; DuckDB parses its own dialect.)
"""

from __future__ import annotations

import json

import duckdb
from tracehouse.warehouse import local_db, memory

from tracehouse.errors import QueryError, QueryRefused

_FILE_FUNCTIONS = {
    "read_csv",
    "read_csv_auto",
    "read_json",
    "read_json_auto",
    "read_json_objects",
    "read_ndjson",
    "read_ndjson_auto",
    "read_text",
    "read_blob",
    "read_parquet",
    "parquet_scan",
    "glob",
    "sniff_csv",
    "read_xlsx",
    "parquet_metadata",
    "parquet_schema",
    "parquet_file_metadata",
    "parquet_kv_metadata",
    "read_json_objects_auto",
    "read_ndjson_objects",
    "query_table",
    "query",
}
_parser: duckdb.DuckDBPyConnection | None = None


def _parse_connection() -> duckdb.DuckDBPyConnection:
    """An empty in-memory database of this process, only for parsing (it never sees the warehouse)."""
    global _parser
    if _parser is None:
        _parser = local_db.connect()
    return _parser


def check_read_only(sql: str, con: duckdb.DuckDBPyConnection | None = None) -> str:
    """Return the statement if it is one read-only query, else raise QueryRefused saying why
    (QueryError when it is not SQL). con: a connection to parse on (the one the query will run on: only
    its parser and json_serialize_sql are used); default, one of this module's own (a new DuckDB
    database costs a reader process 0.03-0.1 s)."""
    text = sql.strip().rstrip(";").strip()
    if not text:
        raise QueryRefused("empty query")
    con = con or _parse_connection()
    statements = _statements(con, text)
    if len(statements) != 1:
        raise QueryRefused("only one statement at a time" if statements else "empty query")
    kind = statements[0].type.name
    body = text
    if kind == "EXPLAIN":
        body = text.split(None, 1)[1] if len(text.split(None, 1)) == 2 else ""
        inner = _statements(con, body) if body.strip() else []
        if len(inner) != 1 or inner[0].type.name != "SELECT":
            raise QueryRefused("EXPLAIN is allowed of a query only")
    elif kind != "SELECT":  # MULTI: a statement DuckDB runs as several (PIVOT creates a type first)
        what = kind if kind != "MULTI" else text.split(None, 1)[0].upper()
        raise QueryRefused(f"{what} statements are not allowed")
    [(tree,)] = con.execute("SELECT json_serialize_sql(?)", [body]).fetchall()
    tree = json.loads(tree)
    if tree.get("error"):  # a query DuckDB parses but cannot write out: not checked, so not run
        raise QueryRefused(f"cannot check the query: {tree.get('error_message') or 'unknown'}")
    _check_tree(tree)
    return text


# the first words of statements that write, change settings or reach outside: one DuckDB cannot parse (a
# Spark SET, a DROP with a typo) is refused for what it is rather than reported as a syntax error to fix
_WRITE_WORDS = {
    "set",
    "reset",
    "insert",
    "update",
    "delete",
    "create",
    "drop",
    "alter",
    "copy",
    "attach",
    "detach",
    "install",
    "load",
    "pragma",
    "call",
    "export",
    "import",
    "vacuum",
    "checkpoint",
    "use",
    "begin",
    "commit",
    "rollback",
    "prepare",
    "execute",
    "deallocate",
    "merge",
    "truncate",
    "analyze",
    "grant",
    "revoke",
    "comment",
    "force",
    "update_extensions",
    "replace",
    "upsert",
}


def _statements(con: duckdb.DuckDBPyConnection, text: str) -> list:
    try:
        return con.extract_statements(text)
    except duckdb.Error as exc:
        first = (text.split(None, 1) or [""])[0].lower()
        if first in _WRITE_WORDS:
            raise QueryRefused(f"{first.upper()} statements are not allowed") from None
        raise QueryError(
            f"cannot parse the query: {duckdb_message(exc).removeprefix('Parser Error: ')}"
        ) from None


def _check_tree(node) -> None:
    """Refuse a syntax tree (json_serialize_sql's) that calls a function reading files or names a table by path."""
    todo = [node]
    while todo:
        item = todo.pop()
        if isinstance(item, list):
            todo.extend(item)
            continue
        if not isinstance(item, dict):
            continue
        name = item.get("function_name")
        if isinstance(name, str):
            name = name.lower()
            if name in _FILE_FUNCTIONS or name.startswith(("read_", "parquet_")):
                raise QueryRefused(f"{name}() reads files: query the warehouse's tables and views instead")
        if item.get("type") == "BASE_TABLE" and any(c in str(item.get("table_name", "")) for c in "/\\."):
            raise QueryRefused("reading files by path is not allowed: query the warehouse's tables and views")
        todo.extend(item.values())


def run_query(con: duckdb.DuckDBPyConnection, sql: str, limit: int | None = None):
    """Run one read-only query; returns (column names, rows). limit: fetch at most limit + 1 rows (one
    more than wanted tells the caller the query has more; `tracehouse mcp`'s row limit)."""
    text = check_read_only(sql, con)
    try:
        cursor = con.execute(text)
    except duckdb.PermissionException as exc:
        raise QueryRefused(duckdb_message(exc)) from None
    except duckdb.Error as exc:
        if memory.is_out_of_memory(exc):  # the setting to raise, not the schema, is the way out
            raise QueryError(memory.out_of_memory_line("the query"), hint="or ask for fewer rows") from None
        raise QueryError(duckdb_message(exc)) from None
    columns = [d[0] for d in cursor.description] if cursor.description else []
    return columns, (cursor.fetchall() if limit is None else cursor.fetchmany(limit + 1))


def duckdb_message(exc: Exception) -> str:
    """DuckDB's message on one line, with its hint (`Did you mean "kernels"?`) and without the echo of
    the query under it (`LINE 1: ...`, the caret line), which the user typed."""
    lines = []
    for line in str(exc).splitlines():
        if line.startswith("LINE ") or not line.strip():
            break
        lines.append(line.strip())
    return " ".join(lines) or type(exc).__name__

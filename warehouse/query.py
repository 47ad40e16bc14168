"""Read-only ad-hoc SQL over the catalogue.

Two locks, so that either alone would hold: sqlglot must parse the text as exactly one read-only
statement (a query, DESCRIBE, SHOW or SUMMARIZE; EXPLAIN of a query), and the DuckDB connection it
runs on cannot touch files outside the warehouse nor change its settings (catalog.connect).
"""

from __future__ import annotations

import logging

import duckdb
import sqlglot
from sqlglot import exp

from tracehouse.errors import QueryError, QueryRefused

_READ_ONLY = (exp.Select, exp.Union, exp.Intersect, exp.Except, exp.Describe, exp.Show, exp.Summarize)
_FILE_FUNCTIONS = {"read_csv", "read_csv_auto", "read_json", "read_json_auto", "read_json_objects",
                   "read_ndjson", "read_ndjson_auto", "read_text", "read_blob", "read_parquet", "parquet_scan",
                   "glob", "sniff_csv", "read_xlsx", "parquet_metadata", "parquet_schema", "parquet_file_metadata",
                   "parquet_kv_metadata", "read_json_objects_auto", "read_ndjson_objects", "query_table", "query"}

logging.getLogger("sqlglot").setLevel(logging.ERROR)


def check_read_only(sql: str) -> str:
    """Return the statement if it is one read-only query, else raise QueryRefused saying why."""
    text = sql.strip().rstrip(";").strip()
    if not text:
        raise QueryRefused("empty query")
    explain = text.split(None, 1)[0].lower() == "explain"
    body = text.split(None, 1)[1] if explain and " " in text else text
    try:
        statements = [s for s in sqlglot.parse(body, read="duckdb") if s is not None]
    except sqlglot.errors.SqlglotError as exc:
        raise QueryError(f"cannot parse the query: {_parser_message(body, exc)}") from None
    if len(statements) != 1:
        raise QueryRefused("only one statement at a time")
    statement = statements[0]
    if not isinstance(statement, _READ_ONLY):
        raise QueryRefused(f"{statement.key.upper()} statements are not allowed")
    for node in statement.walk():
        if isinstance(node, (exp.DML, exp.DDL, exp.Command, exp.Set, exp.Pragma, exp.Copy)):
            raise QueryRefused(f"{node.key.upper()} is not allowed inside a query")
        if isinstance(node, exp.Func):
            name = (node.name if isinstance(node, exp.Anonymous) else node.sql_name()).lower()
            if name in _FILE_FUNCTIONS or name.startswith(("read_", "parquet_")):
                raise QueryRefused(f"{name}() reads files: query the warehouse's tables and views instead")
        if isinstance(node, exp.Table) and any(c in node.name for c in "/\\.") :
            raise QueryRefused("reading files by path is not allowed: query the warehouse's tables and views")
    return text


def run_query(con: duckdb.DuckDBPyConnection, sql: str):
    """Run one read-only query; returns (column names, rows)."""
    text = check_read_only(sql)
    try:
        cursor = con.execute(text)
    except duckdb.PermissionException as exc:
        raise QueryRefused(duckdb_message(exc)) from None
    except duckdb.Error as exc:
        raise QueryError(duckdb_message(exc)) from None
    columns = [d[0] for d in cursor.description] if cursor.description else []
    return columns, cursor.fetchall()


def duckdb_message(exc: Exception) -> str:
    """DuckDB's message on one line, with its hint (`Did you mean "kernels"?`) and without the echo of
    the query under it (`LINE 1: ...`, the caret line), which the user typed."""
    lines = []
    for line in str(exc).splitlines():
        if line.startswith("LINE ") or not line.strip():
            break
        lines.append(line.strip())
    return " ".join(lines) or type(exc).__name__


def _parser_message(text: str, exc: Exception) -> str:
    """What is wrong with a query sqlglot cannot parse, in the user's terms: DuckDB's own parser says it
    (`syntax error at or near "selct"`) without running anything; sqlglot's internals
    (`Required keyword: 'expression' missing for <class ...>`) only when DuckDB parses it."""
    try:
        duckdb.connect(":memory:").extract_statements(text)
    except duckdb.Error as parse_error:
        return duckdb_message(parse_error).removeprefix("Parser Error: ")
    first = str(exc).splitlines()[0]
    return first if "<class" not in first else "the query is not valid SQL in DuckDB's dialect"

"""Read-only ad-hoc SQL over the catalogue.

Two locks, so that either alone would hold: sqlglot must parse the text as exactly one read-only
statement (SELECT / WITH / UNION / DESCRIBE / SHOW / EXPLAIN / SUMMARIZE), and the DuckDB connection
it runs on cannot touch files outside the warehouse nor change its own settings (catalog.connect).
"""

from __future__ import annotations

import duckdb
import sqlglot
from sqlglot import exp

from errors import QueryError, QueryRefused

_READ_ONLY = (exp.Select, exp.Union, exp.Intersect, exp.Except, exp.Describe, exp.Show)
_WRITES = (exp.Insert, exp.Update, exp.Delete, exp.Create, exp.Drop, exp.Alter, exp.Merge, exp.Copy,
           exp.Set, exp.Command, exp.Attach, exp.Detach, exp.Use, exp.Pragma, exp.TruncateTable, exp.Export)
_FILE_FUNCTIONS = {"read_csv", "read_csv_auto", "read_json", "read_json_auto", "read_json_objects",
                   "read_ndjson", "read_text", "read_blob", "read_parquet", "parquet_scan", "glob",
                   "sniff_csv", "read_xlsx", "parquet_metadata", "parquet_schema", "read_json_objects_auto"}


def check_read_only(sql: str) -> str:
    """Return the statement if it is one read-only query, else raise QueryRefused saying why."""
    text = sql.strip().rstrip(";").strip()
    if not text:
        raise QueryRefused("empty query")
    lowered = text.split(None, 1)[0].lower()
    if lowered in ("summarize", "explain", "describe", "show"):
        inner = text.split(None, 1)[1] if " " in text else ""
        if lowered in ("describe", "show") and not inner:
            return text
        if lowered in ("summarize", "explain") or inner.lower().startswith(("select", "with", "from")):
            check_read_only(inner) if inner.lower().startswith(("select", "with", "from")) else None
            return text
    try:
        statements = [s for s in sqlglot.parse(text, read="duckdb") if s is not None]
    except sqlglot.errors.ParseError as exc:
        raise QueryError(f"cannot parse the query: {str(exc).splitlines()[0]}")
    if len(statements) != 1:
        raise QueryRefused("only one statement at a time")
    statement = statements[0]
    if isinstance(statement, _WRITES) or not isinstance(statement, _READ_ONLY):
        raise QueryRefused(f"{statement.key.upper()} statements are not allowed")
    for node in statement.walk():
        if isinstance(node, _WRITES):
            raise QueryRefused(f"{node.key.upper()} is not allowed inside a query")
        if isinstance(node, (exp.Anonymous, exp.Func)):
            name = (node.name if isinstance(node, exp.Anonymous) else node.sql_name()).lower()
            if name in _FILE_FUNCTIONS:
                raise QueryRefused(f"{name}() reads files: query the warehouse's tables and views instead")
        if isinstance(node, exp.Table) and ("/" in node.name or "." in node.name and node.name.endswith(
                ("csv", "json", "parquet", "txt", "gz"))):
            raise QueryRefused("reading files by path is not allowed: query the warehouse's tables and views")
    return text


def run_query(con: duckdb.DuckDBPyConnection, sql: str):
    """Run one read-only query; returns (column names, rows)."""
    text = check_read_only(sql)
    try:
        cursor = con.execute(text)
    except duckdb.PermissionException as exc:
        raise QueryRefused(str(exc).splitlines()[0])
    except duckdb.Error as exc:
        raise QueryError(str(exc).splitlines()[0])
    columns = [d[0] for d in cursor.description] if cursor.description else []
    return columns, cursor.fetchall()

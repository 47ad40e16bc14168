"""A long-lived reader: one catalogue connection for many questions (the Python API, `tracehouse shell`,
`tracehouse sql` reading queries from stdin), so that a repeated question costs its query, not a process,
its imports and a catalogue.

    from tracehouse.warehouse.session import Session
    with Session("./tracehouse-data") as th:
        columns, rows = th.sql("select name, gpu_time_ns from kernel_summary order by 2 desc limit 5")
        table = th.arrow("select * from kernels where run_id = ?", ["3f2a9c..."])   # a pyarrow Table

Queries are read-only, checked as `tracehouse sql` checks them (warehouse.query), on a connection locked
down as every reader's (catalog.connect). The base views list the warehouse's files when a query runs,
so a session sees the runs ingested by other processes since it opened, without reopening.
"""

from __future__ import annotations

from pathlib import Path

import duckdb
from tracehouse.warehouse import local_db
from tracehouse.warehouse.catalog import connect, kept_signature, refresh_kept
from tracehouse.warehouse.query import check_read_only, duckdb_message, run_query
from tracehouse.warehouse.store import Warehouse

from tracehouse.errors import QueryError, QueryRefused, TracehouseError


class Session:
    def __init__(self, warehouse: str | Path | Warehouse, runs: list[str] | None = None) -> None:
        self.warehouse = warehouse if isinstance(warehouse, Warehouse) else Warehouse(warehouse)
        if not self.warehouse.exists():
            raise TracehouseError(
                f"no warehouse at {self.warehouse.root}",
                hint="check the path, or create one with `tracehouse ingest PATH`",
            )
        self.runs = runs
        self.con = connect(self.warehouse, runs=runs)
        self.kept = kept_signature(self.con)

    def refresh(self) -> None:
        """The per-run views read the rows kept since the session opened (catalog.refresh_kept), and
        compute the runs published since."""
        self.kept = refresh_kept(self.con, self.kept)

    def sql(self, query: str, limit: int | None = None) -> tuple[list[str], list[tuple]]:
        """One read-only query: (column names, rows); limit: at most limit + 1 rows (warehouse.query)."""
        self.refresh()
        return run_query(self.con, query, limit)

    def arrow(self, query: str, params: list | None = None):
        """One read-only query (with ? parameters) as a pyarrow Table."""
        text = check_read_only(query, self.con)
        self.refresh()
        try:
            return self.con.sql(text, params=params or None).to_arrow_table()
        except duckdb.PermissionException as exc:
            raise QueryRefused(duckdb_message(exc)) from None
        except duckdb.Error as exc:
            raise QueryError(duckdb_message(exc)) from None

    def close(self) -> None:
        self.con.close()

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def split_statements(text: str, con: duckdb.DuckDBPyConnection | None = None) -> list[str]:
    """The statements of a script, one per `;` outside strings and comments (DuckDB's own splitter, on
    `con` or an empty database of its own); an empty script gives []. A script DuckDB cannot split is one
    statement, so that the check says why."""
    if not text.strip():
        return []
    try:
        statements = (con or local_db.connect()).extract_statements(text)
    except duckdb.Error:
        return [text.strip()]
    # each statement's own text, as typed (DuckDB's query attribute)
    return [s.query.strip() for s in statements if s.query.strip()]

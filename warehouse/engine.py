"""The one connection factory: every report and command reads the warehouse through `open`.

    con = engine.open(warehouse, "duckdb" | "spark", runs=None, master=None)

returns a `Connection`: DuckDB's client surface, the one the reports are written against:
`execute(sql, params)` (DuckDB's dialect; `?`, `$name`, `$1` parameters) then `fetchall()`,
`fetchone()`, `description`; `sql(...)` with an Arrow table; `close()`. DuckDB answers it itself;
Spark answers it through `warehouse.spark_connection.SparkConnection` (every query transpiled by
sqlglot, the views of sql/ built on the SparkSession when first read). Both see the same tables and
views, with the same rows (tests/test_spark.py).

What differs between engines is decided in this module and nowhere else (tests/test_layers.py fails on
an engine branch, a `duckdb.connect` or a Spark builder outside warehouse/):

- `focused(con, runs)`: the connection's views computed for these runs only while a report, a diff or a
  trend reads them (DuckDB: a variable of the connection, given back after; Spark: a catalogue is focused
  when it is made, so an unfocused one gets a focused, materialized companion on the same application);
- `step_scope(con, key)`: while one step's section is read, its critical path is read kept or computed
  once for that step (DuckDB; Spark computes each view once per connection anyway);
- `store_of(con)`: the warehouse whose per-run metrics (warehouse.metrics: kept rows of run_metrics) may
  answer for the connection: a DuckDB connection's own warehouse, and None for another engine, which
  computes every figure itself;
- `run_query(con, text)`: one read-only ad-hoc query (`tracehouse sql`), refused alike on both engines;
- `open_tables(tables, views)`: rows that are not a warehouse (a rule of sql/ evaluated over rows made
  elsewhere: the trend's regression rule over synthesized metrics).

Adding an engine: a class answering DuckDB's client surface above (as SparkConnection does, with a
`focused(runs)` context manager and a `query(text)` method), an `_open_<name>` here and its name in
ENGINES; the CLI's `--engine` choices are ENGINES.

The builders below this module (`catalog.connect`, `catalog.connect_base`, `catalog.build_catalog`,
`spark.connect_spark`, `spark_connection.spark_connection`) stay the warehouse's own: the derive
(warehouse/derived.py) and warehouse/metrics.py open their working connections with them, and tests
that study a few views build just those; nothing in reports/, ingest/ or the CLI calls them. Opening a
connection never writes: the derived store is written by warehouse.derived.derive alone.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Protocol

import duckdb
from tracehouse.warehouse import local_db
from tracehouse.warehouse.catalog import FOCUS, ROOT, connect, focus, materialize, read_kept, view_files
from tracehouse.warehouse.query import run_query as run_duckdb_query
from tracehouse.warehouse.store import Warehouse

from tracehouse.errors import TracehouseError

if TYPE_CHECKING:  # pragma: no cover
    import pyarrow as pa

ENGINES = ("duckdb", "spark")


class Connection(Protocol):
    """What every report and command may ask of a connection: DuckDB's client surface."""

    description: Any

    def execute(self, sql: str, parameters: Any = None) -> Any: ...

    def sql(self, sql: str, params: Any = None) -> Any: ...

    def fetchall(self) -> list[tuple]: ...

    def fetchone(self) -> tuple | None: ...

    def close(self) -> None: ...


def open(
    warehouse: Warehouse | str,
    engine: str = "duckdb",
    runs: list[str] | None = None,
    *,
    master: str | None = None,
    rules_file: str | None = None,
    settings: dict[str, str] | None = None,
) -> Connection:
    """A connection to every table and view of the warehouse, read-only (it can read nothing else).

    warehouse: a Warehouse, or a URI string (`s3a://bucket/wh`, `gs://...`, `hdfs://...`) for an engine
    that reads one (Spark).
    runs: see only these runs (every table and view); None: every run.
    master: the Spark master URL (engine spark; default local[2]).
    rules_file: a kernel category rules file whose rules come before the shipped ones.
    settings: DuckDB settings made before the lockdown (memory_limit, temp_directory, ...); an engine
    without them ignores them.
    DuckDB: the per-run views read their kept rows for the runs that are derived (catalog.read_kept) and
    compute the others; nothing is written. Spark computes each view once for a focused connection.

    An unknown engine, a URI to an engine that reads local folders only, or an engine that cannot start
    (no pyspark, no Java) is a TracehouseError: one line and a hint.
    """
    if engine not in ENGINES:
        raise TracehouseError(f"unknown engine {engine!r}", hint="choose " + " or ".join(ENGINES))
    runs = None if runs is None else list(runs)
    if engine == "spark":
        return _open_spark(warehouse, runs, master, rules_file)
    return _open_duckdb(warehouse, runs, rules_file, settings)


def is_uri(root: str) -> bool:
    """A warehouse named by a URI (s3a://, gs://, hdfs://, file://) rather than a local folder."""
    return "://" in str(root)


def _open_duckdb(
    warehouse: Warehouse | str,
    runs: list[str] | None,
    rules_file: str | None,
    settings: dict[str, str] | None,
) -> duckdb.DuckDBPyConnection:
    if isinstance(warehouse, str):
        if is_uri(warehouse):
            raise TracehouseError(
                f"no warehouse at {warehouse}: the DuckDB engine reads a local folder",
                hint="--engine spark reads s3a://, gs:// and hdfs:// warehouses",
            )
        warehouse = Warehouse(warehouse)
    return connect(warehouse, rules_file=rules_file, runs=runs, settings=settings)


def open_resolved(
    warehouse: Warehouse | str,
    engine: str,
    resolve: Callable[[Connection], tuple],
    *,
    master: str | None = None,
    settings: dict[str, str] | None = None,
    before_reading: Callable[[Warehouse, list[str]], None] | None = None,
) -> tuple[Connection, tuple]:
    """A report's connection for the runs that `resolve` finds on a connection over every run, and what it
    found (None entries are no run).

    DuckDB: one connection, resolved on, then `before_reading(warehouse, runs)` (a report derives its runs
    there: warehouse.derived), then focused on the runs, which reads their kept rows (catalog.focus).
    Spark's connection is focused when it is made: a lookup connection first, then the report's."""
    if engine == "duckdb" and not is_uri(str(warehouse)):
        store = warehouse if isinstance(warehouse, Warehouse) else Warehouse(str(warehouse))
        # no kept rows read before the focus (resolve reads the runs table): read_kept once, for the runs
        con = connect(store, settings=settings, kept=False) if store.root.is_dir() else open(store, engine)
        try:
            found = resolve(con)
            runs = [r for r in found if r]
            if before_reading is not None:
                before_reading(store, runs)
            focus(con, runs)
            read_kept(con, store)
        except BaseException:
            con.close()
            raise
        return con, found
    lookup = open(warehouse, engine, master=master)
    try:
        found = resolve(lookup)
    finally:
        lookup.close()
    return open(warehouse, engine, [r for r in found if r], master=master, settings=settings), found


def _open_spark(
    warehouse: Warehouse | str, runs: list[str] | None, master: str | None, rules_file: str | None
):
    from tracehouse.warehouse.spark import (
        SparkUnavailable,  # pyspark stays optional: imported only for this engine
    )
    from tracehouse.warehouse.spark_connection import spark_connection

    try:
        # focused on runs: a report's or a diff's connection, asked many questions of the same views, each
        # computed once; over every run (a lookup, a query), each query plans from the files
        return spark_connection(
            warehouse, runs=runs, master=master, materialize=runs is not None, rules_file=rules_file
        )
    except SparkUnavailable as exc:
        raise TracehouseError(str(exc), hint="or use --engine duckdb") from None


@contextmanager
def focused(con: Connection, runs: list[str], compute_once: bool = False) -> Iterator[Connection]:
    """`con`, or a connection of the same engine, seeing only these runs while the block reads it.

    DuckDB: the connection's focus (catalog.focus: a variable the base views filter on, so every per-run
    view computes these runs only), given back after. With compute_once (a report, a diff: many questions
    of the same runs), the per-run views of runs not derived are computed once for the block, in the
    derive's order (warehouse.derived.compute_once), rather than by each query that reads them (a whole
    live report of a small run: 16 s -> 3 s). Spark: a catalogue is focused and materialized when it is
    made (SparkConnection.focused)."""
    if isinstance(con, duckdb.DuckDBPyConnection):
        from tracehouse.warehouse.derived import compute_once as computed_for_block
        from tracehouse.warehouse.derived import drop_computed

        before = con.execute(f"SELECT getvariable('{FOCUS}')").fetchone()[0]
        # focused on these runs already (a report's connection): no focus again (each reads the kept rows'
        # listing and makes every per-run view anew)
        same = before is not None and set(before) == set(runs)
        if not same:
            focus(con, list(runs))
        made: list[str] = []
        try:
            if compute_once:
                made = computed_for_block(con, list(runs))
            yield con
        finally:
            drop_computed(con, made)
            if made or not same:  # a kept view that compute_once replaced is made again
                focus(con, before)
        return
    with con.focused(list(runs)) as inner:
        yield inner


@contextmanager
def step_scope(con: Connection, key: list) -> Iterator[None]:
    """While the block reads one (run_id, rank, step): DuckDB reads the step's critical path kept (a derived
    run) or computes it once for that step (warehouse.stored.scope_step_views). Spark
    computes each view once per connection already: nothing to do."""
    if not isinstance(con, duckdb.DuckDBPyConnection):
        yield
        return
    from tracehouse.warehouse.stored import scope_step_views, unscope

    scoped = scope_step_views(con, key)
    try:
        yield
    finally:
        unscope(con, scoped)


def store_of(con: Connection) -> Warehouse | None:
    """The warehouse whose kept run_metrics (warehouse.metrics) may answer for `con`: a DuckDB connection's
    own warehouse; None for another engine (and for open_tables' rows), which computes every figure on
    the connection."""
    if not isinstance(con, duckdb.DuckDBPyConnection):
        return None
    root = con.execute(f"SELECT getvariable('{ROOT}')").fetchone()[0]
    return Warehouse(root) if root else None


def answers_in_session(engine: str) -> bool:
    """Whether this engine's ad-hoc queries (`tracehouse sql`) are answered by a warehouse.session.Session
    (DuckDB: one catalogue connection, opened at once, whose running query can be cancelled) rather than
    by open()'s connection (Spark starts a JVM, which a refused query must not pay for)."""
    return engine == "duckdb"


def run_query(con: Connection, text: str) -> tuple[list[str], list[tuple]]:
    """One read-only query in DuckDB's dialect (warehouse.query.check_read_only refuses the rest, on every
    engine): (column names, rows)."""
    if isinstance(con, duckdb.DuckDBPyConnection):
        return run_duckdb_query(con, text)
    return con.query(text)


def open_tables(
    tables: dict[str, pa.Table],
    views: list[str] | tuple[str, ...] = (),
    computed: list[str] | tuple[str, ...] = (),
) -> duckdb.DuckDBPyConnection:
    """A DuckDB of these rows rather than of a warehouse: each Arrow table as a table of its name, then these
    views of sql/ over them, created in the order given (a view after the views it reads); the views in
    `computed` are computed once and kept (catalog.materialize), for views that later ones read many
    times. The same view files as the catalogue's, so a rule has one definition whatever rows it reads."""
    con = local_db.connect()
    for name, table in tables.items():
        # one chunk: a table read from a thousand per-run files has a thousand, and DuckDB scans many small
        # Arrow chunks slowly
        con.register("tracehouse_rows_in", table.combine_chunks())
        try:
            con.execute(f'CREATE TABLE "{name}" AS SELECT * FROM tracehouse_rows_in')
        finally:
            con.unregister("tracehouse_rows_in")
    files = view_files()
    for name in views:
        con.execute(files[name].read_text())
    materialize(con, [v for v in views if v in computed])
    return con

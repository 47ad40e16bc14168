"""A DuckDB-like connection over the Spark catalogue, for the report builders (`--engine spark`).

The run, trend and diff reports are written against a DuckDB connection: `con.execute(sql, params)`,
then `fetchall()`, `fetchone()`, `description` or an Arrow table, with `?` / `$name` parameters, in
DuckDB's dialect. `SparkConnection` answers the same calls on a `SparkCatalog`, so the builders run
unchanged on Spark. Each query, in order:

1. parameters are bound as SQL literals, written by sqlglot from the Python values (never pasted
   text): `?` in order, `$name` from a dict, `$1` by position; a list becomes a list literal;
2. `getvariable('tracehouse_root' | 'tracehouse_runs')` becomes the warehouse / the focused runs;
3. the sql/ views it reads are added to the catalogue (each once; computed once when materialized);
4. it is transpiled (`spark.to_spark_sql`) and run; a Spark error becomes a `QueryError`.

DuckDB's catalogue functions (`duckdb_views()`, `duckdb_tables()`) are not emulated: every view of sql/
exists on both engines (a view that this Spark cannot build fails the query that reads it, naming it),
so no report asks which views exist. Opened by `warehouse.engine.open(..., engine="spark")`, the one
connection factory.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import sqlglot
from sqlglot import exp
from sqlglot.tokens import TokenType
from tracehouse.warehouse.catalog import FOCUS, ROOT

if TYPE_CHECKING:  # pragma: no cover
    import pyarrow as pa
    from pyspark.sql import SparkSession
    from tracehouse.warehouse.spark import SparkCatalog
    from tracehouse.warehouse.store import Warehouse

_DUCKDB = sqlglot.Dialect.get_or_raise("duckdb")


def bind_parameters(sql: str, params: list | tuple | dict | None) -> str:
    """`sql` with its `?`, `$name` and `$N` parameters replaced by literals of the values (DuckDB dialect).

    Found with sqlglot's DuckDB tokenizer, so a `?` or `$x` inside a string or a comment stays as it is.
    """
    if not params:
        return sql
    tokens = _DUCKDB.tokenize(sql)
    out, pos, position = [], 0, 0
    i = 0
    while i < len(tokens):
        token = tokens[i]
        if token.token_type == TokenType.PLACEHOLDER and token.text == "?":
            if isinstance(params, dict):
                raise ValueError("a ? parameter needs a list of values, not a dict")
            if position >= len(params):
                raise ValueError(f"the query has more ? than the {len(params)} values given")
            value, end = params[position], token.end
            position += 1
        elif (
            token.token_type == TokenType.PARAMETER
            and i + 1 < len(tokens)
            and tokens[i + 1].start == token.end + 1
        ):
            key = tokens[i + 1].text
            value = params[int(key) - 1] if key.isdigit() and not isinstance(params, dict) else params[key]
            end = tokens[i + 1].end
            i += 1
        else:
            i += 1
            continue
        out += [sql[pos : token.start], _literal(value)]
        pos = end + 1
        i += 1
    if not isinstance(params, dict) and position and position != len(params):
        raise ValueError(f"{len(params)} values given for {position} ? parameters")
    return "".join(out) + sql[pos:]


def _literal(value: Any) -> str:
    if isinstance(value, (dt.datetime, dt.date)):
        kind = "TIMESTAMP" if isinstance(value, dt.datetime) else "DATE"
        return f"{kind} {exp.convert(value.isoformat(sep=' ') if kind == 'TIMESTAMP' else value.isoformat()).sql('duckdb')}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_literal(v) for v in value) + "]"
    return exp.convert(value).sql(dialect="duckdb")


def _python(value: Any, kind: pa.DataType) -> Any:
    """An Arrow value as DuckDB's Python client gives it: maps as dicts (in their order), structs as dicts."""
    import pyarrow as pa

    if value is None:
        return None
    if pa.types.is_map(kind):
        return {k: _python(v, kind.item_type) for k, v in value}
    if pa.types.is_struct(kind):
        return {f.name: _python(value[f.name], f.type) for f in kind}
    if pa.types.is_list(kind) or pa.types.is_large_list(kind):
        return [_python(v, kind.value_type) for v in value]
    return value


class SparkResult:
    """The result of one query: DuckDB's cursor surface (fetchall, fetchone, description, Arrow).

    Rows come through Arrow, not Row objects: Spark's Python rows turn maps into dicts of a Java HashMap's
    order, where DuckDB (and Arrow) keep the stored order; timestamps stay UTC-aware, as TIMESTAMPTZ."""

    def __init__(self, frame):
        self._frame = frame
        self._table: pa.Table | None = None
        self._rows: list[tuple] | None = None
        self._next = 0
        self.description = [
            (f.name, f.dataType.simpleString(), None, None, None, None, None) for f in frame.schema.fields
        ]

    def _all(self) -> list[tuple]:
        if self._rows is None:
            table = self.to_arrow_table()
            columns = [[_python(v, col.type) for v in col.to_pylist()] for col in table.columns]
            self._rows = list(zip(*columns)) if columns else []
        return self._rows

    def fetchall(self) -> list[tuple]:
        rows = self._all()[self._next :]
        self._next = len(self._all())
        return rows

    def fetchone(self) -> tuple | None:
        rows = self._all()
        if self._next >= len(rows):
            return None
        self._next += 1
        return rows[self._next - 1]

    def fetchmany(self, size: int = 1) -> list[tuple]:
        rows = self._all()[self._next : self._next + size]
        self._next += len(rows)
        return rows

    def to_arrow_table(self) -> pa.Table:
        if self._table is None:
            self._table = self._frame.toArrow()
        return self._table

    fetch_arrow_table = arrow = to_arrow_table


class SparkConnection:
    """The part of a DuckDB connection that reports use, answered by Spark over a SparkCatalog."""

    def __init__(
        self, catalog: SparkCatalog, variables: dict[str, Any] | None = None, rules_file: str | None = None
    ):
        self.catalog = catalog
        self.variables = dict(variables or {})
        self.rules_file = rules_file
        self._last: SparkResult | None = None

    # --- DuckDB's connection surface ---------------------------------------------------------------
    def execute(self, sql: str, parameters: list | tuple | dict | None = None) -> SparkResult:
        self._last = SparkResult(self._frame(sql, parameters))
        return self._last

    def sql(self, sql: str, params: list | tuple | dict | None = None) -> SparkResult:
        return self.execute(sql, params)

    @property
    def description(self):
        return self._last.description if self._last else None

    def fetchall(self) -> list[tuple]:
        return self._last.fetchall()

    def fetchone(self) -> tuple | None:
        return self._last.fetchone()

    def close(self) -> None:
        """The session stays up (it may be shared); its catalogue is left as it is."""

    # --- what warehouse.engine asks of an engine's connection -------------------------------------
    @contextmanager
    def focused(self, runs: list[str]) -> Iterator[SparkConnection]:
        """A connection that sees only these runs (warehouse.engine.focused). A Spark catalogue is focused
        when it is made: this connection itself where it already sees only some of them, or has computed
        every view (a materialized catalogue: focusing would only compute them again); else a new
        connection focused on the runs, each view computed once for them, on a new session of the same
        Spark application."""
        mine, root = self.variables.get(FOCUS), self.variables.get(ROOT)
        if (mine is not None and set(runs) <= set(mine)) or self.catalog.materialize or root is None:
            yield self
            return
        yield spark_connection(
            root, runs=sorted(set(runs)), spark=self.catalog.session, rules_file=self.rules_file
        )

    def query(self, text: str) -> tuple[list[str], list[tuple]]:
        """One read-only ad-hoc query (`tracehouse sql`): DuckDB's read-only check first, then the views it
        reads added to the catalogue, then spark.run_query_spark."""
        from tracehouse.warehouse.query import check_read_only
        from tracehouse.warehouse.spark import needed_views, run_query_spark

        check_read_only(text)  # refused before any view is built
        self.catalog.add_views(needed_views(text))
        return run_query_spark(self.catalog, text)

    # --- translation -------------------------------------------------------------------------------
    def _frame(self, sql: str, parameters):
        from tracehouse.warehouse.spark import READ_DIALECT, first_line, needed_views, to_spark_sql

        from tracehouse.errors import QueryError

        try:
            statement = sqlglot.parse_one(bind_parameters(sql, parameters), read=READ_DIALECT)
        except (ValueError, KeyError, IndexError, sqlglot.errors.SqlglotError) as exc:
            raise QueryError(f"cannot bind this query's parameters: {exc}") from None
        statement = statement.transform(self._duckdb_functions)
        self.catalog.add_views(needed_views(statement))
        for table in statement.find_all(exp.Table):
            if table.name in self.catalog.unavailable:
                raise QueryError(
                    f"view {table.name} is not available on Spark: {self.catalog.unavailable[table.name]}"
                )
        try:
            return self.catalog.session.sql(to_spark_sql(statement))
        except ValueError as exc:  # no faithful Spark form (spark_dialect._spark_transforms)
            raise QueryError(f"cannot run this query on Spark: {exc}") from None
        except Exception as exc:  # pyspark's AnalysisException, ParseException, Py4JJavaError ...
            if type(exc).__module__.startswith(("pyspark", "py4j")):
                raise QueryError(first_line(exc)) from None
            raise

    def _duckdb_functions(self, node: exp.Expression) -> exp.Expression:
        """getvariable(...): DuckDB's connection state (the warehouse, the focused runs), as literals for Spark."""
        if isinstance(node, exp.Anonymous) and node.name.lower() == "getvariable" and node.expressions:
            key = node.expressions[0]
            if isinstance(key, exp.Literal) and key.is_string and key.name in self.variables:
                return sqlglot.parse_one(_literal(self.variables[key.name]), read="duckdb")
            return exp.null()
        return node


def spark_connection(
    warehouse: Warehouse | str,
    runs: list[str] | None = None,
    master: str | None = None,
    spark: SparkSession | None = None,
    materialize: bool = True,
    rules_file: str | None = None,
) -> SparkConnection:
    """A SparkConnection over the warehouse (a Warehouse or a URI), focused on `runs` when given.

    Each connection has its own catalogue: a new session (spark.new_session) of the Spark application
    of `spark`, else of `spark_session(master)`. Views are made when a query first reads them;
    materialize (the default, as a report asks many questions of the same views): each is computed
    once, for the connection's runs, and then read as rows; the base tables too when focused on a
    few runs (FEW_RUNS: a whole history's are read from Parquet again rather than held in memory).
    Called by warehouse.engine.open, the one connection factory.
    """
    from tracehouse.warehouse.spark import connect_spark, new_session, spark_session

    session = new_session(spark or spark_session(master))
    tables = materialize and runs is not None and len(runs) <= FEW_RUNS
    catalog = connect_spark(
        warehouse,
        rules_file=rules_file,
        spark=session,
        materialize=materialize,
        only=set(),
        runs=runs,
        materialize_tables=tables,
    )
    root = warehouse if isinstance(warehouse, str) else str(warehouse.root)
    return SparkConnection(catalog, {ROOT: root, FOCUS: list(runs) if runs is not None else None}, rules_file)


# A materialized connection focused on at most this many runs (a report, a diff) keeps their base tables'
# rows too; a longer list (a trend's history) reads them from Parquet again rather than holding them in memory.
FEW_RUNS = 8

"""The same catalogue on Spark: base tables over the same Parquet folders, the views of sql/ transpiled.

`connect_spark(warehouse)` builds, in a SparkSession, what `catalog.connect` builds in DuckDB:

1. one temporary view per base table over `<warehouse>/tables/<table>/` (plain Hive layout: `run_id`
   comes from the folder name and stays a string), without the zero-row `run_id=_schema` partition, and
   with the same visibility rule: a run is visible only once its `runs` row exists;
2. the rule tables (`category_rules`, `fusion_patterns`, `fusion_pattern_steps`, `launch_site_rules`) from the same Arrow
   tables that DuckDB registers;
3. every view of sql/, in the same dependency order (`catalog.ordered_views`), transpiled by sqlglot from
   the DuckDB dialect to Spark's, as a temporary view.

The views are written once, in DuckDB's dialect, in a form both engines accept. What sqlglot does not
translate by itself, and that is a systematic dialect difference rather than a view's choice, is fixed
by warehouse.spark_dialect (each transform says what it fixes); nothing here is view-specific.

The warehouse path may be any URI that Spark's Hadoop file system reads (`s3a://bucket/wh`,
`gs://bucket/wh`, `hdfs://...`): the layout is plain Hive partitions; listing the partitions then goes
through Hadoop instead of the local file system.
"""

from __future__ import annotations

import functools
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import sqlglot
from sqlglot import exp
from tracehouse.warehouse.catalog import (
    SCHEMA_PARTITION,
    ensure_schema_files,
    ordered_views,
    sql_path,
    view_dependencies,
    view_files,
)
from tracehouse.warehouse.fusion import load_fusion_catalog
from tracehouse.warehouse.peaks import load_device_peaks, user_peaks_file
from tracehouse.warehouse.query import check_read_only
from tracehouse.warehouse.rules import load_category_rules, load_one_time_rules
from tracehouse.warehouse.site_rules import load_site_rules, user_site_rules_file
from tracehouse.warehouse.spark_dialect import READ_DIALECT, to_spark_sql
from tracehouse.warehouse.store import ALL_TABLES

from tracehouse.errors import QueryError, QueryRefused, SparkUnavailable

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import SparkSession
    from tracehouse.warehouse.store import Warehouse

DEFAULT_MASTER = "local[2]"


# SQL settings the views rely on, set on every session (also on `new_session`'s)
SESSION_CONF = {
    # run_id stays a string ('0a1b...' would otherwise be read as a number or a date)
    "spark.sql.sources.partitionColumnTypeInference.enabled": "false",
    "spark.sql.session.timeZone": "UTC",
    # DuckDB's semantics where Spark 4's ANSI default differs: x / 0 is NULL, not an error
    "spark.sql.ansi.enabled": "false",
    # DuckDB's len(NULL list) is NULL; Spark's size(NULL) is -1 unless this is off
    "spark.sql.legacy.sizeOfNull": "false",
    # critical_path walks a step's dependency chain with a recursive CTE: one level per node, and a
    # step has thousands (Spark's default stops at 100; DuckDB has no limit)
    "spark.sql.cteRecursionLevelLimit": "1000000",
    "spark.sql.cteRecursionRowLimit": "1000000000",
    # a temporary view keeps its analyzed plan, not its SQL text: a view reading others is then analyzed
    # once, not again at every reference (steps reads _kernel_facts, which reads kernel_category ...: on a
    # view case, making _kernel_facts and steps took 7.4 and 11.6 s, then 2.8 and 3.2 s); the views are
    # never redefined under the views that read them: each is made once, after what it reads
    "spark.sql.legacy.storeAnalyzedPlanForView": "true",
}


def spark_session(
    master: str | None = None, app_name: str = "tracehouse", conf: dict[str, str] | None = None
) -> SparkSession:
    """A SparkSession set up the way the views need it (also on a cluster: pass its master URL).

    master: `local[N]`, `spark://host:7077`, `yarn`, `k8s://...`; default $SPARK_MASTER, else local[2].
    Under spark-submit (a master already set in the Spark conf) the submitted session is reused.
    conf: more settings, applied last (how it executes, e.g. SMALL_DATA_CONF; never what the views mean).
    """
    try:
        from pyspark.sql import SparkSession
    except ImportError as exc:
        raise SparkUnavailable(
            "pyspark is not installed: pip install 'tracehouse[spark]' (needs Java 17+)"
        ) from exc
    master = master or os.environ.get("SPARK_MASTER") or None
    builder = SparkSession.builder.appName(app_name)
    if master:
        builder = builder.master(master)
    elif "SPARK_HOME" not in os.environ and "PYSPARK_SUBMIT_ARGS" not in os.environ:
        builder = builder.master(DEFAULT_MASTER)
    local = (master or DEFAULT_MASTER).startswith("local")
    for key, value in SESSION_CONF.items():
        builder = builder.config(key, value)
    builder = builder.config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
    if local:  # small shuffles; the analyzer needs more than the default 1g for the deepest views
        builder = (
            builder.config("spark.sql.shuffle.partitions", "4")
            .config("spark.default.parallelism", "4")
            .config("spark.driver.memory", os.environ.get("SPARK_DRIVER_MEMORY", "2g"))
        )
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    try:
        session = builder.getOrCreate()
    except Exception as exc:  # Java missing or failing to start
        raise SparkUnavailable(f"cannot start Spark (is Java 17+ installed and on PATH?): {exc}") from exc
    session.sparkContext.setLogLevel("ERROR")
    for name in ("SQLQueryContextLogger", "DataFrameQueryContextLogger"):  # each failed query, as JSON
        logging.getLogger(name).disabled = True
    return session


# How Spark executes queries over a few rows (the tests' view cases and small runs), never what they mean:
# one partition a shuffle, no adaptive re-planning, no generated code. On six view cases of the test
# suite (session 26, two interleaved rounds beside other work): 31.3 -> 22.3 s wall and 70 -> 47 JVM CPU-s
# after the JVM's start. For a warehouse of real size the defaults (4 partitions, AQE, codegen) are better.
SMALL_DATA_CONF = {
    "spark.sql.shuffle.partitions": "1",
    "spark.default.parallelism": "1",
    "spark.sql.adaptive.enabled": "false",
    "spark.sql.codegen.wholeStage": "false",
    "spark.sql.codegen.factoryMode": "NO_CODEGEN",
}


def new_session(spark: SparkSession) -> SparkSession:
    """A session of the same Spark application with its own temporary views (one catalogue each), and
    the settings of `spark` that the views and the execution depend on."""
    session = spark.newSession()
    for key in (*SESSION_CONF, *(k for k in SMALL_DATA_CONF if k.startswith("spark.sql."))):
        value = spark.conf.get(key, None)
        if value is not None:
            session.conf.set(key, value)
    return session


def _table_location(warehouse: Warehouse | str, table: str) -> str:
    root = warehouse if isinstance(warehouse, str) else str(warehouse.root)
    return root.rstrip("/") + "/tables/" + table


def _partitions(location: str) -> list[str] | None:
    """The run partitions of a local table (None: not a local path; let Spark list it)."""
    if "://" in location and not location.startswith("file://"):
        return None
    folder = Path(location.removeprefix("file://"))
    if not folder.is_dir():
        return []
    return sorted(
        str(p)
        for p in folder.iterdir()
        if p.is_dir() and p.name.startswith("run_id=") and p.name != SCHEMA_PARTITION
    )


def _read_table(spark: SparkSession, location: str, runs: list[str] | None = None):
    """The table's rows (with run_id from the folder names), the _schema partition's columns when empty.

    runs: only these runs' partitions (locally, the other folders are not even listed by Spark)."""
    from pyspark.sql import functions as F

    reader = spark.read.option("basePath", location).option("mergeSchema", "true")
    parts = _partitions(location)
    if parts is None:  # remote: Spark lists the folders; the filter drops the schema partition
        frame = reader.parquet(location).where(F.col("run_id") != "_schema")
        return frame if runs is None else frame.where(F.col("run_id").isin(list(runs)))
    if runs is not None:
        wanted = {f"run_id={r}" for r in runs}
        parts = [p for p in parts if Path(p).name in wanted]
    if parts:
        return reader.parquet(*parts)
    return reader.parquet(location + "/" + SCHEMA_PARTITION)


def _arrow_to_spark(spark: SparkSession, table):
    """A small Arrow table (the rule tables) as a Spark DataFrame, column types kept."""
    import pyarrow as pa
    from pyspark.sql import types as T

    def spark_type(t: pa.DataType):
        if pa.types.is_int32(t) or pa.types.is_int16(t) or pa.types.is_int8(t):
            return T.IntegerType()
        if pa.types.is_integer(t):
            return T.LongType()
        if pa.types.is_floating(t):
            return T.DoubleType()
        if pa.types.is_boolean(t):
            return T.BooleanType()
        if pa.types.is_string(t) or pa.types.is_large_string(t):
            return T.StringType()
        if pa.types.is_list(t):
            return T.ArrayType(spark_type(t.value_type))
        raise TypeError(f"no Spark type for the Arrow type {t}")

    schema = T.StructType([T.StructField(f.name, spark_type(f.type), f.nullable) for f in table.schema])
    rows = [tuple(r[c] for c in table.column_names) for r in table.to_pylist()]
    return spark.createDataFrame(rows, schema=schema)


# the tables register_rule_tables makes (DuckDB's catalogue has them as tables, the rest as views)
RULE_TABLES = (
    "category_rules",
    "fusion_patterns",
    "fusion_pattern_steps",
    "launch_site_rules",
    "device_peaks",
    "one_time_rules",
)


def register_rule_tables(spark: SparkSession, rules_file: str | None = None) -> None:
    _arrow_to_spark(spark, load_category_rules(rules_file)).createOrReplaceTempView("category_rules")
    head, steps = load_fusion_catalog()
    _arrow_to_spark(spark, head).createOrReplaceTempView("fusion_patterns")
    _arrow_to_spark(spark, steps).createOrReplaceTempView("fusion_pattern_steps")
    _arrow_to_spark(spark, load_site_rules(user_site_rules_file())).createOrReplaceTempView(
        "launch_site_rules"
    )
    _arrow_to_spark(spark, load_device_peaks(user_peaks_file())).createOrReplaceTempView("device_peaks")
    _arrow_to_spark(spark, load_one_time_rules()).createOrReplaceTempView("one_time_rules")


@dataclass
class SparkCatalog:
    """A SparkSession with the warehouse's tables and views, and the views that could not be made there.

    Views are added on demand (`add_views`), in dependency order, each once; materialize: each view is
    computed once when added (a local checkpoint) and the views above it read its rows.
    """

    session: SparkSession
    unavailable: dict[str, str] = field(default_factory=dict)  # view -> why (Spark's message)
    materialize: bool = False
    built: set[str] = field(default_factory=set)  # the sql/ views made so far

    def sql(self, query: str):
        return self.session.sql(query)

    def add_views(self, names: set[str] | None = None) -> None:
        """Make these views of sql/ (None: all) and the views they read, those not made or tried yet.

        A view that Spark cannot build (or, materialized, compute) is left out with the reason in
        `unavailable`, and so are the views that read it.
        """
        wanted = None if names is None else _with_dependencies(names)
        for name, path in _views()[0]:
            if (wanted is not None and name not in wanted) or name in self.built or name in self.unavailable:
                continue
            sql = path.read_text()
            missing = sorted(view_dependencies(sql) & set(self.unavailable))
            if missing:
                self.unavailable[name] = f"reads {', '.join(missing)}, which Spark cannot build"
                continue
            try:
                self.session.sql(to_spark_sql(sql))
                if self.materialize:
                    self.session.table(name).localCheckpoint(eager=True).createOrReplaceTempView(name)
                self.built.add(name)
            except Exception as exc:  # noqa: BLE001 - AnalysisException, Py4JJavaError, ValueError (transforms)
                self.unavailable[name] = f"{sql_path(path)}: {first_line(exc)}"
                self.session.catalog.dropTempView(name)


def connect_spark(
    warehouse: Warehouse | str,
    rules_file: str | None = None,
    spark: SparkSession | None = None,
    master: str | None = None,
    materialize: bool = False,
    only: set[str] | None = None,
    runs: list[str] | None = None,
    materialize_tables: bool | None = None,
) -> SparkCatalog:
    """Every table and view of the warehouse as temporary views of a SparkSession.

    warehouse: a Warehouse (local) or a URI string (`s3a://bucket/wh`, `gs://bucket/wh`); a local
    warehouse gets its schema files first, like catalog.connect.
    materialize: compute each view once, in dependency order, and keep its rows (a local checkpoint)
    for the views that read it: many queries over a small or medium warehouse (reports, tests) then
    stop recomputing the whole chain of views; off, every query plans from the Parquet files.
    A view that Spark cannot build (or, materialized, compute) is left out with the reason in
    `unavailable`, and so are the views that read it; the others work.
    only: build just these views and the views they read (`needed_views(query)`); analysing every
    view costs minutes of planning, and one query reads a few. Empty set: none yet (`add_views` later).
    runs: only these runs, like catalog.connect(runs=...): every table and view sees no other run.
    materialize_tables: also keep the base tables' rows (default: as materialize); off for a whole
    history, whose tables are better read from Parquet again than held in memory.
    One session holds one catalogue: a second connect_spark on the same session replaces the first.
    """
    if not isinstance(warehouse, str):
        ensure_schema_files(warehouse)
    spark = spark or spark_session(master)
    catalog = SparkCatalog(spark, materialize=materialize)
    for table in ALL_TABLES:
        _read_table(spark, _table_location(warehouse, table), runs).createOrReplaceTempView(f"_{table}_files")
    spark.sql("CREATE OR REPLACE TEMPORARY VIEW runs AS SELECT * FROM _runs_files WHERE run_id <> '_schema'")
    for table in ALL_TABLES:
        if table != "runs":  # a run is visible only once its runs row exists (store.publish's commit marker)
            spark.sql(
                f"CREATE OR REPLACE TEMPORARY VIEW {table} AS SELECT * FROM _{table}_files "
                "WHERE run_id IN (SELECT run_id FROM runs)"
            )
    if materialize if materialize_tables is None else materialize_tables:
        for table in ALL_TABLES:
            spark.table(table).localCheckpoint(eager=True).createOrReplaceTempView(table)
    register_rule_tables(spark, rules_file)
    catalog.add_views(only)
    return catalog


def _views() -> tuple[list[tuple[str, Path]], dict[str, set[str]]]:
    """catalog.ordered_views() and each view's dependencies, parsed once while the sql/ files stay as they are
    (a SparkConnection asks for each query: parsing every file takes seconds)."""
    stamp = tuple((p.name, p.stat().st_mtime_ns, p.stat().st_size) for p in sorted(view_files().values()))
    return _parsed_views(stamp)


@functools.lru_cache(maxsize=2)
def _parsed_views(stamp: tuple) -> tuple[list[tuple[str, Path]], dict[str, set[str]]]:
    order = ordered_views()
    return order, {name: view_dependencies(path.read_text()) for name, path in order}


def _view_graph() -> dict[str, set[str]]:
    return _views()[1]


def _with_dependencies(names: set[str] | list[str], graph: dict[str, set[str]] | None = None) -> set[str]:
    """These sql/ views and every view they read, directly or through other views."""
    graph = graph if graph is not None else _view_graph()
    todo, found = list(names), set()
    while todo:
        name = todo.pop()
        if name in graph and name not in found:
            found.add(name)
            todo.extend(graph[name])
    return found


def needed_views(query: str | exp.Expression) -> set[str]:
    """The sql/ views a query (DuckDB dialect) reads, directly or through other views."""
    graph = _view_graph()
    try:
        direct = view_dependencies(query if isinstance(query, str) else query.sql(dialect="duckdb"))
    except sqlglot.errors.SqlglotError:
        return set(graph)
    return _with_dependencies(direct, graph)


def first_line(exc: BaseException) -> str:
    java = getattr(exc, "java_exception", None)  # py4j: the message is on the Java side
    text = (str(java.getMessage()) if java is not None else str(exc)).strip()
    return text.splitlines()[0] if text else type(exc).__name__


# --- read-only ad-hoc SQL (tracehouse sql --engine spark) -------------------------------------------

# Spark functions that reach outside the query: call any static Java method, or read files by name
_SPARK_REFUSED = {
    "reflect",
    "java_method",
    "try_reflect",
    "input_file_name",
    "input_file_block_start",
    "input_file_block_length",
}


def run_query_spark(catalog: SparkCatalog, sql: str):
    """`warehouse.query.run_query` on Spark: the same read-only check (DuckDB dialect), then transpiled.

    Returns (column names, rows). What DuckDB's check refuses is refused here too; on top of that the
    Spark functions that call Java or name files are refused, and SUMMARIZE (DuckDB only).
    """
    text = check_read_only(sql)
    explain = text.split(None, 1)[0].lower() == "explain"
    body = text.split(None, 1)[1] if explain else text
    statement = sqlglot.parse_one(body, read=READ_DIALECT)
    if isinstance(statement, exp.Summarize):
        raise QueryRefused("SUMMARIZE is DuckDB's: use --engine duckdb, or aggregate with SELECT")
    for node in statement.walk():
        if isinstance(node, exp.Table) and node.name in catalog.unavailable:
            raise QueryError(f"view {node.name} is not available on Spark: {catalog.unavailable[node.name]}")
        if isinstance(node, exp.Func):
            name = (node.name if isinstance(node, exp.Anonymous) else node.sql_name()).lower()
            if name in _SPARK_REFUSED:
                raise QueryRefused(f"{name}() reaches outside the warehouse: not allowed")
    try:
        spark_sql = ("EXPLAIN " if explain else "") + to_spark_sql(body)
        frame = catalog.session.sql(spark_sql)
        rows = [tuple(row) for row in frame.collect()]
    except ValueError as exc:  # no faithful Spark form (spark_dialect._spark_transforms)
        raise QueryError(f"cannot run this query on Spark: {exc}")
    except Exception as exc:  # pyspark's AnalysisException, ParseException, Py4JJavaError ...
        if type(exc).__module__.startswith(("pyspark", "py4j")):
            raise QueryError(first_line(exc))
        raise
    return list(frame.columns), rows

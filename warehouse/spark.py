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
here by `_spark_transforms` (each transform says what it fixes); nothing here is view-specific.

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
from sqlglot.dialects.duckdb import DuckDB
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
}


def spark_session(master: str | None = None, app_name: str = "tracehouse") -> SparkSession:
    """A SparkSession set up the way the views need it (also on a cluster: pass its master URL).

    master: `local[N]`, `spark://host:7077`, `yarn`, `k8s://...`; default $SPARK_MASTER, else local[2].
    Under spark-submit (a master already set in the Spark conf) the submitted session is reused.
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
    try:
        session = builder.getOrCreate()
    except Exception as exc:  # Java missing or failing to start
        raise SparkUnavailable(f"cannot start Spark (is Java 17+ installed and on PATH?): {exc}") from exc
    session.sparkContext.setLogLevel("ERROR")
    for name in ("SQLQueryContextLogger", "DataFrameQueryContextLogger"):  # each failed query, as JSON
        logging.getLogger(name).disabled = True
    return session


def new_session(spark: SparkSession) -> SparkSession:
    """A session of the same Spark application with its own temporary views (one catalogue each), and
    the settings of `spark` that the views and the shuffles depend on."""
    session = spark.newSession()
    for key in (*SESSION_CONF, "spark.sql.shuffle.partitions"):
        value = spark.conf.get(key, None)
        if value is not None:
            session.conf.set(key, value)
    return session


# --- DuckDB -> Spark: systematic dialect differences that sqlglot leaves as they are -----------------


class DuckDBAsWritten(DuckDB):
    """DuckDB's dialect, but list indexes kept as written (1-based) in the parsed tree.

    sqlglot's DuckDB parser turns `x[1]` into a 0-based index only where it can type the index as an
    integer at parse time: literals yes (and -1 wrongly into -2: DuckDB's last element), `x[g[5]]` or
    `x[i + 1]` not; Spark's writer then prints the tree's index as it stands, so a computed index came
    out one place too far. Parsed with this dialect every index is DuckDB's own, and `_spark_transforms`
    writes each one as Spark's 1-based `try_element_at` (negative: from the end; out of range: NULL,
    as in DuckDB). Statements handed to `to_spark_sql` as trees must be parsed with it.
    """

    INDEX_OFFSET = 0


READ_DIALECT = DuckDBAsWritten

# Window functions that take no frame: DuckDB ignores a frame given to them, Spark refuses it
_FRAMELESS = (
    exp.Lead,
    exp.Lag,
    exp.RowNumber,
    exp.Rank,
    exp.DenseRank,
    exp.Ntile,
    exp.PercentRank,
    exp.CumeDist,
)


def _inline_frameless_windows(select: exp.Select) -> None:
    """`lead(t) OVER w ... WINDOW w AS (... ROWS ...)`: give lead/lag/row_number their own OVER, frameless."""
    named = {w.this.name: w for w in select.args["windows"]}
    for window in select.find_all(exp.Window):
        ref = window.args.get("alias")
        definition = named.get(ref.name) if isinstance(ref, exp.Identifier) else None
        if definition is None or not isinstance(window.this, _FRAMELESS) or not definition.args.get("spec"):
            continue
        if window.parent_select is not select:
            continue
        window.set("alias", None)
        window.set("partition_by", [e.copy() for e in definition.args.get("partition_by") or []])
        window.set("order", definition.args["order"].copy() if definition.args.get("order") else None)


def _fn(name: str, *args: exp.Expression) -> exp.Anonymous:
    return exp.Anonymous(this=name, expressions=list(args))


def _lambda(body: exp.Expression, *names: str) -> exp.Lambda:
    return exp.Lambda(this=body, expressions=[exp.to_identifier(n) for n in names])


def _var(name: str) -> exp.Identifier:
    return exp.to_identifier(name)


def _int_literal(node: exp.Expression) -> int | None:
    """The value of an integer literal (`3`, `-1`), else None."""
    if isinstance(node, exp.Literal) and not node.is_string and node.name.lstrip("-").isdigit():
        return int(node.name)
    if isinstance(node, exp.Neg) and _int_literal(node.this) is not None:
        return -_int_literal(node.this)
    return None


def _list_element(xs: exp.Expression, index: exp.Expression) -> exp.Expression:
    """DuckDB's `xs[i]` (1-based; negative from the end; 0 or out of range: NULL) in Spark."""
    value = _int_literal(index)
    if value == 0:
        return exp.null()
    if value is None:  # Spark refuses index 0 and a BIGINT index: DuckDB's NULL for 0, as INT
        index = exp.Cast(this=_fn("nullif", index, exp.Literal.number(0)), to=exp.DataType.build("INT"))
    return _fn("try_element_at", xs, index)


def _list_slice(xs: exp.Expression, piece: exp.Slice) -> exp.Expression:
    """DuckDB's `xs[a:b]` (1-based, both ends included, negative from the end, clamped) as Spark's slice."""
    if piece.args.get("step") is not None:
        raise ValueError(f"{piece.sql(READ_DIALECT)}: a list slice with a step has no Spark form here")
    size = _fn("size", xs.copy())

    def position(bound: exp.Expression | None, default: exp.Expression) -> exp.Expression:
        if bound is None:
            return default
        value = _int_literal(bound)
        from_end = exp.Add(
            this=exp.Add(this=size.copy(), expression=bound.copy()), expression=exp.Literal.number(1)
        )
        if value is not None:
            return exp.Literal.number(value) if value >= 0 else from_end
        return exp.Case(
            ifs=[exp.If(this=exp.LT(this=bound.copy(), expression=exp.Literal.number(0)), true=from_end)],
            default=bound.copy(),
        )

    first = _int_literal(piece.this) if piece.this is not None else 1
    begin = (
        exp.Literal.number(max(first, 1))
        if first is not None and first >= 0
        else _fn("greatest", position(piece.this, exp.Literal.number(1)), exp.Literal.number(1))
    )
    end = position(piece.expression, size.copy())
    length = _fn(
        "greatest",
        exp.Add(this=exp.Sub(this=end, expression=begin.copy()), expression=exp.Literal.number(1)),
        exp.Literal.number(0),
    )
    return _fn("slice", xs, begin, length)


def _list_fold(xs: exp.Expression, combine: type[exp.Binary]) -> exp.Expression:
    """DuckDB's list_sum / list_bool_and ... : the aggregate over the non-NULL elements, NULL when none."""
    kept = _fn(
        "filter", xs, _lambda(exp.Not(this=exp.Is(this=_var("_th_v"), expression=exp.null())), "_th_v")
    )
    rest = _fn("slice", kept.copy(), exp.Literal.number(2), _fn("size", kept.copy()))
    first = _fn("try_element_at", kept.copy(), exp.Literal.number(1))
    return _fn(
        "aggregate",
        rest,
        first,
        _lambda(combine(this=_var("_th_a"), expression=_var("_th_b")), "_th_a", "_th_b"),
    )


_LIST_FOLDS = {"list_sum": exp.Add, "list_bool_and": exp.And, "list_bool_or": exp.Or}


def _zip_transform(node: exp.Transform) -> exp.Expression:
    """`list_transform(list_zip(a, b), lambda x: f(x[1], x[2]))` -> Spark's `zip_with(a, b, (x1, x2) -> f)`.

    Both pad the shorter list with NULLs (DuckDB zips a NULL list as an empty one). Spark's arrays_zip gives structs named after the columns, which
    `x[1]` cannot read: any other use of the zipped element is refused."""
    zipped, fn = node.this, node.expression
    if len(zipped.expressions) != 2 or not isinstance(fn, exp.Lambda) or len(fn.expressions) != 1:
        raise ValueError(
            f"{node.sql(READ_DIALECT)}: only list_transform(list_zip(a, b), lambda x: ... x[1] ... x[2]) "
            "has a Spark form (zip_with)"
        )
    name = fn.expressions[0].name
    body = fn.this.copy()
    names = {1: f"_th_{name}1", 2: f"_th_{name}2"}
    for bracket in list(body.find_all(exp.Bracket)):
        target = bracket.this
        if (
            isinstance(target, (exp.Identifier, exp.Column))
            and target.name == name
            and len(bracket.expressions) == 1
            and _int_literal(bracket.expressions[0]) in names
        ):
            replacement = _var(names[_int_literal(bracket.expressions[0])])
            if bracket is body:
                body = replacement
            else:
                bracket.replace(replacement)
    used = [n for n in body.find_all(exp.Identifier, exp.Column) if n.name == name]
    if used or (isinstance(body, (exp.Identifier, exp.Column)) and body.name == name):
        raise ValueError(
            f"{node.sql(READ_DIALECT)}: the zipped element is used other than as x[1] / x[2]: no Spark form"
        )
    a, b = (
        exp.Coalesce(this=xs, expressions=[_fn("array")]) for xs in zipped.expressions
    )  # DuckDB: NULL is []
    return _fn("zip_with", a, b, _lambda(body, names[1], names[2]))


def _json_list(text: exp.Expression, to: exp.DataType, depth: int = 0) -> exp.Expression:
    """DuckDB's TRY_CAST(json(text) AS T[]...[]): element by element, an element that does not convert is NULL
    (Spark's from_json with the whole type makes the whole list NULL: `[[1, 2], [[3]]]` as BIGINT[][])."""
    inner = to.expressions[0]
    as_text = _fn("from_json", text, exp.Literal.string("ARRAY<STRING>"))
    if inner.is_type("varchar", "text", "string") and not inner.expressions:
        return as_text
    var = f"_th_j{depth}"
    if inner.this == exp.DataType.Type.ARRAY:
        element = _json_list(_var(var), inner, depth + 1)
    else:
        element = exp.TryCast(this=_var(var), to=inner.copy(), safe=True)
    return _fn("transform", as_text, _lambda(element, var))


def _quantile_disc(x: exp.Expression, q: exp.Expression) -> exp.Expression:
    """DuckDB's quantile_disc(x, q): the ceil(q·n)-th smallest non-NULL x (q·n in DOUBLE, the position
    clamped to 1..n; no value: NULL), in x's type."""
    n = exp.Count(this=x.copy())
    at = exp.Ceil(this=exp.Mul(this=exp.Cast(this=q, to=exp.DataType.build("DOUBLE")), expression=n))
    position = exp.Cast(
        this=_fn("greatest", _fn("least", at, n.copy()), exp.Literal.number(1)), to=exp.DataType.build("INT")
    )
    return _fn("try_element_at", _fn("array_sort", _fn("collect_list", x)), position)


def _spark_transforms(node: exp.Expression) -> exp.Expression:
    """Rewrite one node of a DuckDB statement where sqlglot's Spark output would not run or not agree.

    - `quantile_cont(x, q)`: sqlglot writes `PERCENTILE_CONT(x, q)`, which Spark rejects (its
      PERCENTILE_CONT takes `(q) WITHIN GROUP (ORDER BY x)`); Spark's `percentile(x, q)` is the same
      exact, linearly interpolated quantile (position (n - 1) * q), as DOUBLE like DuckDB's.
    - lead/lag/row_number/rank ... over a window with a frame (`WINDOW w AS (... ROWS ...)` shared with
      running sums): DuckDB ignores the frame, Spark refuses it; they get the window without the frame.
    - `avg(x)`: DuckDB's is DOUBLE for every numeric x; Spark keeps DECIMAL for a DECIMAL x (`avg(CASE
      ... THEN 1.0 ELSE 0.0 END)` gives 0.05882, not 0.058823529411764705): x is cast to DOUBLE, which
      Spark does anyway for integer x.
    - `x / y`: DuckDB's `/` is DOUBLE for every numeric x and y; Spark keeps DECIMAL for DECIMAL operands,
      rounded to 6 or more decimals (`(8.0 * 0.3675 + 3.0) / (8.0 * 0.3675 + 1.0)` is off by 1e-8, which
      regression's exp(w² / ν) turns into 1e-6): x is cast to DOUBLE, as Spark does anyway for integers.
    - `any_value(x) FILTER (WHERE c)`: DuckDB's any_value skips NULLs, which sqlglot writes as Spark's
      `ANY_VALUE(x) IGNORE NULLS` and then puts the FILTER after it, where Spark's grammar refuses it:
      the FILTER goes before IGNORE / RESPECT NULLS.
    - `quantile_disc(x, q)` (an aggregate): the element at position ceil(q·n) (in DOUBLE arithmetic,
      clamped to 1..n) of x's sorted non-NULL values, in x's own type, as DuckDB computes it (Spark's
      percentile_disc returns a DOUBLE: a median of token counts printed as 32.0, not 32).
    - `regexp_replace(s, p, r)` without the 'g' option replaces only the first match in DuckDB and
      every match in Spark: refused unless the pattern is anchored with ^ or $ (one match at most).
    - list indexes `xs[i]` (parsed as written, READ_DIALECT): Spark's `try_element_at(xs, i)`, 1-based,
      negative from the end, NULL out of range, as DuckDB; slices `xs[a:b]`: Spark's `slice` with
      DuckDB's bounds (both included, negative from the end, clamped).
    - `list_sum`, `list_bool_and`, `list_bool_or` (no Spark function): `aggregate` over the non-NULL
      elements, NULL for none, as DuckDB; `list_transform(list_zip(a, b), lambda x: ... x[1] ... x[2])`:
      `zip_with(a, b, ...)`; any other list_zip is refused.
    - `TRY_CAST(json(s) AS T[][])`: DuckDB makes an element that does not convert NULL, Spark's
      from_json the whole list: converted element by element.
    - `HUGEINT` (the 128-bit integer of exact products such as request_step_cost's T·w): Spark has none;
      DECIMAL(38, 0) holds the same integers, and `a // b` (Spark's DIV) and `a % b` on it stay exact.
    Not translatable without types: `len(xs)` of a list is Spark's `size`, of a text `length`; sqlglot
    writes LENGTH: the views write `array_length(xs)` for a list (the same function in DuckDB).
    """
    if isinstance(node, exp.DataType) and node.this == exp.DataType.Type.INT128:
        return exp.DataType.build("DECIMAL(38, 0)")
    if isinstance(node, exp.Bracket) and len(node.expressions) == 1 and not node.args.get("json_access"):
        index = node.expressions[0]
        if isinstance(index, exp.Slice):
            return _list_slice(node.this, index)
        if not (isinstance(index, exp.Literal) and index.is_string):
            return _list_element(node.this, index)
    if (
        isinstance(node, exp.Transform)
        and isinstance(node.this, exp.Anonymous)
        and node.this.name.lower() == "list_zip"
    ):
        return _zip_transform(node)
    if isinstance(node, exp.Anonymous) and node.name.lower() == "list_zip":
        raise ValueError(
            f"{node.sql(READ_DIALECT)}: list_zip has no Spark form here (only under list_transform)"
        )
    if isinstance(node, exp.Anonymous) and node.name.lower() in _LIST_FOLDS and len(node.expressions) == 1:
        return _list_fold(node.expressions[0], _LIST_FOLDS[node.name.lower()])
    if (
        isinstance(node, exp.TryCast)
        and isinstance(node.this, exp.ParseJSON)
        and node.to.this == exp.DataType.Type.ARRAY
    ):
        return _json_list(node.this.this, node.to)
    if isinstance(node, exp.Select) and node.args.get("windows"):
        _inline_frameless_windows(node)
    if isinstance(node, exp.Window) and isinstance(node.this, _FRAMELESS) and node.args.get("spec"):
        node.set("spec", None)
    if isinstance(node, exp.Filter) and isinstance(node.this, (exp.IgnoreNulls, exp.RespectNulls)):
        nulls = node.this
        return type(nulls)(this=exp.Filter(this=nulls.this, expression=node.expression))
    if (
        isinstance(node, exp.Div)
        and not node.args.get("typed")
        and not (isinstance(node.this, exp.Cast) and node.this.to.is_type("double"))
    ):
        return exp.Div(
            this=exp.Cast(this=node.this, to=exp.DataType.build("DOUBLE")),
            expression=node.expression,
            typed=False,
            safe=node.args.get("safe"),
        )
    if isinstance(node, exp.Avg) and not isinstance(node.this, exp.Cast):
        return exp.Avg(this=exp.Cast(this=node.this, to=exp.DataType.build("DOUBLE")))
    if isinstance(node, exp.Anonymous) and node.name.lower() == "list_reduce":
        # list_reduce(xs, f[, init]) -> aggregate(xs, init, f); without init DuckDB starts from the first
        # element: aggregate(the rest, the first, f) (an empty or NULL list gives NULL, as in DuckDB)
        xs, fn, *init = node.expressions
        if init:
            return exp.Anonymous(this="aggregate", expressions=[xs, init[0], fn])
        first = exp.Anonymous(this="try_element_at", expressions=[xs.copy(), exp.Literal.number(1)])
        rest = exp.Anonymous(
            this="slice",
            expressions=[
                xs.copy(),
                exp.Literal.number(2),
                exp.Anonymous(this="size", expressions=[xs.copy()]),
            ],
        )
        return exp.Anonymous(this="aggregate", expressions=[rest, first, fn])
    if (
        isinstance(node, exp.PercentileDisc)
        and node.expression is not None
        and not isinstance(node.parent, (exp.WithinGroup, exp.Window, exp.Filter))
        and not isinstance(node.expression, exp.Array)
    ):
        return _quantile_disc(node.this, node.expression)
    if (
        isinstance(node, exp.PercentileDisc)
        and node.expression is not None
        and not isinstance(node.parent, exp.WithinGroup)
    ):
        # over a window or with a FILTER: percentile_disc(q) WITHIN GROUP (ORDER BY x): the same value, but
        # DOUBLE (DuckDB keeps x's type); an actual value, exact (as
        # Anonymous: sqlglot's Spark writer would turn PercentileDisc into the approximate percentile)
        return exp.WithinGroup(
            this=exp.Anonymous(this="percentile_disc", expressions=[node.expression]),
            expression=exp.Order(expressions=[exp.Ordered(this=node.this)]),
        )
    if isinstance(node, exp.PercentileCont) and node.expression is not None:
        return exp.Anonymous(this="percentile", expressions=[node.this, node.expression])
    if isinstance(node, exp.RegexpReplace):
        modifiers = node.args.get("modifiers")
        flags = modifiers.name if isinstance(modifiers, exp.Literal) else ""
        pattern = node.expression
        anchored = isinstance(pattern, exp.Literal) and (
            pattern.name.startswith("^") or (pattern.name.endswith("$") and not pattern.name.endswith("\\$"))
        )
        if "g" not in flags and not anchored:
            raise ValueError(
                f"{node.sql('duckdb')}: DuckDB replaces the first match only, Spark every "
                "match; add 'g' or anchor the pattern with ^"
            )
        node.set("modifiers", None)
    return node


def _transform_all(node: exp.Expression) -> exp.Expression:
    """_spark_transforms on every node: sqlglot's transform does not descend into a node a transform
    returned, so the new node's own parts (an index inside an index, a division inside avg) are
    transformed here (each transform leaves its own output as it is: no loop)."""
    new = _spark_transforms(node)
    return node if new is node else new.transform(_transform_all, copy=False)


def to_spark_sql(sql: str | exp.Expression) -> str:
    """One DuckDB statement (text, or parsed with READ_DIALECT) in Spark's dialect (CREATE VIEW becomes
    CREATE TEMPORARY VIEW)."""
    statement = sqlglot.parse_one(sql, read=READ_DIALECT) if isinstance(sql, str) else sql.copy()
    statement = statement.transform(_transform_all, copy=False)
    if isinstance(statement, exp.Create) and statement.kind == "VIEW":
        props = statement.args.get("properties") or exp.Properties(expressions=[])
        if not any(isinstance(p, exp.TemporaryProperty) for p in props.expressions):
            props.append("expressions", exp.TemporaryProperty())
        statement.set("properties", props)
    return statement.sql(dialect="spark")


# --- the catalogue ----------------------------------------------------------------------------------


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
    except ValueError as exc:  # a construct that has no faithful Spark form (_spark_transforms)
        raise QueryError(f"cannot run this query on Spark: {exc}")
    except Exception as exc:  # pyspark's AnalysisException, ParseException, Py4JJavaError ...
        if type(exc).__module__.startswith(("pyspark", "py4j")):
            raise QueryError(first_line(exc))
        raise
    return list(frame.columns), rows

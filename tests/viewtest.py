"""View diff-tests: one view, small input rows, the view and only what it reads, expected rows.

In the style of Perfetto's diff tests. A case is a folder `tests/views/<domain>/<view>/<case>/` (the
view's folder in sql/, mirrored) holding

- `<table>.csv` for each input: a stored table (`kernels`, `step_spans`, ...), a rule table
  (`category_rules`, ...) or an upstream view of sql/ (`_kernel_facts`, `kernel_category`, ...). A view
  given as a CSV is not built: the case tests the views above it alone. Columns left out of a CSV are
  NULL; a stored table or view that the view reads and the case does not give is empty (zero rows, with
  its declared columns); the rule tables are the shipped ones unless given;
- `expected.csv`: the rows the query returns, header first (the query's columns, in order);
- `query.sql` (optional): the query compared, by default `SELECT * FROM <view>`. With an ORDER BY at the
  top the rows are compared in order, without one as a multiset (a view has no order).

CSV cells: an empty cell is NULL, `""` the empty string; a cell that starts with `=` is a DuckDB SQL
expression (`=[1, 2]`, `=MAP(['a'], [1])`, `={'name': 'x'}`) for the list, map and struct columns; any other
cell is cast to the column's type. In expected.csv a list, map or struct cell is JSON (`[1, 2]`,
`{"a": 1}`), numbers compare as numbers (floats to 1e-9, relative), booleans as `true` / `false`.
Lines that start with `#` are comments: say there how the expected rows were worked out.

The column types come from the catalogue itself (every table and view built over an empty warehouse,
`schema_catalog`), so a case names values, never types. The same case runs on DuckDB
(tests/test_views.py) and on Spark when pyspark is installed (the views transpiled as in
`warehouse.spark`, one Spark session for all cases; marked slow). On Spark the inputs are data, not SQL
text: DuckDB types and writes each input's rows (`=` cells included, evaluated by DuckDB) to a Parquet file
that Spark reads as a data frame (`spark_frame`), HUGEINT as DECIMAL(38, 0).

Tests that build their rows in Python (tests/test_critical_path.py's `Mini`, ...) use the same harness
through `connect_views(views, inputs)`.
"""

from __future__ import annotations

import csv
import functools
import io
import json
import math
import tempfile
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

import duckdb
import sqlglot
from sqlglot import exp

ROOT = Path(__file__).resolve().parents[1]
CASES_DIR = ROOT / "tests" / "views"

Rows = list[dict[str, Any]]


# ---------------------------------------------------------------- what the catalogue holds


@functools.cache
def _graph() -> tuple[tuple[str, ...], dict[str, str], dict[str, frozenset[str]]]:
    """(the sql/ views in dependency order, each view's SQL, each view's direct dependencies)."""
    from tracehouse.warehouse.catalog import ordered_views, view_dependencies

    order, texts, deps = [], {}, {}
    for name, path in ordered_views():
        order.append(name)
        texts[name] = path.read_text(encoding="utf-8")
        deps[name] = frozenset(view_dependencies(texts[name]))
    return tuple(order), texts, deps


def view_names() -> list[str]:
    return list(_graph()[0])


@functools.cache
def schema_catalog() -> dict[str, tuple[tuple[str, str], ...]]:
    """name -> ((column, DuckDB type), ...) of every stored table, rule table and sql/ view, read from the
    catalogue built over an empty warehouse (the declared schema's zero-row files)."""
    from tracehouse.warehouse.catalog import connect
    from tracehouse.warehouse.store import Warehouse

    # the catalogue file (built once per version of sql/ and kept in the cache folder) holds every
    # view's columns: reading them there spares binding all the views again in each test process
    with tempfile.TemporaryDirectory(prefix="viewtest-schema-") as folder:
        con = connect(Warehouse(Path(folder) / "wh"), lockdown=False)
        rows = con.execute(
            "SELECT table_name, column_name, data_type FROM information_schema.columns "
            "WHERE table_catalog = current_database() AND table_schema = 'main' "
            "ORDER BY table_name, ordinal_position"
        ).fetchall()
        con.close()
    out: dict[str, list[tuple[str, str]]] = {}
    for table, column, kind in rows:
        out.setdefault(table, []).append((column, kind))
    return {name: tuple(cols) for name, cols in out.items()}


def columns_of(name: str) -> tuple[tuple[str, str], ...]:
    try:
        return schema_catalog()[name]
    except KeyError:
        raise KeyError(f"{name} is no stored table, rule table or view of sql/") from None


RULE_TABLES = (
    "category_rules",
    "fusion_patterns",
    "fusion_pattern_steps",
    "launch_site_rules",
    "device_peaks",
    "one_time_rules",
)


def plan(views: list[str], given: set[str]) -> tuple[list[str], list[str]]:
    """(the sql/ views to build, in order; the other tables they read and nobody gave) for these views,
    stopping at the names given as input."""
    order, _, deps = _graph()
    wanted, todo = set(), [v for v in views if v not in given]
    while todo:
        name = todo.pop()
        if name in wanted:
            continue
        if name not in deps:
            raise KeyError(f"{name} is no view of sql/")
        wanted.add(name)
        todo.extend(d for d in deps[name] if d in deps and d not in given)
    build = [v for v in order if v in wanted]
    read = sorted({d for v in build for d in deps[v] if d not in deps and d not in given} - set(RULE_TABLES))
    return build, read


# ---------------------------------------------------------------- input rows as SQL


def _literal(value: Any) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, str) and value.startswith("="):
        return value[1:]
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, (int, float, Decimal)):
        return repr(value) if not isinstance(value, Decimal) else str(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_literal(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_literal(str(k))}: {_literal(v)}" for k, v in value.items()) + "}"
    return "'" + str(value).replace("'", "''") + "'"


def table_select(name: str, rows: Rows, spark: bool = False) -> str:
    """A DuckDB SELECT giving `rows` with every column of `name`, typed as the catalogue types it
    (columns a row leaves out are NULL). spark: HUGEINT (DuckDB's sum of BIGINT) as DECIMAL(38, 0), the
    type Spark has for it."""
    cols = [(c, "DECIMAL(38, 0)" if spark and t == "HUGEINT" else t) for c, t in columns_of(name)]
    known = {c for c, _ in cols}
    for row in rows:
        unknown = sorted(set(row) - known)
        if unknown:
            raise KeyError(f"{name} has no column {', '.join(unknown)} (it has {', '.join(sorted(known))})")

    def cast(value, kind):
        return f"CAST({_literal(value)} AS {kind})"

    if not rows:
        body = ", ".join(f'{cast(None, t)} AS "{c}"' for c, t in cols)
        return f"SELECT {body} LIMIT 0"
    selects = [", ".join(f'{cast(row.get(c), t)} AS "{c}"' for c, t in cols) for row in rows]
    return " UNION ALL ".join(f"SELECT {s}" for s in selects)


# ---------------------------------------------------------------- building a connection


def connect_views(views: list[str], inputs: dict[str, Rows]) -> duckdb.DuckDBPyConnection:
    """A bare DuckDB connection holding `inputs` as tables (typed as the catalogue types them), the
    shipped rule tables, the empty tables the views read and nobody gave, and these views of sql/ with
    every view they read that is not given, nothing else."""
    from tracehouse.warehouse.catalog import register_rules

    build, read = plan(views, set(inputs))
    con = duckdb.connect()
    register_rules(con, user_files=False)
    for name in read:
        con.execute(f'CREATE TABLE "{name}" AS {table_select(name, [])}')
    for name, rows in inputs.items():
        con.execute(f'CREATE OR REPLACE TABLE "{name}" AS {table_select(name, rows)}')
    texts = _graph()[1]
    for name in build:
        con.execute(texts[name])
    return con


def _spark_inputs_folder() -> Path:
    """A folder for the inputs' Parquet files, kept while the process runs (Spark reads them lazily, at
    each query)."""
    global _SPARK_INPUTS
    if _SPARK_INPUTS is None:
        _SPARK_INPUTS = tempfile.TemporaryDirectory(prefix="viewtest-spark-")
    return Path(_SPARK_INPUTS.name)


_SPARK_INPUTS: tempfile.TemporaryDirectory | None = None


def spark_frame(session, name: str, rows: Rows):
    """`rows` of `name` as a Spark DataFrame: typed and written by DuckDB (table_select, HUGEINT as
    DECIMAL(38, 0)) to a Parquet file that Spark reads, as it reads the warehouse's stored tables. The
    rows reach Spark as data, not as SQL text: a UNION ALL of one SELECT per row cost Spark's analyzer
    its 2 GB heap on a few dozen rows. Spark is given the file's schema (read once per table name: a
    table's columns are the catalogue's whatever its rows), so it does not run a job to infer it; an empty
    table is one file per name, written once."""
    path = _empty_file(name) if not rows else _write_rows(name, rows)
    return session.read.schema(_spark_schema(session, name)).parquet(str(path))


def _write_rows(name: str, rows: Rows) -> Path:
    folder = _spark_inputs_folder()
    path = folder / f"{len(list(folder.iterdir()))}-{name}.parquet"
    con = duckdb.connect()
    try:
        con.execute(f"COPY ({table_select(name, rows, spark=True)}) TO '{path}' (FORMAT parquet)")
    finally:
        con.close()
    return path


@functools.cache
def _empty_file(name: str) -> Path:
    return _write_rows(name, [])


_SPARK_SCHEMAS: dict[str, Any] = {}


def _spark_schema(session, name: str):
    """The Spark schema of `name`'s Parquet files (inferred once, from its empty file)."""
    if name not in _SPARK_SCHEMAS:
        _SPARK_SCHEMAS[name] = session.read.parquet(str(_empty_file(name))).schema
    return _SPARK_SCHEMAS[name]


def _spark_text(name: str) -> str:
    """The view's CREATE statement as Spark runs it (to_spark_sql transpiles each text once per process)."""
    from tracehouse.warehouse.spark import to_spark_sql

    return to_spark_sql(_graph()[1][name])


@dataclass
class _CaseSession:
    """The session that the view cases share (one per Spark application): its rule tables and empty
    inputs are made once, as data frames of that session, and each case replaces the temporary views it
    reads. `replaced`: the rule tables a case gave, to be given their shipped rows again."""

    session: Any
    shipped: dict[str, Any] = field(default_factory=dict)  # rule table -> its shipped rows' frame
    empty: dict[str, Any] = field(default_factory=dict)  # table -> its empty frame
    replaced: set[str] = field(default_factory=set)


_CASE_SESSIONS: dict[int, _CaseSession] = {}


def _case_session(spark) -> _CaseSession:
    from tracehouse.warehouse.spark import RULE_TABLES as SPARK_RULE_TABLES
    from tracehouse.warehouse.spark import new_session, register_rule_tables

    key = id(spark.sparkContext)
    if key not in _CASE_SESSIONS:
        session = new_session(spark)
        register_rule_tables(session)
        # the rule tables are Python rows (createDataFrame): kept as computed rows, a query that reads
        # them starts no Python worker to unpickle them
        shipped = {n: session.table(n).localCheckpoint(eager=True) for n in SPARK_RULE_TABLES}
        for name, frame in shipped.items():
            frame.createOrReplaceTempView(name)
        _CASE_SESSIONS[key] = _CaseSession(session, shipped)
    return _CASE_SESSIONS[key]


def spark_views(spark, views: list[str], inputs: dict[str, Rows], materialize: bool = False):
    """The same on Spark: a session of `spark` holding the inputs (as data frames, spark_frame), the rule
    tables and the views, transpiled by warehouse.spark, as temporary views. Returns the session, valid
    until the next call: the calls share one session (a session and its rule tables cost ~1 s to make),
    and each call makes again every temporary view that its views read (its inputs, the empty tables,
    the rule tables a previous call replaced, the views), so what an earlier call left is never read.
    materialize: each view computed once as it is made (a local checkpoint, as
    warehouse.spark.connect_spark(materialize=True) does), so the views above it read its rows and
    Spark's analyzer never holds the whole tree (fusion_match over kernel_summary outgrows a 2 GB heap)."""
    build, read = plan(views, set(inputs))
    shared = _case_session(spark)
    session = shared.session
    for name in sorted(shared.replaced - set(inputs)):
        shared.shipped[name].createOrReplaceTempView(name)
    shared.replaced = {n for n in inputs if n in shared.shipped}
    for name in read:
        if name not in shared.empty:
            shared.empty[name] = spark_frame(session, name, [])
        shared.empty[name].createOrReplaceTempView(name)
    for name, rows in inputs.items():
        # replaces a shipped rule table that the case gives
        spark_frame(session, name, rows).createOrReplaceTempView(name)
    for name in build:
        session.sql(_spark_text(name))
        if materialize:
            session.table(name).localCheckpoint(eager=True).createOrReplaceTempView(name)
    return session


# ---------------------------------------------------------------- cases as files


def _read_csv(path: Path) -> tuple[list[str], list[list[str | None]]]:
    lines = [line for line in path.read_text(encoding="utf-8").splitlines() if not line.startswith("#")]
    reader = csv.reader(io.StringIO("\n".join(lines)), skipinitialspace=False)
    table = [row for row in reader if row]
    if not table:
        raise ValueError(f"{path}: no header")
    header, body = table[0], table[1:]
    # an unquoted empty cell is NULL, a quoted one ("") the empty string: csv.reader shows both as '',
    # so the raw lines tell them apart
    raw = [line for line in lines[1:] if line.strip()]
    out = []
    for row, line in zip(body, raw, strict=True):
        if len(row) != len(header):
            raise ValueError(f"{path}: {len(row)} cells where the header has {len(header)}: {line}")
        quoted_empty = _quoted_empty_cells(line)
        out.append([None if (v == "" and i not in quoted_empty) else v for i, v in enumerate(row)])
    return header, out


def _quoted_empty_cells(line: str) -> set[int]:
    """Indexes of the cells written "" in one CSV line."""
    cells, i, index, n = set(), 0, 0, len(line)
    while i <= n:
        if line.startswith('""', i) and (i + 2 == n or line[i + 2] == ","):
            cells.add(index)
            i += 2
        elif i < n and line[i] == '"':
            i += 1
            while i < n:
                if line[i] == '"' and i + 1 < n and line[i + 1] == '"':
                    i += 2
                elif line[i] == '"':
                    i += 1
                    break
                else:
                    i += 1
        while i < n and line[i] != ",":
            i += 1
        index += 1
        i += 1
    return cells


@dataclass
class Case:
    view: str
    name: str
    folder: Path
    inputs: dict[str, Rows] = field(default_factory=dict)
    query: str = ""
    columns: list[str] = field(default_factory=list)
    expected: list[list[str | None]] = field(default_factory=list)

    @property
    def id(self) -> str:
        return f"{self.view}/{self.name}"

    @property
    def ordered(self) -> bool:
        statement = sqlglot.parse_one(self.query, read="duckdb")
        return isinstance(statement, exp.Query) and statement.args.get("order") is not None


def load_case(folder: Path) -> Case:
    view, name = folder.parent.name, folder.name
    case = Case(view, name, folder)
    for path in sorted(folder.glob("*.csv")):
        if path.name == "expected.csv":
            continue
        header, rows = _read_csv(path)
        case.inputs[path.stem] = [dict(zip(header, r)) for r in rows]
    query = folder / "query.sql"
    case.query = (
        query.read_text(encoding="utf-8").strip().rstrip(";") if query.is_file() else f"SELECT * FROM {view}"
    )
    case.columns, case.expected = _read_csv(folder / "expected.csv")
    return case


def all_cases() -> list[Case]:
    """Every case under tests/views/<domain>/<view>/<case>/ (the domain folder mirrors the view's folder
    in sql/)."""
    return [load_case(p.parent) for p in sorted(CASES_DIR.rglob("expected.csv"))]


# ---------------------------------------------------------------- comparing rows


def _python(value: Any) -> Any:
    """A result value as plain Python (Spark's Row as a dict)."""
    if hasattr(value, "asDict"):
        return {k: _python(v) for k, v in value.asDict().items()}
    if isinstance(value, dict):
        return {str(k): _python(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_python(v) for v in value]
    return value


def _same(expected: Any, got: Any) -> bool:
    """expected: a CSV cell (text or None) or, inside a list/map/struct, a JSON value."""
    got = _python(got)
    if expected is None or got is None:
        return expected is None and got is None
    if isinstance(got, bool):
        return str(expected).lower() == ("true" if got else "false")
    if isinstance(got, int) and not isinstance(expected, float):
        try:
            return int(expected) == got
        except (TypeError, ValueError):
            pass
    if isinstance(got, (int, float, Decimal)):
        try:
            want = float(expected)
        except (TypeError, ValueError):
            return False
        g = float(got)
        return (math.isnan(g) and math.isnan(want)) or math.isclose(g, want, rel_tol=1e-9, abs_tol=1e-12)
    if isinstance(got, (list, dict)):
        want = json.loads(expected) if isinstance(expected, str) else expected
        if isinstance(got, list):
            return isinstance(want, list) and len(want) == len(got) and all(map(_same, want, got))
        return isinstance(want, dict) and set(want) == set(got) and all(_same(want[k], got[k]) for k in got)
    return str(expected) == str(got)


def _row_same(expected: list, got: tuple) -> bool:
    return len(expected) == len(got) and all(map(_same, expected, got))


def _show(rows) -> str:
    return (
        "\n".join(
            "  "
            + ",".join(
                "" if v is None else json.dumps(_python(v), default=str) if not isinstance(v, str) else v
                for v in r
            )
            for r in rows
        )
        or "  (no rows)"
    )


def compare(case: Case, columns: list[str], got: list[tuple]) -> None:
    """Fail (AssertionError) unless the query's columns and rows are the expected ones."""
    where = str(case.folder.relative_to(ROOT)) if case.folder.is_relative_to(ROOT) else case.id
    assert columns == case.columns, f"{where}: columns {columns}, expected.csv has {case.columns}"
    problem = None
    if case.ordered:
        if len(got) != len(case.expected) or not all(map(_row_same, case.expected, got)):
            problem = "rows differ (compared in order: the query has ORDER BY)"
    else:
        left = list(got)
        for want in case.expected:
            match = next((i for i, row in enumerate(left) if _row_same(want, row)), None)
            if match is None:
                problem = f"expected row not found: {want}"
                break
            left.pop(match)
        if problem is None and left:
            problem = f"{len(left)} unexpected row(s), first: {left[0]}"
    if problem:
        raise AssertionError(f"{where}: {problem}\nexpected:\n{_show(case.expected)}\ngot:\n{_show(got)}")


def run_duckdb(case: Case) -> tuple[list[str], list[tuple]]:
    con = connect_views([case.view], case.inputs)
    try:
        cursor = con.execute(case.query)
        return [d[0] for d in cursor.description], cursor.fetchall()
    finally:
        con.close()


def run_spark(spark, case: Case, materialize: bool = False) -> tuple[list[str], list[tuple]]:
    from tracehouse.warehouse.spark import to_spark_sql

    session = spark_views(spark, [case.view], case.inputs, materialize=materialize)
    frame = session.sql(to_spark_sql(case.query))
    return list(frame.columns), [tuple(r) for r in frame.collect()]

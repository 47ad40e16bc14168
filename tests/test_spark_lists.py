"""DuckDB's list expressions on Spark (warehouse/spark_dialect.py `_spark_transforms`): the same values.

sql/roofline/_op_work.sql reads a trace's `Input Dims` as lists: indexes (1-based, negative from the end, computed
indexes), slices, list_sum / list_bool_and over a list_zip, TRY_CAST of JSON text to nested lists. Each
expression here runs on DuckDB as written and on Spark as transpiled, over edge cases (NULL lists, empty
lists, out-of-range and zero indexes, NULL elements), and must give the same value.
"""

from __future__ import annotations

import itertools
import shutil

import pytest

pytest.importorskip("pyspark", reason="pyspark is not installed: pip install -e '.[spark]'")
if shutil.which("java") is None:
    pytest.skip("Java is not on PATH: Spark needs Java 17+", allow_module_level=True)

import duckdb
from tracehouse.warehouse.spark import to_spark_sql

LISTS = ["CAST(NULL AS INTEGER[])", "CAST([] AS INTEGER[])", "[7]", "[1, 2, 3]", "[4, NULL, 6, 8]"]


def _table(rows: list[tuple], columns: str) -> str:
    """The rows as an inline table, numbered by a first column k (the order to compare in)."""
    values = ", ".join("(" + ", ".join(str(v) for v in (k, *row)) + ")" for k, row in enumerate(rows, 1))
    return f"(VALUES {values}) AS v(k, {columns})"


def _same(spark, sql: str) -> list[tuple]:
    duck = [tuple(r) for r in duckdb.sql(sql).fetchall()]
    theirs = [tuple(r) for r in spark.sql(to_spark_sql(sql)).collect()]
    assert theirs == duck, f"{sql}\n  spark: {to_spark_sql(sql)}"
    return duck


def test_index_literal_and_computed(spark):
    indexes = [-5, -1, 0, 1, 2, 4, "NULL"]
    rows = [(x, i) for x, i in itertools.product(LISTS, indexes)]
    literal = ", ".join(f"x[{i}] AS l{n}" for n, i in enumerate(i for i in indexes if i != "NULL"))
    got = _same(spark, f"SELECT k, x[i], {literal}, [10, 20, 30][i] FROM {_table(rows, 'x, i')} ORDER BY k")
    row = got[len(indexes) * 3 + 1]  # x = [1, 2, 3], i = -1; then x[-5], x[-1], x[0], x[1] ...
    assert row[1] == 3 and row[2:6] == (None, 3, None, 1)  # [-1] is the last element (not NULL, not 2)


def test_index_of_index(spark):
    """`elt[g[5]]`: the inner index as written, the outer index computed from it (sqlglot left it 0-based)."""
    got = _same(
        spark,
        "SELECT elt[g[5]], elt[g[6]], d[slots + 1] FROM (VALUES ([2, 4, 8], [1, 1, 1, 1, 3, 2], "
        "[[1], [2], [3], [4]], 2)) AS v(elt, g, d, slots)",
    )
    assert got == [(8, 4, [3])]


def test_slice(spark):
    bounds = [-4, -2, -1, 0, 1, 2, 3, 5]
    rows = [(x, a, b) for x, a, b in itertools.product(LISTS, bounds, bounds)]
    _same(spark, f"SELECT k, x[a:b], x[a:], x[1:b] FROM {_table(rows, 'x, a, b')} ORDER BY k")
    literal = ", ".join(f"x[{a}:{b}]" for a, b in [(1, -2), (2, -1), (-2, 3), (0, 2), (3, 2), (-10, 10)])
    got = _same(
        spark, f"SELECT k, {literal}, x[2:], x[:-2] FROM {_table([(x,) for x in LISTS], 'x')} ORDER BY k"
    )
    assert got[3][1] == [1, 2]  # [1, 2, 3][1:-2]: all but the last (the leading dims of a shape)


def test_list_folds(spark):
    lists = LISTS + ["CAST([NULL] AS INTEGER[])"]
    bools = [
        "CAST(NULL AS BOOLEAN[])",
        "CAST([] AS BOOLEAN[])",
        "[true, NULL]",
        "[false, NULL]",
        "CAST([NULL] AS BOOLEAN[])",
        "[true, true]",
        "[true, false]",
    ]
    rows = [(x, b) for x, b in itertools.zip_longest(lists, bools, fillvalue="NULL")]
    got = _same(
        spark,
        f"SELECT k, list_sum(x), list_bool_and(b), list_bool_or(b) FROM {_table(rows, 'x, b')} ORDER BY k",
    )
    assert [r[1] for r in got] == [None, None, 7, 6, 18, None, None]  # NULLs skipped; none: NULL


def test_zip_transform(spark):
    rows = [
        ("[1, 2, 3]", "[10, NULL, 30]"),
        ("[0, 5]", "[NULL]"),
        ("CAST([] AS INTEGER[])", "[1]"),
        ("CAST(NULL AS INTEGER[])", "[1]"),
    ]
    got = _same(
        spark,
        f"SELECT k, list_transform(list_zip(a, b), lambda x: x[1] * x[2]), "
        f"list_sum(list_transform(list_zip(a, b), lambda x: x[1] * x[2])), "
        f"list_bool_and(list_transform(list_zip(a, b), lambda x: x[1] = 0 OR x[2] IS NOT NULL)) "
        f"FROM {_table(rows, 'a, b')} ORDER BY k",
    )
    assert got[0][1:] == ([10, None, 90], 100, False) and got[3][1:] == (
        [None],
        None,
        True,
    )  # NULL zips as []
    for bad in ("SELECT list_zip([1], [2])", "SELECT list_transform(list_zip([1], [2]), lambda x: x)"):
        with pytest.raises(ValueError):
            to_spark_sql(bad)


def test_json_to_lists(spark):
    texts = [
        "'[[1, 2], []]'",
        "'[[1, 2], [[3]]]'",
        "'[[1], \"x\"]'",
        "'[5, [1]]'",
        "'[]'",
        "'null'",
        "'{\"a\": 1}'",
        "'[[4096, 4096], [4096], [null]]'",
        "NULL",
    ]
    types = ['\'["c10::BFloat16", "Scalar", [1], 2, null]\'', "'[]'", "NULL"]
    rows = [(s, t) for s, t in itertools.zip_longest(texts, types, fillvalue="NULL")]
    got = _same(
        spark,
        f"SELECT k, TRY_CAST(json(s) AS BIGINT[][]), TRY_CAST(json(t) AS VARCHAR[]) FROM "
        f"{_table(rows, 's, t')} ORDER BY k",
    )
    assert got[1][1] == [[1, 2], [None]]  # a TensorList inside: that input NULL, the others kept


def test_array_length(spark):
    got = _same(
        spark,
        f"SELECT k, array_length(x), array_length([x, x]) FROM {_table([(x,) for x in LISTS], 'x')} ORDER BY k",
    )
    assert got[0][1] is None  # size(NULL) is NULL, as DuckDB's len (not Spark's legacy -1)


def test_quantile_disc(spark):
    """quantile_disc (step_latency's medians and p90): DuckDB's value at position ceil(q·n), in x's type
    (Spark's percentile_disc gives a DOUBLE: 32.0 for a median of token counts)."""
    rows = [(n, "NULL" if i % 7 == 3 else (i * 37 + n) % 101) for n in range(1, 41) for i in range(n)]
    got = _same(
        spark,
        "SELECT g, quantile_disc(x, 0.5), quantile_disc(x, 0.9), quantile_disc(x, 0.1), "
        f"quantile_disc(x, 0.0), quantile_disc(x, 1.0) FROM {_table(rows, 'g, x')} GROUP BY g ORDER BY g",
    )
    assert len(got) == 40 and all(isinstance(v, int) for row in got for v in row[1:] if v is not None)
    assert _same(spark, "SELECT quantile_disc(x, 0.5) FROM (VALUES (CAST(NULL AS BIGINT))) AS v(x)") == [
        (None,)
    ]


def test_cte_materialization_hints(spark):
    """`AS [NOT] MATERIALIZED` (dependency_edges' act and calls): a DuckDB planner hint Spark's grammar lacks,
    dropped; the rows are the same."""
    sql = (
        "WITH a AS NOT MATERIALIZED (SELECT k, x FROM " + _table([(1,), (2,), (3,)], "x") + "), "
        "b AS MATERIALIZED (SELECT k, 10 * x AS y FROM a) "
        "SELECT a.k, a.x, b.y FROM a JOIN b ON b.k = a.k JOIN a AS c ON c.k = a.k ORDER BY a.k"
    )
    assert "MATERIALIZED" not in to_spark_sql(sql)
    assert _same(spark, sql) == [(1, 1, 10), (2, 2, 20), (3, 3, 30)]

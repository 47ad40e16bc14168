"""The view diff-tests (tests/viewtest.py, cases in tests/views/<domain>/<view>/<case>/): each case's rows on DuckDB,
the same cases on Spark where pyspark and Java are there (slow), and every view of sql/ has a case."""

from __future__ import annotations

import pytest
from tracehouse.warehouse.catalog import SQL_DIR, sql_path, view_files
from viewtest import CASES_DIR, all_cases, compare, run_duckdb, run_spark, view_names

CASES = all_cases()

# Views without a case yet, each with why: this list only shrinks (the test below fails on a view
# missing from it and on a listed view that has a case).
UNCOVERED: dict[str, str] = {}


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_view_case_duckdb(case):
    compare(case, *run_duckdb(case))


# Cases whose views are computed once as they are made on Spark (viewtest.spark_views(materialize=True), as
# warehouse.spark.connect_spark(materialize=True) does): the critical-path chain re-planned whole ran Spark's
# analyzer out of its 2 GB heap, and _critical_path_pred's plan failed to deserialize (ClassCastException on
# UnionExec.children); materialized, the three pass in 40-70 s each (measured).
SPARK_MATERIALIZE = {
    "critical_path/cross_stream_launch_bound",
    "critical_path/graph_launch_in_earlier_step",
    "_critical_path_pred/ties_graph_copy_handoff_inferred",
    "dependency_edges/every_candidate",
    "overlap_opportunity/verdicts_and_risk",  # reads fusion_match too: inlined, its plan fills Spark's heap
}


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_view_case_spark(spark, case):
    compare(case, *run_spark(spark, case, materialize=case.id in SPARK_MATERIALIZE))


def test_category_override_plan_reads_each_input_a_few_times_on_spark(spark):
    """Spark copies a CTE's plan at every reference (a deterministic CTE is inlined), so a CTE read twice
    doubles what it reads. _category_override's walks read each level once, and every CTE below them is
    read once: its plan was 6,553 lines with 900 Parquet scans and cost 30-45 s wherever it was built; now
    about 300 lines and 32 scans (each input read at most 8 times: the frames walk's 6 levels)."""
    from viewtest import spark_views

    [case] = [c for c in CASES if c.id == "_category_override/op_shape_module_rules"]
    session = spark_views(spark, [case.view], case.inputs)
    plan = session.sql("EXPLAIN SELECT * FROM _category_override").collect()[0][0]
    assert plan.count("FileScan parquet") <= 40, plan


def test_every_view_has_a_case():
    covered = {c.view for c in CASES}
    views = set(view_names())
    missing = sorted(views - covered - set(UNCOVERED))
    assert not missing, (
        f"views without a case in tests/views/ (add one, see tests/views/README.md): {missing}"
    )
    done = sorted(set(UNCOVERED) & covered)
    assert not done, f"these views have a case now: take them out of UNCOVERED: {done}"
    unknown = sorted(set(UNCOVERED) - views)
    assert not unknown, f"UNCOVERED names no view of sql/: {unknown}"
    strays = sorted(c.id for c in CASES if c.view not in views)
    assert not strays, f"tests/views/ has cases for no view of sql/: {strays}"


def test_view_cases_mirror_the_sql_folders():
    """tests/views/<domain>/<view>/: the case folders of a view sit in the folder named as the view's own
    folder in sql/ (sql/<domain>/<view>.sql), so a view's cases are found beside it by the same path."""
    files = view_files()
    misplaced = sorted(
        f"{c.folder.parent.relative_to(CASES_DIR)} (the view is {sql_path(files[c.view])})"
        for c in CASES
        if c.view in files
        and c.folder.parent.parent.relative_to(CASES_DIR) != files[c.view].parent.relative_to(SQL_DIR)
    )
    assert not misplaced, f"view cases outside their view's folder: {misplaced}"


# ---------------------------------------------------------------- the comparison itself can fail


def _case(expected, columns=("a", "b"), query="SELECT a, b FROM t"):
    from viewtest import Case

    return Case("t", "c", CASES_DIR, query=query, columns=list(columns), expected=[list(r) for r in expected])


@pytest.mark.parametrize(
    ("expected", "got", "ok"),
    [
        ([["1", "x"]], [(1, "x")], True),
        ([["1", "x"]], [(2, "x")], False),  # a wrong integer
        ([["1", None]], [(1, "")], False),  # NULL is not the empty string
        ([["1", ""]], [(1, "")], True),
        ([["0.1", "x"]], [(0.1 + 1e-15, "x")], True),  # floats to 1e-9, relative
        ([["0.1", "x"]], [(0.1001, "x")], False),
        ([["1", "x"]], [(1, "x"), (1, "x")], False),  # an extra row
        ([["1", "x"], ["1", "x"]], [(1, "x")], False),  # a missing duplicate
        ([["true", "[1, 2]"]], [(True, [1, 2])], True),
        ([["true", "[1, 2]"]], [(True, [2, 1])], False),  # lists keep their order
        ([["1", '{"k": null}']], [(1, {"k": None})], True),
    ],
)
def test_compare_unordered(expected, got, ok):
    case = _case(expected)
    if ok:
        compare(case, ["a", "b"], got)
    else:
        with pytest.raises(AssertionError):
            compare(case, ["a", "b"], got)


def test_compare_order_and_columns():
    ordered = _case([["1", "x"], ["2", "y"]], query="SELECT a, b FROM t ORDER BY a")
    compare(ordered, ["a", "b"], [(1, "x"), (2, "y")])
    with pytest.raises(AssertionError, match="in order"):
        compare(ordered, ["a", "b"], [(2, "y"), (1, "x")])
    compare(_case([["1", "x"], ["2", "y"]]), ["a", "b"], [(2, "y"), (1, "x")])  # no ORDER BY: a multiset
    with pytest.raises(AssertionError, match="columns"):
        compare(_case([["1", "x"]]), ["a", "c"], [(1, "x")])


def test_csv_cells(tmp_path):
    from viewtest import _read_csv

    path = tmp_path / "t.csv"
    path.write_text('# a comment\na,b,c\n1,,""\n"x,y","say ""hi""",=[1]\n')
    assert _read_csv(path) == (["a", "b", "c"], [["1", None, ""], ["x,y", 'say "hi"', "=[1]"]])

"""The view diff-tests (tests/viewtest.py, cases in tests/views/<view>/<case>/): each case's rows on DuckDB,
the same cases on Spark where pyspark and Java are there (slow), and every view of sql/ has a case."""

from __future__ import annotations

import shutil

import pytest
from viewtest import CASES_DIR, all_cases, compare, run_duckdb, run_spark, view_names

CASES = all_cases()

# Views without a case yet, each with why: this list only shrinks (the test below fails on a view
# missing from it and on a listed view that has a case).
UNCOVERED: dict[str, str] = {}


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_view_case_duckdb(case):
    compare(case, *run_duckdb(case))


@pytest.fixture(scope="session")
def spark():
    pytest.importorskip("pyspark", reason="pyspark is not installed: the Spark run of the view cases needs it")
    if shutil.which("java") is None:
        pytest.skip("no java on PATH: Spark cannot start")
    from warehouse.spark import spark_session

    return spark_session("local[1]", app_name="tracehouse-view-cases")


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_view_case_spark(spark, case):
    compare(case, *run_spark(spark, case))


def test_every_view_has_a_case():
    covered = {c.view for c in CASES}
    views = set(view_names())
    missing = sorted(views - covered - set(UNCOVERED))
    assert not missing, f"views without a case in tests/views/ (add one, see tests/views/README.md): {missing}"
    done = sorted(set(UNCOVERED) & covered)
    assert not done, f"these views have a case now: take them out of UNCOVERED: {done}"
    unknown = sorted(set(UNCOVERED) - views)
    assert not unknown, f"UNCOVERED names no view of sql/: {unknown}"
    strays = sorted(p.parent.name for p in CASES_DIR.glob("*/*/expected.csv") if p.parent.parent.name not in views)
    assert not strays, f"tests/views/ has cases for no view of sql/: {strays}"

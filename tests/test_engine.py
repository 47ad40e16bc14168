"""The one engine seam (warehouse/engine.py): `open` and the four things that differ by engine.

Two small synthesized runs (serving-decode, one rank, two steps) in a warehouse of this module's own. Each
test would fail if the seam got it wrong: a connection that saw other runs, a focus not given back (the
next report would read one run only), a store read for an engine whose figures it does not hold, a refusal
that one engine makes and the other not, a rule computed differently over rows than over a warehouse.
The Spark half runs where pyspark and Java are (marked slow; tests/test_spark.py compares every view).
"""

from __future__ import annotations

import datetime as dt
import shutil
import subprocess

import pyarrow as pa
import pytest
from tracehouse.warehouse import engine
from tracehouse.warehouse.store import Warehouse

from tracehouse.errors import QueryRefused, TracehouseError


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    from tracehouse.ingest.load import ingest_paths
    from tracehouse.synth import write_scenario

    base = tmp_path_factory.mktemp("engine")
    wh = Warehouse(base / "wh")
    ids = []
    for seed in (1, 2):
        trace = write_scenario("serving-decode", base / f"s{seed}", ranks=1, steps=2, layers=1, seed=seed)
        [outcome] = ingest_paths(wh, [trace], analyse=False)
        ids.append(outcome.run_id)
    assert len(set(ids)) == 2
    return wh, ids


def _runs(con) -> list[str]:
    return [r[0] for r in con.execute("SELECT run_id FROM runs ORDER BY run_id").fetchall()]


def _kernel_runs(con, view: str = "kernel_summary") -> set[str]:
    """The runs a view above the tables sees (on Spark a shallow one, _busy_islands, which reads only
    kernels: kernel_summary's chain of views took ~70 s to compute there, for the same check)."""
    return {r[0] for r in con.execute(f"SELECT DISTINCT run_id FROM {view}").fetchall()}


def test_open_sees_every_run_or_the_runs_asked_for(two_runs):
    wh, (a, b) = two_runs
    assert _runs(engine.open(wh)) == sorted([a, b])
    focused = engine.open(wh, runs=[a])
    assert _runs(focused) == [a] and _kernel_runs(focused) == {a}  # a view above the tables, too
    assert _runs(engine.open(str(wh.root), "duckdb", runs=[b])) == [b]  # a local folder given as text


def test_focused_gives_the_focus_back(two_runs):
    wh, (a, b) = two_runs
    con = engine.open(wh)
    with engine.focused(con, [a]) as on:
        assert _runs(on) == [a] and _kernel_runs(on) == {a}
    assert _runs(con) == sorted([a, b])
    with pytest.raises(ZeroDivisionError), engine.focused(con, [b]):
        1 / 0  # noqa: B018 - a failing report must not leave the connection focused
    assert _runs(con) == sorted([a, b])
    narrow = engine.open(wh, runs=[a])  # a connection focused when opened gets its own focus back
    with engine.focused(narrow, [b]) as on:
        assert _runs(on) == [b]
    assert _runs(narrow) == [a]


def test_a_reader_never_derives_and_reads_kept_rows_once_derived(two_runs):
    """Opening a connection writes nothing (no derived/ folder, no lock); once warehouse.derived.derive has
    kept a run, a new connection reads its per-run views kept, with the same report."""
    from tracehouse.reports.run import build_run_report, render_run_report
    from tracehouse.warehouse.catalog import per_run_views
    from tracehouse.warehouse.derived import derive, is_derived

    wh, (a, _) = two_runs
    computed = render_run_report(build_run_report(engine.open(wh, runs=[a]), a), "json")
    assert not is_derived(wh, a) and not (wh.root / "derived").exists(), "a reader wrote"
    assert derive(wh, [a]) == {a: None}
    con = engine.open(wh, runs=[a])
    temp = {r[0] for r in con.execute("SELECT view_name FROM duckdb_views() WHERE temporary").fetchall()}
    assert set(per_run_views()) <= temp
    assert render_run_report(build_run_report(con, a), "json") == computed


def test_store_of_is_the_duckdb_connections_own_warehouse(two_runs):
    wh, _ = two_runs
    assert engine.store_of(engine.open(wh)).root == wh.root
    assert engine.store_of(engine.open_tables({})) is None  # rows of no warehouse: nothing stored to read


def test_run_query_reads_and_refuses(two_runs):
    wh, (a, b) = two_runs
    con = engine.open(wh)
    columns, rows = engine.run_query(con, "SELECT run_id FROM runs ORDER BY run_id")
    assert columns == ["run_id"] and [r[0] for r in rows] == sorted([a, b])
    for bad in ("DROP VIEW kernels", "SELECT * FROM read_parquet('/etc/passwd')"):
        with pytest.raises(QueryRefused):
            engine.run_query(con, bad)


def test_open_refuses_in_one_line(two_runs):
    wh, _ = two_runs
    with pytest.raises(TracehouseError, match="unknown engine 'oracle'"):
        engine.open(wh, "oracle")
    with pytest.raises(TracehouseError, match="DuckDB engine reads a local folder") as info:
        engine.open("s3a://bucket/wh")
    assert "--engine spark" in info.value.hint


def test_the_cli_offers_the_engines_of_the_seam():
    import click

    from tracehouse.cli import main

    for command in ("sql", "report", "diff", "trend"):
        [option] = [p for p in main.commands[command].params if p.name == "engine"]
        assert isinstance(option.type, click.Choice) and tuple(option.type.choices) == engine.ENGINES, command


def _history(values: list[float]) -> tuple[pa.Table, pa.Table]:
    t0 = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
    runs = pa.Table.from_pylist(
        [
            {
                "run_id": f"r{i:02d}",
                "ingested_at": t0,
                "labels": [("series", "s")],
                "framework": "f",
                "model": "m",
                "hardware": "h",
                "commit": f"c{i:02d}",
                "commit_time": (t0 + dt.timedelta(hours=i)).isoformat(),
                "series": "s",
            }
            for i in range(len(values))
        ],
        schema=pa.schema(
            [
                ("run_id", pa.string()),
                ("ingested_at", pa.timestamp("us", tz="UTC")),
                ("labels", pa.map_(pa.string(), pa.string())),
                ("framework", pa.string()),
                ("model", pa.string()),
                ("hardware", pa.string()),
                ("commit", pa.string()),
                ("commit_time", pa.string()),
                ("series", pa.string()),
            ]
        ),
    )
    metrics = pa.Table.from_pylist(
        [
            {
                "run_id": f"r{i:02d}",
                "rank": None,
                "phase": "decode",
                "metric": "step_time.median",
                "value": v,
                "better": "lower",
                "spread": 0.0,
            }
            for i, v in enumerate(values)
        ],
        schema=pa.schema(
            [
                ("run_id", pa.string()),
                ("rank", pa.int32()),
                ("phase", pa.string()),
                ("metric", pa.string()),
                ("value", pa.float64()),
                ("better", pa.string()),
                ("spread", pa.float64()),
            ]
        ),
    )
    return runs, metrics


def test_open_tables_computes_a_view_once_with_the_same_rows():
    """The trend rule over rows (reports.trend.evaluate): trend computed once (a temp table that regression
    reads) gives the rows trend as a view gives, and the step up at run 10 is flagged."""
    from tracehouse.reports.trend import RULE_VIEWS, evaluate

    runs, metrics = _history([1000.0 + (i % 3) for i in range(10)] + [1300.0] * 3)
    kept = evaluate(runs, metrics)
    assert (
        kept.execute(
            "SELECT count(*) FROM duckdb_tables() WHERE table_name = 'trend' AND temporary"
        ).fetchone()[0]
        == 1
    )
    plain = engine.open_tables({"runs": runs, "run_metrics": metrics}, RULE_VIEWS)
    assert plain.execute("SELECT count(*) FROM duckdb_tables() WHERE table_name = 'trend'").fetchone()[0] == 0
    query = "SELECT * FROM regression ORDER BY ALL"
    rows = kept.execute(query).fetchall()
    assert rows == plain.execute(query).fetchall() and len(rows) == 13
    flagged = [
        r for r in kept.execute("SELECT run_id FROM regression WHERE flagged ORDER BY run_id").fetchall()
    ]
    assert flagged and flagged[0][0] == "r10"


# ---- the same seam on Spark --------------------------------------------------------------------------


def _spark_ok() -> bool:
    try:
        import pyspark  # noqa: F401
    except ImportError:
        return False
    if shutil.which("java") is None:
        return False
    try:
        return (
            subprocess.run(["java", "-version"], check=False, capture_output=True, timeout=60).returncode == 0
        )
    except (OSError, subprocess.TimeoutExpired):
        return False


def test_the_seam_on_spark(two_runs):
    if not _spark_ok():
        pytest.skip("pyspark and a working Java 17+ are needed for --engine spark")
    from tracehouse.errors import QueryError

    wh, (a, b) = two_runs
    duck = engine.open(wh)
    every = engine.open(wh, "spark", master="local[1]")
    assert _runs(every) == sorted([a, b])
    assert engine.store_of(every) is None  # Spark computes its own figures, never DuckDB's stored ones
    with engine.focused(every, [a]) as on:  # a new catalogue, focused and computed for a only
        assert on is not every and _runs(on) == [a] and _kernel_runs(on, "_busy_islands") == {a}
        with engine.focused(on, [a]) as same:
            assert same is on  # already focused on it
    assert _runs(every) == sorted([a, b])
    query = "SELECT kind, count(*) AS n, sum(dur_ns) AS ns FROM kernels GROUP BY kind ORDER BY kind"
    assert engine.run_query(every, query) == engine.run_query(duck, query)
    with pytest.raises(QueryRefused):
        engine.run_query(every, "DROP VIEW kernels")
    with pytest.raises(QueryError):  # DuckDB's catalogue functions are not emulated: no report asks them
        every.execute("SELECT view_name FROM duckdb_views()").fetchall()

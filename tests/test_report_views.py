"""The report figures that moved into sql/ (issue 16): step_components (the run report's step summary),
uncategorized (its `other` share), stream_share (the streams that carry work), report_params (the 1 %
bar), step_kernel_time and run_step_time (the diff's time per step).

Truth: synth/situations/report_figures.py places every activity at exact ns, so each row is known before
the views run; the run report and the diff are then checked to show exactly those rows. On real traces the
figures are checked against sums taken another way (the trace file itself, the `steps` view's per-category
columns), and the category vocabulary of steps.sql / step_latency.sql / the charts' colours against
warehouse.rules.CATEGORIES, its one definition.
"""

from __future__ import annotations

import gzip
import json
import re
from decimal import Decimal
from pathlib import Path

import pytest
from conftest import GPU_CATS, TRACES, query_rows
from tracehouse.warehouse.catalog import connect, view_files
from tracehouse.warehouse.rules import CATEGORIES

ROOT = Path(__file__).resolve().parents[1]
NAME = "report-step-figures"
NAMED = ("attention", "moe", "gemm", "communication", "norm", "other")


@pytest.fixture(scope="module")
def figures(warehouses):
    """(Warehouse, run id, expect) of the situation, ingested with its stored analyses (as a user's run)."""
    from warehouses import situation

    built = warehouses.get([situation(NAME)], derived=True)
    return built.warehouse, built.run_ids[0], built.truths[0]["expect"]


@pytest.fixture(scope="module")
def con(figures):
    c = connect(figures[0])
    yield c
    c.close()


def test_step_components_are_the_synthesized_sums(figures, con):
    _, run_id, expect = figures
    for step, want in expect["step_components"].items():
        got = query_rows(
            con,
            """SELECT component, categories, gpu_time_ns, share_of_wall FROM step_components
                                 WHERE run_id = ? AND step = ? ORDER BY gpu_time_ns DESC, component""",
            [run_id, int(step)],
        )
        assert got == want, step
    # the named components stay themselves, `other` is never merged, the rest is one row naming its members
    assert {r["component"] for r in expect["step_components"]["0"]} == {
        "gemm",
        "attention",
        "communication",
        "other",
        "norm",
        "rest (rope, elementwise)",
    }


def test_uncategorized_leaves_out_what_a_rule_files_as_other(figures, con):
    _, run_id, expect = figures
    rows = query_rows(con, "SELECT * FROM uncategorized WHERE run_id = ?", [run_id])
    total = {
        k: sum(r[k] for r in rows) for k in ("gpu_time_ns", "other_ns", "known_other_ns", "uncategorized_ns")
    }
    want = expect["uncategorized"]
    assert total == {k: want[k] for k in total}
    assert (
        sum(r["uncategorized_ns"] for r in rows) / sum(r["gpu_time_ns"] for r in rows)
        == want["uncategorized_share"]
    )
    for r in rows:
        assert r["uncategorized_share"] == (
            r["uncategorized_ns"] / r["gpu_time_ns"] if r["gpu_time_ns"] else None
        )


def test_step_kernel_time_is_time_per_rank_step(figures, con):
    _, run_id, expect = figures
    rows = {
        r.pop("name"): r
        for r in query_rows(
            con,
            """
        SELECT name, category, gpu_time_ns, launches, rank_steps, ns_per_step, launches_per_step, ns_per_launch
        FROM step_kernel_time WHERE run_id = ?""",
            [run_id],
        )
    }
    assert rows == expect["step_kernel_time"]  # the GEMM after the last step is in no row
    got = query_rows(con, "SELECT * EXCLUDE (run_id) FROM run_step_time WHERE run_id = ?", [run_id])
    assert got == [expect["run_step_time"]]


def test_stream_share_is_each_streams_part_of_the_run(figures, con):
    _, run_id, expect = figures
    rows = query_rows(
        con, "SELECT stream, gpu_time_ns, share, carries_work FROM stream_share WHERE run_id = ?", [run_id]
    )
    total = expect["uncategorized"]["gpu_time_ns"]
    assert {str(r["stream"]): r["gpu_time_ns"] for r in rows} == {
        k: v["gpu_time_ns"] for k, v in expect["stream_share"].items()
    }
    assert all(
        r["share"] == r["gpu_time_ns"] / total and r["carries_work"] == (r["share"] >= 0.01) for r in rows
    )


def test_run_report_shows_the_views_rows(figures):
    from tracehouse.reports.run import build_run_report
    from tracehouse.warehouse.engine import open as open_connection

    wh, run_id, expect = figures
    report = build_run_report(open_connection(wh, runs=[run_id]), run_id)
    want = expect["step_components"][str(report.step.step)]
    assert [(c.category, c.gpu_time_ns, c.share) for c in report.step.components] == [
        (r["component"], r["gpu_time_ns"], r["share_of_wall"]) for r in want
    ]
    assert report.other_share == expect["uncategorized"]["uncategorized_share"]


def test_diff_totals_are_run_step_time(figures, con):
    from tracehouse.reports.diff import build_diff

    wh, run_id, expect = figures
    for on in (con, connect(wh, kept=False)):  # the run's kept rows (derived at ingest), and computed
        d = build_diff(on, run_id, run_id)
        assert d.total_base_ns == d.total_target_ns == expect["run_step_time"]["gpu_ns_per_step"]
        assert d.base.outside_steps_ns == expect["run_step_time"]["outside_steps_ns"]
        per_step = {k.label: k.base_ns for k in d.kernels}
        assert per_step == {n: v["ns_per_step"] for n, v in expect["step_kernel_time"].items()}
        assert any("0.020 ms of GPU time lies outside any step" in n for n in d.notes)


# ---- one definition of the category vocabulary ------------------------------------------------------------
def test_category_columns_follow_the_vocabulary():
    """steps.sql has one `<category>_ns` column per category, step_latency.sql sums those that are not
    its own columns, the charts colour each: all follow warehouse.rules.CATEGORIES (read from there)."""
    from tracehouse.reports.svg import CATEGORY_COLORS

    steps = view_files()["steps"].read_text()
    filtered = re.findall(r"FILTER \(WHERE category = '(\w+)'\) AS (\w+)_ns", steps)
    assert [c for c, _ in filtered] == list(CATEGORIES) and all(c == a for c, a in filtered)
    assert list(CATEGORY_COLORS) == list(CATEGORIES)
    latency = view_files()["step_latency"].read_text()
    listed = [
        c for c in re.findall(r"sum\((\w+)_ns\) AS \1_ns", latency) if c != "gpu_busy"
    ]  # not a category
    folded = re.findall(r"(\w+)_ns", re.search(r"sum\((activation_ns[^)]*)\) AS other_ns", latency).group(1))
    # every category once: its own column or folded into other_ns
    assert sorted(listed + folded) == sorted(CATEGORIES) and len(set(listed + folded)) == len(CATEGORIES)


def test_category_columns_are_generated_from_the_vocabulary(tmp_path, monkeypatch):
    """steps' and step_latency's category lines are what sql/steps/category_columns.py writes from the
    vocabulary (the check passes as shipped), and a vocabulary with one more category gives both views its
    column: the lines follow the rule data, they are not typed by hand."""
    from tracehouse.sql.steps import category_columns

    assert category_columns.stale() == []
    for name in ("steps.sql", "step_latency.sql"):
        (tmp_path / name).write_text((category_columns.HERE / name).read_text())
    monkeypatch.setattr(category_columns, "HERE", tmp_path)
    monkeypatch.setattr(category_columns, "CATEGORIES", (*CATEGORIES, "scan"))
    assert category_columns.stale() == ["steps.sql", "step_latency.sql"]
    assert category_columns.main([]) == 0 and category_columns.stale() == []
    steps = (tmp_path / "steps.sql").read_text()
    assert (
        "FILTER (WHERE category = 'scan') AS scan_ns" in steps
        and "coalesce(c.scan_ns, 0) AS scan_ns" in steps
    )
    assert "embedding_ns + other_ns + scan_ns) AS other_ns" in (tmp_path / "step_latency.sql").read_text()


# ---- real traces: the same figures taken another way ------------------------------------------------------
REAL = "nvidia/h100_qwen1.5-0.5b.json.gz"


def _trace_gpu_ns(path: Path) -> int:
    """Sum of the GPU activities' durations, from the file's decimal µs text (not through ingest)."""
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rb") as f:
        events = json.loads(f.read(), parse_float=Decimal)
    events = events["traceEvents"] if isinstance(events, dict) else events
    return sum(
        int(Decimal(str(e.get("dur", 0))) * 1000)
        for e in events
        if e.get("ph") == "X"
        and str(e.get("cat", "")).lower() in GPU_CATS
        and Decimal(str(e.get("dur", 0))) > 0
    )


@pytest.fixture(scope="module")
def real(real_runs):
    if not (TRACES / REAL).is_file():
        pytest.skip(f"{REAL} not in ../shared/traces")
    wh, run_of = real_runs
    c = connect(wh, runs=[run_of[REAL]])
    yield c, run_of[REAL]
    c.close()


def test_real_run_step_time_adds_up_to_the_trace(real):
    con, run_id = real
    [row] = query_rows(con, "SELECT * FROM run_step_time WHERE run_id = ?", [run_id])
    assert row["gpu_time_ns"] == _trace_gpu_ns(TRACES / REAL)
    assert row["in_steps_ns"] + row["outside_steps_ns"] == row["gpu_time_ns"]
    assert (
        row["rank_steps"]
        == con.execute("SELECT count(*) FROM steps WHERE run_id = ?", [run_id]).fetchone()[0]
    )
    kernels = con.execute(
        "SELECT sum(gpu_time_ns), sum(ns_per_step) FROM step_kernel_time WHERE run_id = ?", [run_id]
    ).fetchone()
    assert kernels[0] == row["in_steps_ns"]
    assert kernels[1] == pytest.approx(row["gpu_ns_per_step"], rel=1e-12)


def test_real_step_components_are_the_steps_category_columns(real):
    con, run_id = real
    steps = query_rows(con, "SELECT * FROM steps WHERE run_id = ?", [run_id])
    assert steps
    for s in steps:
        comps = query_rows(
            con,
            "SELECT * FROM step_components WHERE run_id = ? AND rank = ? AND step = ?",
            [run_id, s["rank"], s["step"]],
        )
        by_cat = {c: s[f"{c}_ns"] for c in CATEGORIES if s[f"{c}_ns"]}
        for r in comps:
            assert r["gpu_time_ns"] == sum(by_cat[c] for c in r["categories"])
            named = r["component"] in NAMED
            assert named == (r["categories"] == [r["component"]])
        assert sorted(c for r in comps for c in r["categories"]) == sorted(by_cat)
        rest = [r for r in comps if r["component"] not in NAMED]
        assert len(rest) <= 1 and all(c not in NAMED for r in rest for c in r["categories"])


def test_real_uncategorized_is_the_unmatched_kernels(real):
    con, run_id = real
    got = con.execute(
        "SELECT sum(uncategorized_ns), sum(gpu_time_ns) FROM uncategorized WHERE run_id = ?", [run_id]
    ).fetchone()
    unmatched = con.execute(
        """
        SELECT coalesce(sum(k.dur_ns), 0) FROM _kernel_facts AS k
        JOIN kernel_category AS c ON c.name = k.name AND c.kind = k.kind
        WHERE k.run_id = ? AND k.category = 'other' AND c.rule_name = 'unmatched'""",
        [run_id],
    ).fetchone()[0]
    assert got[0] == unmatched
    assert got[1] == _trace_gpu_ns(TRACES / REAL)


def test_the_reporting_bar_is_read_from_report_params(figures):
    """One definition of the 1 % bar: overlap_opportunity's `reportable` and the report's kernel table
    and stream count follow sql/report_params, changed here for one session."""
    from tracehouse.reports.run import build_run_report

    wh, run_id, _ = figures
    c = connect(wh, kept=False)  # computed views: the session's report_params reaches overlap_opportunity
    try:
        shipped = build_run_report(c, run_id)
        assert c.execute("SELECT * FROM report_params").fetchall() == [(0.01, 25, 10)]
        assert len(shipped.phases[0].kernels) == 8 and shipped.n_streams == 2
        c.execute(
            "CREATE OR REPLACE TEMP VIEW report_params AS SELECT 0.2 AS report_bar, 25 AS top_kernels, "
            "0 AS always_shown"
        )
        report = build_run_report(c, run_id)
        shares = {k.name: k.share for k in shipped.phases[0].kernels}
        assert [k.name for k in report.phases[0].kernels] == [n for n, s in shares.items() if s >= 0.2]
        assert len(report.phases[0].kernels) == 2  # the GEMMs (49 %) and flash attention (22 %)
        assert report.n_streams == 1  # the all-reduce's stream holds 14 % of the GPU time
        rows = query_rows(
            c, "SELECT share, verdict, reportable FROM overlap_opportunity WHERE run_id = ?", [run_id]
        )
        assert rows and all(
            r["reportable"] == (r["share"] >= 0.2 and r["verdict"] != "single-stream") for r in rows
        )
    finally:
        c.close()

"""Synthesized runs, ingested, give back exactly the figures the synthesizer knows (ground_truth.json)."""

from __future__ import annotations

import pytest
from conftest import RunFocused
from tracehouse.warehouse.catalog import connect

CASES = [
    ("serving-decode", "nvidia", {"ranks": 2, "steps": 3, "layers": 3}),
    ("serving-decode", "amd", {"ranks": 2, "steps": 2, "layers": 2}),
    ("serving-prefill", "nvidia", {"ranks": 2, "steps": 2, "layers": 2}),
    ("training", "nvidia", {"ranks": 2, "steps": 3, "layers": 2}),
    ("training", "amd", {"ranks": 1, "steps": 2, "layers": 2}),
]


@pytest.fixture(scope="module")
def synth_runs(warehouses):
    """{case id: (connection, run_id, truth)} for every case, in one warehouse."""
    from warehouses import scenario

    # not derived: the views are computed, not read stored
    built = warehouses.get(
        [scenario(name, vendor=vendor, seed=i, **opts) for i, (name, vendor, opts) in enumerate(CASES)]
    )
    wh = built.warehouse
    runs = {
        f"{name}-{vendor}": (run_id, truth)
        for (name, vendor, _), run_id, truth in zip(CASES, built.run_ids, built.truths)
    }
    # each query computes the views of the run it names only (the others' rows are filtered out anyway)
    con = RunFocused(connect(wh), [run_id for run_id, _ in runs.values()])
    return con, runs


IDS = [f"{s}-{v}" for s, v, _ in CASES]
FIGURES = ("span_ns", "busy_ns", "compute_ns", "exposed_comm_ns", "exposed_memory_ns", "idle_ns")


@pytest.mark.parametrize("case", IDS)
def test_whole_rank_timeline_equals_truth(synth_runs, case):
    con, runs = synth_runs
    run_id, truth = runs[case]
    for expected in truth["ranks_summary"]:
        row = con.execute(
            f"SELECT {', '.join(FIGURES)}, activities FROM gpu_timeline WHERE run_id = ? AND rank = ? "
            "AND variant = 'exact' AND step IS NULL",
            [run_id, expected["rank"]],
        ).fetchone()
        assert dict(zip(FIGURES, row[:-1])) == {f: expected[f] for f in FIGURES}
        assert row[-1] == expected["n_activities"]


@pytest.mark.parametrize("case", IDS)
def test_step_timeline_equals_truth(synth_runs, case):
    """Steps are matched by their host annotation's start: each truth step is one tracehouse step."""
    con, runs = synth_runs
    run_id, truth = runs[case]
    rows = con.execute(
        f"""
        SELECT s.rank, s.start_ns, s.phase, {", ".join("g." + f for f in FIGURES)}
        FROM step_spans s JOIN gpu_timeline g
          ON g.run_id = s.run_id AND g.rank = s.rank AND g.step = s.step AND g.variant = 'exact'
        WHERE s.run_id = ?""",
        [run_id],
    ).fetchall()
    ours = {(r[0], r[1]): r for r in rows}
    for step in truth["steps"]:
        key = (step["rank"], step["host_start_ns"])
        assert key in ours, f"no step starting at {key}"
        row = ours[key]
        assert dict(zip(FIGURES, row[3:])) == {f: step[f] for f in FIGURES}
        if step["phase"] != "unknown":
            assert row[2] == step["phase"]


@pytest.mark.parametrize("case", IDS)
def test_kernel_time_and_categories_equal_truth(synth_runs, case):
    con, runs = synth_runs
    run_id, truth = runs[case]
    ours = {
        (name, cat): (t, n)
        for name, cat, t, n in con.execute(
            "SELECT name, category, sum(gpu_time_ns), sum(launches) FROM kernel_summary WHERE run_id = ? GROUP BY ALL",
            [run_id],
        ).fetchall()
    }
    expected = {}
    for rank in truth["ranks_summary"]:
        for name, kv in rank["kernels"].items():
            key = (name, truth["kernel_categories"][name])
            t, n = expected.get(key, (0, 0))
            expected[key] = (t + kv["time_ns"], n + kv["count"])
    assert ours == expected


@pytest.mark.parametrize("case", IDS)
def test_stream_busy_and_exclusive_equal_truth(synth_runs, case):
    con, runs = synth_runs
    run_id, truth = runs[case]
    rows = con.execute(
        "SELECT rank, stream, busy_ns, exclusive_ns, activities FROM stream_summary "
        "WHERE run_id = ? AND step IS NULL",
        [run_id],
    ).fetchall()
    ours = {(r, s): (b, e, n) for r, s, b, e, n in rows}
    expected = {
        (rank["rank"], int(s)): (v["busy_ns"], v["exclusive_ns"], v["count"])
        for rank in truth["ranks_summary"]
        for s, v in rank["streams"].items()
    }
    assert ours == expected


@pytest.mark.parametrize("case", IDS)
def test_linked_counts_equal_truth(synth_runs, case):
    con, runs = synth_runs
    run_id, truth = runs[case]
    rows = dict(
        con.execute(
            "SELECT rank, count(*) FILTER (WHERE linked) FROM kernels WHERE run_id = ? GROUP BY rank",
            [run_id],
        ).fetchall()
    )
    assert rows == {r["rank"]: r["n_linked"] for r in truth["ranks_summary"]}


def test_invariants_hold_on_synthesized_runs(synth_runs):
    con, _ = synth_runs
    assert con.execute("SELECT * FROM invariant_violations").fetchall() == []

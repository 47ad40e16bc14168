"""Steps as the engine ran them (ingest/sql/60_steps.sql) and the one GPU busy % (sql/steps/steps.sql's GPU
window; step_breakdown's gpu_utilization and run_metrics' gpu_busy_pct read it).

Synthesized (synth/situations/engine_steps.py, truth from the simulated schedule): vLLM piecewise CUDA
graphs with and without the serving annotation, an async engine's launch-ahead, and repeating host
bursts with no marker. Real (../shared): the SGLang and vLLM inference traces, checked against an
independent read of the file."""

from __future__ import annotations

import gzip
import json
import re

import pytest
from conftest import TRACES, query_rows
from tracehouse.ingest.load import ingest_paths
from tracehouse.warehouse.catalog import connect
from tracehouse.warehouse.store import Warehouse

NAMES = ["vllm-piecewise-graphs", "vllm-piecewise-graphs-bare", "async-launch-ahead", "host-bursts"]


@pytest.fixture(scope="module")
def engine(situation_warehouse):
    wh, runs, expect = situation_warehouse
    return wh, {n: runs[n] for n in NAMES}, {n: expect[n]["engine_steps"] for n in NAMES}


_STEPS: dict = {}


def _steps(wh, run_id):
    """(the run's steps with their card figure, its first GPU start)."""
    if run_id not in _STEPS:
        _STEPS[run_id] = _read_steps(wh, run_id)
    return _STEPS[run_id]


def _read_steps(wh, run_id):
    con = connect(wh, runs=[run_id])
    rows = query_rows(
        con,
        "SELECT s.step, s.source, s.phase, s.activities, s.gpu_window_start_ns, s.gpu_window_ns, "
        "s.gpu_busy_pct, b.gpu_utilization, s.host_start_ns FROM steps s "
        "JOIN step_breakdown b USING (run_id, rank, step) WHERE s.run_id = ? ORDER BY s.host_start_ns",
        [run_id],
    )
    (t0,) = con.execute("SELECT min(start_ns) FROM kernels WHERE run_id = ?", [run_id]).fetchone()
    return rows, t0


def _runs_row_busy(wh, run_id):
    """run_metrics' gpu_busy_pct per phase (rank NULL): what `tracehouse runs` shows."""
    rows = query_rows(
        connect(wh, runs=[run_id]),
        "SELECT phase, value FROM run_metrics WHERE run_id = ? AND rank IS NULL AND metric = 'gpu_busy_pct'",
        [run_id],
    )
    return {r["phase"]: r["value"] for r in rows}


@pytest.mark.parametrize("name", NAMES)
def test_steps_are_the_engine_iterations(engine, name):
    wh, runs, expect = engine
    rows, _ = _steps(wh, runs[name])
    truth = expect[name]["steps"]
    # never one step per graph launch: as many steps as the engine ran, each with all its activities
    assert len(rows) == len(truth)
    assert {r["source"] for r in rows} == {expect[name]["source"]}
    for row, want in zip(rows, (truth[k] for k in sorted(truth, key=int))):
        assert row["phase"] == want["phase"]
        assert row["activities"] == want["activities"]


@pytest.mark.parametrize("name", NAMES)
def test_busy_pct_is_measured_in_the_steps_gpu_window(engine, name):
    wh, runs, expect = engine
    rows, t0 = _steps(wh, runs[name])
    truth = [expect[name]["steps"][k] for k in sorted(expect[name]["steps"], key=int)]
    # the trace's times are the simulation's plus an offset: align on the first GPU activity
    sim_t0 = min(w["gpu_window_start_ns"] for w in truth)
    for row, want in zip(rows, truth):
        assert row["gpu_window_start_ns"] - t0 == want["gpu_window_start_ns"] - sim_t0
        assert row["gpu_window_ns"] == want["gpu_window_ns"]
        assert row["gpu_busy_pct"] == pytest.approx(want["gpu_busy_pct"], rel=1e-9)
        # the card (step_breakdown) and the runs row (run_metrics) use the same figure
        assert row["gpu_utilization"] == pytest.approx(want["gpu_busy_pct"] / 100, rel=1e-9)


@pytest.mark.parametrize("name", ["vllm-piecewise-graphs", "async-launch-ahead"])
def test_runs_row_is_the_mean_of_the_steps_busy(engine, name):
    """`tracehouse runs` (run_metrics) shows the same figure: the mean over the phase's steps."""
    wh, runs, expect = engine
    truth = expect[name]["steps"].values()
    busy = _runs_row_busy(wh, runs[name])
    for phase in {w["phase"] for w in truth}:
        mine = [w["gpu_busy_pct"] for w in truth if w["phase"] == phase]
        assert busy[phase] == pytest.approx(sum(mine) / len(mine), rel=1e-9)


def test_launch_ahead_is_not_idle(engine):
    """The async engine's host opens each decode step while the GPU still runs the one before: the
    window starts where that work ends, and the decode steps (GPU-bound but for step 4's slow host)
    are near fully busy, not the ~half that busy / host wall made of them."""
    wh, runs, expect = engine
    rows, _ = _steps(wh, runs["async-launch-ahead"])
    truth = expect["async-launch-ahead"]["steps"]
    ahead = [k for k, w in truth.items() if int(k) > 0]
    assert all(truth[k]["host_start_ns"] < truth[k]["gpu_window_start_ns"] for k in ahead)
    assert all(truth[k]["gpu_busy_pct"] > 95 for k in ahead if k != "4")
    assert truth["4"]["gpu_busy_pct"] < 80  # the host-bound step shows its idle
    assert min(r["gpu_busy_pct"] for r in rows if r["step"] != 4 and r["phase"] == "decode") > 95


def test_two_bursts_are_not_steps(tmp_path):
    """Fewer than 3 bursts repeat nothing: the whole rank is one step."""
    from tracehouse.synth.situations.engine_steps import EngineSim
    from tracehouse.synth.situations.timeline import Timeline

    tl = Timeline(with_stack=False)
    sim = EngineSim(tl)
    for step in range(2):
        for _ in range(10):
            sim.launch(step, "void k()", 20_000)
            sim.host(5_000)
        sim.host(3_000_000)
    tl.write(tmp_path / "t" / "rank-0.pt.trace.json.gz")
    wh = Warehouse(tmp_path / "wh")
    [outcome] = ingest_paths(wh, [tmp_path / "t"], analyse=False)
    rows = query_rows(connect(wh), "SELECT source, activities FROM steps WHERE run_id = ?", [outcome.run_id])
    assert [(r["source"], r["activities"]) for r in rows] == [("whole", 20)]


@pytest.mark.parametrize(
    ("calls", "steps"),
    [
        ([17, 1, 4, 1, 75], None),  # one-off bursts between setup calls (alexnet's shape): no steps
        ([40, 10, 10, 11, 10], 5),  # a warm-up burst and four iterations that repeat: five steps
    ],
)
def test_bursts_are_steps_only_where_they_repeat(tmp_path, calls, steps):
    """Host bursts are steps where at least 3 repeat the same work (a launch-call count within 10 % of
    the bursts' median); a warm-up burst beside them is a step too; bursts that do not repeat are none."""
    from tracehouse.synth.situations.engine_steps import EngineSim
    from tracehouse.synth.situations.timeline import Timeline

    tl = Timeline(with_stack=False)
    sim = EngineSim(tl)
    for step, n in enumerate(calls):
        for _ in range(n):
            sim.launch(step, "void k()", 20_000)
            sim.host(5_000)
        sim.host(30_000_000)
    tl.write(tmp_path / "t" / "rank-0.pt.trace.json.gz")
    wh = Warehouse(tmp_path / "wh")
    [outcome] = ingest_paths(wh, [tmp_path / "t"], analyse=False)
    rows = query_rows(
        connect(wh), "SELECT source, activities FROM steps WHERE run_id = ? ORDER BY step", [outcome.run_id]
    )
    flags = query_rows(
        connect(wh),
        "SELECT step, message FROM data_quality WHERE flag = 'no_step_markers' AND run_id = ?",
        [outcome.run_id],
    )
    if steps is None:
        assert [(r["source"], r["activities"]) for r in rows] == [("whole", sum(calls))]
        assert [f["step"] for f in flags] == [0]
    else:
        assert [(r["source"], r["activities"]) for r in rows] == [("host_burst", n) for n in calls]
        # the steps are inferred, and the report says so (a rank row)
        [flag] = flags
        assert flag["step"] is None and f"its {steps} steps are repeating bursts" in flag["message"]


# ---- real traces ---------------------------------------------------------------------------------------
INFERENCE = {
    "sglang_decode": "inference/sglang_decode/sglang_Qwen3-8B_decode.json.gz",
    "sglang_prefilldecode": "inference/sglang_prefilldecode/sglang_Qwen3-8B_prefilldecode.json.gz",
    "vllm_decode_full": "inference/vllm_decode_full/graph_execution.json.gz",
}


def _independent(path):
    """From the file alone (gzip + json): the step markers it holds and, for the one engine step, its
    GPU activities (launched inside the marker's host window), GPU window and busy % (the union of every
    activity on the device inside the window)."""
    with gzip.open(path) as f:
        events = json.load(f)["traceEvents"]
    sglang = [e for e in events if e.get("cat") == "user_annotation" and e["name"].startswith("step[")]
    runner = [
        e
        for e in events
        if e.get("cat") == "python_function"
        and "vllm/" in e["name"]
        and e["name"].split("): ")[-1] == "execute_model"
        and "model_runner.py(" in e["name"]
    ]
    marker = (sglang or runner)[0]
    lo, hi = marker["ts"], marker["ts"] + marker["dur"]
    corr = {
        e["args"]["correlation"]
        for e in events
        if e.get("cat") == "cuda_runtime" and "correlation" in e.get("args", {}) and lo <= e["ts"] <= hi
    }
    gpu = [e for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    mine = [e for e in gpu if e.get("args", {}).get("correlation") in corr]
    start = min(e["ts"] for e in mine)
    end = max(e["ts"] + e["dur"] for e in mine)
    busy, reach = 0.0, start
    for e in sorted(gpu, key=lambda e: e["ts"]):
        s, t = max(e["ts"], reach), min(e["ts"] + e["dur"], end)
        if t > s:
            busy, reach = busy + t - s, t
    phase = {"D": "decode", "E": "prefill"}.get(marker["name"][5:6], "decode")
    return {
        "markers": len(sglang or runner),
        "source": "sglang_step" if sglang else "vllm_execute_model",
        "phase": phase,
        "activities": len(mine),
        "window_us": end - start,
        "busy_pct": 100 * busy / (end - start),
    }


@pytest.fixture(scope="module")
def real(real_runs):
    wh, run_of = real_runs
    return wh, {key: run_of[rel] for key, rel in INFERENCE.items()}


@pytest.mark.parametrize("key", sorted(INFERENCE))
def test_real_inference_steps_and_busy(real, key):
    wh, runs = real
    want = _independent(TRACES / INFERENCE[key])
    rows, _ = _steps(wh, runs[key])
    metrics = _runs_row_busy(wh, runs[key])
    assert len(rows) == want["markers"] == 1
    [row] = rows
    assert (row["source"], row["phase"], row["activities"]) == (
        want["source"],
        want["phase"],
        want["activities"],
    )
    # ns in the warehouse, float us in the file: equal to the file's rounding
    assert row["gpu_window_ns"] / 1000 == pytest.approx(want["window_us"], abs=0.01)
    assert row["gpu_busy_pct"] == pytest.approx(want["busy_pct"], abs=0.01)
    # the card's busy % is the runs row's
    assert row["gpu_utilization"] * 100 == pytest.approx(metrics[row["phase"]], rel=1e-12)


def test_real_sglang_decode_card_is_not_launch_ahead(real):
    """Hand-checked: the SGLang decode step's host window is 465 ms, but its GPU work (one graph replay)
    runs 10.4 ms at 93.5 % busy, which is what the card and the runs row say (not 2 % of 474 ms)."""
    from tracehouse.reports.run import build_run_report
    from tracehouse.reports.runs_table import headlines
    from tracehouse.warehouse.metrics import run_metric_rows

    wh, runs = real
    run_id = runs["sglang_decode"]
    [row], _ = _steps(wh, run_id)
    assert round(row["gpu_busy_pct"], 1) == 93.5
    assert round(row["gpu_window_ns"] / 1e6, 1) == 10.4
    # the report's card and the `tracehouse runs` row show that figure
    report = build_run_report(connect(wh, runs=[run_id]), run_id)
    card = report.step.gpu_utilization
    assert card == pytest.approx(row["gpu_busy_pct"] / 100, rel=1e-12)
    assert headlines(run_metric_rows(wh, [run_id]))[run_id].busy_pct == 93.5
    # the step card shows the step on the GPU (10.4 ms), the 474 ms host window beside it
    from tracehouse.reports.render import render

    page = render("run", report, "html")
    assert re.search(r"10.37 ms[^<]*(<span[^>]*>[^<]*</span>)?</div><div class=\"k\">step on the GPU", page)
    assert "its host window 473.6 ms" in page
    assert "in the step's GPU window of 10.37 ms" in render("run", report, "md")

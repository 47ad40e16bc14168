"""Takeaways that depend on what bounds the step (reports/takeaways.py, synth/situations/takeaway_bounds.py):
the overlap recommendation is drawn where the GPU is the bound and withheld, with its reason, where the
step is host-bound; the overlap rows themselves are the same in both. A real host-bound two-stream trace
(../shared) must not recommend overlap either."""

from __future__ import annotations

import json

import pytest
from conftest import query_rows, require_shared
from tracehouse.ingest.load import ingest_paths
from tracehouse.reports.run import build_run_report, render_run_report, report_json
from tracehouse.synth.situations import write_situation
from tracehouse.synth.truth import load_truth
from tracehouse.warehouse.catalog import connect
from tracehouse.warehouse.store import Warehouse
from warehouses import real

NAMES = ["overlap-host-bound", "overlap-gpu-bound"]


@pytest.fixture(scope="module")
def bounds(situation_warehouse):
    wh, runs, expect = situation_warehouse
    return wh, {n: runs[n] for n in NAMES}, {n: expect[n] for n in NAMES}


@pytest.mark.parametrize("name", NAMES)
def test_overlap_rows_are_the_same_whatever_bounds_the_step(bounds, name):
    wh, runs, expect = bounds
    want = expect[name]["overlap_row"]
    con = connect(wh, runs=[runs[name]])
    [row] = query_rows(
        con,
        "SELECT verdict, recommendation, exclusive_ratio FROM overlap_opportunity "
        "WHERE run_id = ? AND name = ?",
        [runs[name], want["name"]],
    )
    assert (row["verdict"], row["recommendation"]) == (want["verdict"], want["recommendation"])
    assert row["exclusive_ratio"] == 1.0  # the GEMM never runs beside the all-reduce


@pytest.mark.parametrize("name", NAMES)
def test_overlap_takeaway_follows_what_bounds_the_step(bounds, name):
    wh, runs, expect = bounds
    truth = expect[name]
    report = build_run_report(connect(wh, runs=[runs[name]]), runs[name])
    drawn = {t.figure for t in report.takeaways}
    assert drawn >= set(truth["drawn"]), drawn
    assert not drawn & set(truth["not_drawn"]), drawn
    by_reason = {w.figure: w for w in report.withheld if w.reason}
    assert set(by_reason) == set(truth["withheld_reasons"]), report.withheld
    md = render_run_report(report, "md")
    html = render_run_report(report, "html")
    for figure in truth["withheld_reasons"]:
        w = by_reason[figure]
        assert w.flags == []
        idle = round(100 * report.step.gpu_idle_ns / report.step.wall_ns)
        assert f"host-bound: the GPU idles {idle} %" in w.reason  # the figure it rests on, named
        assert idle >= 20
        assert f"Not drawn: a takeaway on `{figure}` (step {report.step.step} is host-bound" in md
        assert (
            f"Not drawn: a takeaway on <code>{figure}</code> (step {report.step.step} is host-bound" in html
        )
        [idle_takeaway] = [t for t in report.takeaways if t.figure == "idle_gaps"]
        assert "mostly waiting for the host launching too late (host-bound gaps)" in idle_takeaway.text
    if "overlap_subject" in truth:
        [t] = [t for t in report.takeaways if t.figure == "overlap_opportunity"]
        assert t.subject == truth["overlap_subject"]
        assert "could overlap" in md
    else:
        assert "could overlap" not in md
    data = json.loads(json.dumps(report_json(report), default=str))
    assert [w["reason"] is not None for w in data["withheld"]].count(True) == len(truth["withheld_reasons"])


def test_real_host_bound_two_stream_trace_recommends_no_overlap(warehouses):
    """a100_nccl_rank0 (DDP training, compute + NCCL streams): hand-checked, its report step (ProfilerStep#4)
    has 222.4 ms of wall, 166.3 ms of it GPU idle, 165.8 ms of that in host-bound gaps; its overlap table
    still has `try overlap` rows (cudnn batch-norm backward, 100 % exclusive), but no takeaway says to
    overlap them."""
    require_shared()
    built = warehouses.get([real("nvidia/a100_nccl_rank0.json.gz")])  # not derived: the views computed
    [run_id] = built.run_ids
    report = build_run_report(connect(built.warehouse, runs=[run_id]), run_id)
    s = report.step
    assert (s.step, s.wall_ns // 100_000, s.gpu_idle_ns // 100_000) == (4, 2224, 1663)
    assert any(o.recommendation == "try overlap" for o in report.overlap)
    assert "overlap_opportunity" not in {t.figure for t in report.takeaways}
    assert "idle_gaps" in {t.figure for t in report.takeaways}
    [w] = [w for w in report.withheld if w.figure == "overlap_opportunity"]
    assert "host-bound: the GPU idles 75 %" in w.reason


def test_interleaved_steps_split_other_steps_work_from_idle(tmp_path):
    """steps-interleaved (synth/situations/steps_interleave.py): the previous step's GEMMs inside a step's GPU
    span are other_steps_ns, not gpu_idle_ns; every part hand-computed, and the parts add up to the wall."""
    out = write_situation("steps-interleaved", tmp_path / "s")
    wh = Warehouse(tmp_path / "wh")
    [outcome] = ingest_paths(wh, [out], analyse=False)
    truth = load_truth(out)["expect"]["step_breakdown"]
    con = connect(wh, runs=[outcome.run_id])
    rows = query_rows(con, "SELECT * FROM step_breakdown WHERE run_id = ? ORDER BY step", [outcome.run_id])
    assert [str(r["step"]) for r in rows] == sorted(truth)
    t0 = con.execute("SELECT min(host_start_ns) FROM steps WHERE run_id = ?", [outcome.run_id]).fetchone()[0]
    for r in rows:
        want = truth[str(r["step"])]
        got = {
            "wall_start_us": (r["wall_start_ns"] - t0) / 1000,
            "wall_end_us": (r["wall_end_ns"] - t0) / 1000,
        }
        got |= {
            k: r[k.replace("_us", "_ns")] / 1000 for k in want if k not in ("wall_start_us", "wall_end_us")
        }
        assert got == want, r["step"]
        parts = (
            "host_setup_ns",
            "gpu_queued_ns",
            "compute_ns",
            "exposed_comm_ns",
            "exposed_memory_ns",
            "other_steps_ns",
            "gpu_idle_ns",
            "host_tail_ns",
        )
        assert sum(r[p] for p in parts) == r["wall_ns"]
    report = build_run_report(con, outcome.run_id)
    md = render_run_report(report, "md")
    assert "other steps' work" in md


def test_unknown_kernels_are_no_dominant_category(situation_warehouse):
    """`other` (kernels no category rule knows) is no category to draw a lesson from: where it is the largest,
    the report says how much GPU time is unknown (the other rule), and the dominant-category takeaway names
    the largest known category (GEMM here, over its bar), never `other` (synth/situations/takeaway_bounds.py:
    the shares are the simulated durations)."""
    wh, runs, expect = situation_warehouse
    name = "unknown-kernels-dominate"
    truth = expect[name]
    report = build_run_report(connect(wh, runs=[runs[name]]), runs[name])
    texts = [t.text for t in report.takeaways if t.figure == "category_summary"]
    assert report.other_share == pytest.approx(truth["other_share"], abs=1e-9)
    assert f"{100 * truth['other_share']:.1f} % of GPU time is in kernels no category rule knows" in texts[-1]
    [dominant] = [t for t in texts if " of GPU time; " in t or t.endswith("% of GPU time.")]
    assert f"gemm is {100 * truth['gemm_share']:.0f} % of GPU time" in dominant
    assert not any("other is" in t or "other 2" in t for t in texts), texts

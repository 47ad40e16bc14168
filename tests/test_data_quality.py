"""Data quality (sql/data_quality) and the run report's use of it: flags raised on synthesized situations
whose ground truth is known (synth/situations/data_quality.py), takeaways withheld from flagged figures,
and hand-checked figures on real traces (../shared/traces)."""

from __future__ import annotations

import gzip
import json
from decimal import Decimal

import pytest
from conftest import ROOT, TRACES
from tracehouse.reports.run import build_run_report, render_run_report, report_json
from tracehouse.synth.situations import data_quality as dq_situations
from tracehouse.warehouse.catalog import connect

MINE = sorted(
    name
    for name, s in __import__("tracehouse.synth.situations", fromlist=["SITUATIONS"]).SITUATIONS.items()
    if s.write.__module__ == dq_situations.__name__
)
SCHEMA = json.loads((ROOT / "reports" / "run_report.schema.json").read_text())


def _flags(con, run_id: str) -> list[dict]:
    cur = con.execute(
        "SELECT rank, step, flag, severity, affects, evidence, message FROM data_quality "
        "WHERE run_id = ? ORDER BY flag, rank, step",
        [run_id],
    )
    cols = [d[0] for d in cur.description]
    return [dict(zip(cols, row)) for row in cur.fetchall()]


def test_situations_of_this_module_exist():
    assert set(MINE) >= {
        "eager-no-stacks",
        "graph-replay-no-capture",
        "cpu-only",
        "unknown-device-activity",
        "single-step",
        "unknown-device-kind-beside-gpu",
        "host-stall-in-step",
    }


def test_narrow_views_give_the_wide_views_rows(situation_warehouse):
    """step_walls holds step_breakdown's step, phase, activities and wall of every step, and
    _data_quality_tables every data_quality row but the two per-step flags, on every situation (several
    with flags of each kind, steps without GPU work, interleaved steps)."""
    wh, runs, _ = situation_warehouse
    con = connect(wh)
    wide = con.execute(
        "SELECT run_id, rank, step, phase, activities, wall_start_ns, wall_end_ns, wall_ns FROM step_breakdown"
    ).fetchall()
    narrow = con.execute("SELECT * FROM step_walls").fetchall()
    assert sorted(narrow, key=repr) == sorted(wide, key=repr) and len(wide) > len(runs)
    per_step = ("critical_path_one_host_call", "gpu_queueing")
    every = con.execute("SELECT * FROM data_quality").fetchall()
    tables = con.execute("SELECT * FROM _data_quality_tables").fetchall()
    assert sorted(tables, key=repr) == sorted((r for r in every if r[3] not in per_step), key=repr)
    assert {r[3] for r in every} >= {*per_step, "few_steps", "warmup_in_window"}


@pytest.mark.parametrize("name", MINE)
def test_flags_match_ground_truth(situation_warehouse, name):
    wh, runs, expect = situation_warehouse
    truth = expect[name]
    flags = _flags(connect(wh, runs=[runs[name]]), runs[name])
    raised = {f["flag"] for f in flags}
    for flag, want in truth["flags"].items():
        rows = [f for f in flags if f["flag"] == flag]
        assert rows, (flag, flags)
        if "steps" in want:  # one row per step
            assert sorted(r["step"] for r in rows) == want["steps"]
            assert all(r["rank"] == want["rank"] and r["severity"] == want["severity"] for r in rows)
            assert all(dict(r["evidence"])["share"] > want["min_share"] for r in rows)
            continue
        [row] = rows
        assert (row["rank"], row["step"], row["severity"]) == (want["rank"], want["step"], want["severity"])
        evidence = dict(row["evidence"])
        for key, value in want["evidence"].items():
            assert evidence[key] == pytest.approx(value, abs=1e-9), (flag, key, evidence)
        if "message_has" in want:
            assert want["message_has"] in row["message"]
        if "message_lacks" in want:
            assert want["message_lacks"] not in row["message"]
    assert not raised & set(truth["flags_absent"]), flags


@pytest.mark.parametrize("name", MINE)
def test_report_withholds_takeaways_from_flagged_figures(situation_warehouse, name):
    wh, runs, expect = situation_warehouse
    truth = expect[name]
    report = build_run_report(connect(wh, runs=[runs[name]]), runs[name])
    assert {q.flag for q in report.quality} >= set(truth["flags"])
    assert {w.figure for w in report.withheld} >= set(truth.get("withheld", []))
    for figure in truth.get("flagged_figures", []) + truth.get("withheld", []):
        assert report.flagged(figure), figure
    for t in report.takeaways:  # no takeaway rests on a flagged figure, and each carries its evidence
        assert not report.flagged(t.figure), t
        assert (
            t.window_start_ns is not None
            and t.window_end_ns is not None
            and t.window_end_ns >= t.window_start_ns
        )
    if "takeaways" in truth:
        assert len(report.takeaways) == truth["takeaways"]
    assert {t.figure for t in report.takeaways} >= set(truth.get("drawn", []))
    if "gpu_time_ns" in truth:
        assert report.gpu_time_ns == truth["gpu_time_ns"]
    md = render_run_report(report, "md")
    for flag in truth["flags"]:
        assert f"`{flag}`" in md
    html = render_run_report(report, "html")
    assert all(f"<code>{flag}</code>" in html for flag in truth["flags"])
    jsonschema = pytest.importorskip("jsonschema")
    jsonschema.validate(report_json(report), SCHEMA)


def test_cpu_only_report_says_so_in_one_line(situation_warehouse):
    wh, runs, _ = situation_warehouse
    md = render_run_report(build_run_report(connect(wh, runs=[runs["cpu-only"]]), runs["cpu-only"]), "md")
    assert "No GPU figure to show: No GPU activity in this trace (9 host ops only)" in md
    assert "## Overlap opportunities" not in md and "## Kernels" not in md


def test_eager_without_stacks_is_not_told_to_pass_capture_traces(situation_warehouse):
    wh, runs, _ = situation_warehouse
    md = render_run_report(
        build_run_report(connect(wh, runs=[runs["eager-no-stacks"]]), runs["eager-no-stacks"]), "md"
    )
    assert "with_stack=True" in md and "--capture" not in md
    assert "Python site coverage | 0.0 % of GPU time ⚠ no_python_stacks" in md


def test_flagged_figure_carries_marker_and_message_nearby(situation_warehouse):
    wh, runs, _ = situation_warehouse
    md = render_run_report(
        build_run_report(connect(wh, runs=[runs["single-step"]]), runs["single-step"]), "md"
    )
    heading = next(line for line in md.splitlines() if line.startswith("## Step breakdown"))
    assert heading.endswith("⚠ few_steps")
    after = md.split(heading, 1)[1].lstrip().splitlines()
    assert after[0].startswith("> ⚠") and any(
        "few_steps" in line and "not a median" in line for line in after[:4]
    )
    assert "phase not detected" in heading and "unknown" not in heading


def _raw_events(rel: str) -> list[dict]:
    path = TRACES / rel
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rb") as f:
        doc = json.load(f, parse_float=Decimal)
    return doc["traceEvents"] if isinstance(doc, dict) else doc


REAL = [
    "edge/mtia_inference_rank0.json.gz",
    "edge/cpu_only_rank34.pt.trace.json.gz",
    "edge/no_distributed_info.json.gz",
    "inference/sglang_decode/sglang_Qwen3-8B_decode.json.gz",
    "nvidia/h100_bert-small.json.gz",
    "nvidia/critical_path/alexnet.json.gz",
]


@pytest.fixture(scope="module")
def few_real(real_runs):
    """The real traces these tests check by hand, each its own run, not derived (of the shared real_runs:
    each test reads on a connection focused on its run)."""
    wh, run_of = real_runs
    return wh, {rel: run_of[rel] for rel in REAL}


def test_mtia_device_activity_is_counted_and_flagged(few_real):
    """Hand count from the raw JSON: the X events of category mtia_ccp_events and their durations."""
    wh, runs = few_real
    events = [e for e in _raw_events(REAL[0]) if e.get("ph") == "X" and e.get("cat") == "mtia_ccp_events"]
    count = len(events)
    ns = sum(int((Decimal(e["dur"]) * 1000).to_integral_value()) for e in events)
    assert count == 1313
    mtia = connect(wh, runs=[runs[REAL[0]]])
    [flag] = [f for f in _flags(mtia, runs[REAL[0]]) if f["flag"] == "uncounted_device_activity"]
    assert flag["severity"] == "error"
    assert dict(flag["evidence"])["uncounted_activities"] == count
    assert dict(flag["evidence"])["uncounted_device_ns"] == ns
    md = render_run_report(build_run_report(mtia, runs[REAL[0]]), "md")
    assert "GPU time | 0 ns ⚠ uncounted_device_activity" in md and "mtia_ccp_events" in md


@pytest.mark.parametrize("rel", REAL[1:3])
def test_cpu_only_real_traces_say_so(few_real, rel):
    wh, runs = few_real
    raw = _raw_events(rel)
    assert not [e for e in raw if str(e.get("cat", "")).lower() in ("kernel", "gpu_memcpy", "gpu_memset")]
    host = sum(
        1
        for e in raw
        if e.get("ph") == "X" and str(e.get("cat", "")).lower() in ("cpu_op", "user_annotation")
    )
    [flag] = [f for f in _flags(connect(wh, runs=[runs[rel]]), runs[rel]) if f["flag"] == "no_gpu_activity"]
    assert dict(flag["evidence"])["host_ops"] == host
    md = render_run_report(build_run_report(connect(wh, runs=[runs[rel]]), runs[rel]), "md")
    assert "No GPU figure to show" in md


def test_graph_replays_without_captures_on_sglang_decode(few_real):
    """Hand count: the kernels whose correlation is that of a hipGraphLaunch call (the file ingested alone,
    without its capture_traces/)."""
    wh, runs = few_real
    raw = _raw_events(REAL[3])
    graph_corr = {
        e["args"]["correlation"] for e in raw if e.get("ph") == "X" and e.get("name") == "hipGraphLaunch"
    }
    replayed = [
        e
        for e in raw
        if e.get("ph") == "X"
        and str(e.get("cat", "")).lower() in ("kernel", "gpu_memcpy", "gpu_memset")
        and e.get("args", {}).get("correlation") in graph_corr
    ]
    flags = _flags(connect(wh, runs=[runs[REAL[3]]]), runs[REAL[3]])
    [flag] = [f for f in flags if f["flag"] == "graph_replays_without_captures"]
    assert (
        dict(flag["evidence"])["replayed_activities"]
        == len(replayed)
        == dict(flag["evidence"])["without_site"]
    )
    assert "no_python_stacks" not in {f["flag"] for f in flags}  # it has stacks: the fix is --capture


@pytest.mark.parametrize("rel, expected", [(REAL[4], False), (REAL[5], True)])
def test_no_python_stacks_on_real_traces(few_real, rel, expected):
    """alexnet has no python_function event at all; bert-small has 1385."""
    wh, runs = few_real
    frames = sum(1 for e in _raw_events(rel) if e.get("cat") == "python_function")
    assert (frames == 0) == expected
    flags = {f["flag"] for f in _flags(connect(wh, runs=[runs[rel]]), runs[rel])}
    assert ("no_python_stacks" in flags) == expected

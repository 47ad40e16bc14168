"""Warm-up and one-time setup kept out of the steady-state figures, and launch delay told apart from GPU
queueing: sql/steps/one_time_work.sql, sql/steps/step_warmup.sql, the data-quality flag `warmup_in_window`,
the report's step pick (sql/report/report_steps.sql, warehouse/stored.py) and step_queueing's rule.

The situations (synth/situations/warmup.py) are executed by a small host/stream simulator; their ground
truth (the warm-up steps, the setup time, the steady steps' GPU busy share, the first launch call's time
and whether the first activity queued) comes from that simulated schedule. The real traces of
../shared/traces are checked against an independent read of the JSON files.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from conftest import TRACES, real_trace_files
from tracehouse.warehouse.catalog import connect
from tracehouse.warehouse.stored import representative_step

MINE = ["warmup-in-window", "warmup-whole-trace", "module-loading-in-launch"]
# situations of GPU work genuinely queued after its launch call returned (synth/situations/critical_path.py)
QUEUED = ["gpu-queued-at-window-start", "host-runs-ahead"]


@pytest.fixture(scope="module")
def warm(situation_warehouse):
    wh, every, truths = situation_warehouse
    runs = {name: every[name] for name in MINE + QUEUED}
    expect = {name: truths[name] for name in MINE + QUEUED}
    con = connect(wh, runs=list(runs.values()))
    yield con, runs, expect
    con.close()


def _flags(con, run_id: str, flag: str) -> list[dict]:
    cur = con.execute(
        "SELECT rank, step, severity, evidence, message FROM data_quality WHERE run_id = ? AND flag = ? "
        "ORDER BY step NULLS FIRST",
        [run_id, flag],
    )
    cols = [d[0] for d in cur.description]
    return [dict(zip(cols, r)) for r in cur.fetchall()]


@pytest.mark.parametrize("name", MINE)
def test_warmup_flag_names_the_setup_time(warm, name):
    con, runs, expect = warm
    truth = expect[name]
    rows = _flags(con, runs[name], "warmup_in_window")
    [rank_row] = [r for r in rows if r["step"] is None]
    evidence = dict(rank_row["evidence"])
    assert evidence["one_time_ns"] == truth["setup_ns"]
    assert rank_row["severity"] == "info"
    for what in truth["setup_calls"]:
        assert what in rank_row["message"], (what, rank_row["message"])
    if truth["warmup_steps"]:
        assert evidence["warmup_step"] == truth["warmup_steps"][0]
        assert "the step shown is a steady-state one" in rank_row["message"]
    else:
        assert "profile after a warm-up" in rank_row["message"]
    # the step that holds the setup is flagged on its own figures (host setup, idle, critical path)
    step_rows = [r for r in rows if r["step"] is not None]
    assert [r["step"] for r in step_rows] == [0] and step_rows[0]["severity"] == "warning"
    assert dict(step_rows[0]["evidence"])["one_time_ns"] == truth["setup_ns"]


@pytest.mark.parametrize("name", MINE)
def test_warmup_steps_and_the_step_shown(warm, name):
    con, runs, expect = warm
    truth = expect[name]
    run_id = runs[name]
    warmup = [
        r[0]
        for r in con.execute(
            "SELECT step FROM step_warmup WHERE run_id = ? AND is_warmup ORDER BY step", [run_id]
        ).fetchall()
    ]
    assert warmup == truth["warmup_steps"]
    shown = representative_step(con, run_id, None)
    if truth["step_marks"]:
        assert shown["step"] in truth["steady_steps"]
        assert shown["gpu_utilization"] == pytest.approx(truth["steady_busy"][str(shown["step"])], rel=1e-12)
    else:
        assert shown["step"] == 0  # the whole trace: there is nothing else to show (and it is flagged)


def test_module_loading_in_a_launch_is_launch_delay_not_queueing(warm):
    con, runs, expect = warm
    truth = expect["module-loading-in-launch"]
    run_id = runs["module-loading-in-launch"]
    rows = con.execute(
        "SELECT step, first_launch_call_ns, gpu_queued, queued_ns FROM step_queueing WHERE run_id = ? ORDER BY step",
        [run_id],
    ).fetchall()
    assert {str(s): call for s, call, _, _ in rows} == truth["first_launch_call_ns"]
    assert {str(s): q for s, _, q, _ in rows} == truth["gpu_queued"]
    assert all(queued == 0 for *_, queued in rows)
    assert not _flags(con, run_id, "gpu_queueing")
    # the step breakdown keeps the call as host time, and the critical path calls it no queueing
    setup, queued = con.execute(
        "SELECT host_setup_ns, gpu_queued_ns FROM step_breakdown WHERE run_id = ? AND step = 0", [run_id]
    ).fetchone()
    assert queued == 0 and setup > truth["first_launch_call_ns"]["0"]
    kinds = {
        r[0]
        for r in con.execute("SELECT DISTINCT kind FROM critical_path WHERE run_id = ?", [run_id]).fetchall()
    }
    assert "gpu_queued" not in kinds


def test_long_first_launches_are_not_queueing(warm):
    con, runs, expect = warm
    for name in ("warmup-in-window", "warmup-whole-trace"):
        assert not _flags(con, runs[name], "gpu_queueing"), name
    truth = expect["warmup-in-window"]
    call = con.execute(
        "SELECT first_launch_call_ns FROM step_queueing WHERE run_id = ? AND step = 0",
        [runs["warmup-in-window"]],
    ).fetchone()[0]
    assert call == truth["first_launch_call_ns"]["0"]


@pytest.mark.parametrize("name", QUEUED)
def test_genuine_queueing_still_flags(warm, name):
    con, runs, expect = warm
    queued = sorted(int(s) for s, q in expect[name]["step_queueing"].items() if q["gpu_queued"])
    first = con.execute("SELECT min(step) FROM step_spans WHERE run_id = ?", [runs[name]]).fetchone()[0]
    flagged = sorted(r["step"] - first for r in _flags(con, runs[name], "gpu_queueing"))
    assert queued and flagged == queued
    assert not _flags(con, runs[name], "warmup_in_window")


def test_no_takeaway_rests_on_the_setup(warm):
    from tracehouse.reports.run import build_run_report

    con, runs, expect = warm
    report = build_run_report(con, runs["warmup-in-window"])
    assert report.step.step in expect["warmup-in-window"]["steady_steps"]
    assert all(t.step != 0 for t in report.takeaways)
    assert not any("overlap the next step's preparation" in t.text for t in report.takeaways)
    whole = build_run_report(con, runs["warmup-whole-trace"])
    figures = {t.figure for t in whole.takeaways}
    assert not figures & {"idle_gaps", "step_breakdown.host_setup"}, whole.takeaways
    assert "warmup_in_window" in whole.flagged("idle_gaps")
    assert "warmup_in_window" in whole.flagged("step_breakdown.host_setup")
    # the setup comes before the first GPU activity: it is the step's host setup (97 % of its wall), which
    # the host-setup rule would call something to overlap; it is withheld instead
    assert "step_breakdown.host_setup" in {w.figure for w in whole.withheld}


# ---- real traces ---------------------------------------------------------------------------------------

REAL = real_trace_files()


def _events(path: Path) -> list[dict]:
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt") as f:
        doc = json.load(f)
    return [e for e in (doc["traceEvents"] if isinstance(doc, dict) else doc) if e.get("ph") == "X"]


@pytest.fixture(scope="module")
def real(real_runs):
    wh, run_of = real_runs
    runs = {rel: run_of[rel] for rel in REAL}
    con = connect(wh, runs=list(runs.values()))
    yield con, runs
    con.close()


@pytest.mark.parametrize("rel", REAL)
def test_real_warmup_flag_only_with_one_time_work_it_names(real, rel):
    """A real trace gets warmup_in_window only where one_time_work lists events of its file; each is an
    event of the file (read as JSON), and each slow first launch it lists launched a kernel that no
    earlier kernel of the file shares its name with."""
    con, runs = real
    events = _events(TRACES / rel)
    names = {e.get("name") for e in events}
    rows = _flags(con, runs[rel], "warmup_in_window")
    listed = con.execute(
        "SELECT name, kind, start_ns, dur_ns FROM one_time_work WHERE run_id = ?", [runs[rel]]
    ).fetchall()
    assert bool(rows) == bool(listed)
    for name, *_ in listed:
        assert name in names
    for row in rows:
        assert dict(row["evidence"])["one_time_ns"] > 0
    launches = [r for r in listed if r[1] == "first_launch"]
    if launches:
        kernels = sorted(
            (e["ts"], e["name"], e.get("args", {}).get("correlation"))
            for e in events
            if str(e.get("cat", "")).lower() == "kernel"
        )
        for name, _, _, dur_ns in launches:
            [corr] = [
                e.get("args", {}).get("correlation")
                for e in events
                if e.get("name") == name and round(e.get("dur", 0) * 1000) == dur_ns
            ]
            [(ts, kernel, _)] = [k for k in kernels if k[2] == corr]
            assert not [k for k in kernels if k[1] == kernel and k[0] < ts], (name, kernel)


def test_real_long_launches_of_kernels_that_ran_before_are_not_setup(real):
    """a100_multistream_rank0 (HTA's test trace): four cudaLaunchKernel of 1.16-6.37 ms in its first step
    launch elementwise kernels that had already run 30-222 times: not lazy module loading, so no
    warmup_in_window (they were counted as slow first launches before the first-of-its-name check)."""
    con, runs = real
    rel = "nvidia/a100_multistream_rank0.json.gz"
    events = _events(TRACES / rel)
    steps = sorted(
        (e["ts"], e["ts"] + e["dur"]) for e in events if e.get("name", "").startswith("ProfilerStep#")
    )
    first_lo, first_hi = steps[0]
    long_launches = [
        e
        for e in events
        if e.get("name") == "cudaLaunchKernel" and e.get("dur", 0) >= 1000 and first_lo <= e["ts"] < first_hi
    ]
    assert len(long_launches) == 4
    assert not _flags(con, runs[rel], "warmup_in_window")


def test_real_alexnet_setup_by_hand(real):
    """alexnet.json.gz (HTA's A100 test trace, one whole-trace step): its one-time setup, read from the
    JSON: cudaDeviceGetStreamPriorityRange 29 927 377 us (the runtime's lazy context creation), 13 cudaFree
    of 1 ms or more (6 553 820 us), the first cudaLaunchKernel 3 055 567 us, 20 cudaMalloc of 1 ms or more
    (1 956 606 us), 2 cudaStreamCreateWithFlags of 1 ms or more (734 837 us), cudaGetDeviceProperties
    5 950 us, cudaHostAlloc 3 498 us: 42 237 655 us, none overlapping. The step is 97.2 % setup: the flag
    warns on it and withholds the idle and host-setup takeaways."""
    con, runs = real
    rel = "nvidia/critical_path/alexnet.json.gz"
    long_calls: dict[str, list[tuple[float, float]]] = {}
    for e in _events(TRACES / rel):
        if e.get("cat") == "cuda_runtime" and e.get("dur", 0) >= 1000:
            long_calls.setdefault(e["name"], []).append((e["ts"], e["dur"]))
    one_time = [
        "cudaDeviceGetStreamPriorityRange",
        "cudaFree",
        "cudaMalloc",
        "cudaStreamCreateWithFlags",
        "cudaGetDeviceProperties",
        "cudaHostAlloc",
    ]
    by_hand = {name: sum(d for _, d in long_calls[name]) for name in one_time}
    assert by_hand == {
        "cudaDeviceGetStreamPriorityRange": 29927377,
        "cudaFree": 6553820,
        "cudaMalloc": 1956606,
        "cudaStreamCreateWithFlags": 734837,
        "cudaGetDeviceProperties": 5950,
        "cudaHostAlloc": 3498,
    }
    [first_launch] = [d for _, d in long_calls["cudaLaunchKernel"]]
    assert first_launch == 3055567
    total_us = sum(by_hand.values()) + first_launch
    [rank_row] = [r for r in _flags(con, runs[rel], "warmup_in_window") if r["step"] is None]
    assert dict(rank_row["evidence"])["one_time_ns"] == total_us * 1000 == 42_237_655_000
    assert "cudaDeviceGetStreamPriorityRange 29.93 s" in rank_row["message"]
    assert "cudaFree 6.55 s (13 calls)" in rank_row["message"]
    [step_row] = [r for r in _flags(con, runs[rel], "warmup_in_window") if r["step"] is not None]
    assert step_row["severity"] == "warning"
    assert dict(step_row["evidence"])["share_of_wall"] == pytest.approx(42_237_655 / 43_458_523)


def test_real_b200_module_loading_is_info_only(real):
    """b200_eager_rank0: 8 Lazy Function Loading records (CUPTI overhead, pid -1) of 440.887 us in all
    inside an 87.4 ms step: named, but under 10 % of the step, so no step figure is withheld for it."""
    con, runs = real
    rel = "nvidia/b200_eager_rank0.json.gz"
    loads = [e["dur"] for e in _events(TRACES / rel) if e.get("name") == "Lazy Function Loading"]
    assert len(loads) == 8
    rows = _flags(con, runs[rel], "warmup_in_window")
    assert [(r["step"], r["severity"]) for r in rows] == [(None, "info")]
    assert dict(rows[0]["evidence"])["one_time_ns"] == round(sum(loads) * 1000)
    assert "module loading 440.9 us (8 calls)" in rows[0]["message"]


def test_one_time_rules_version_matches_the_csv():
    import hashlib

    from tracehouse.warehouse.rules import ONE_TIME_RULES, ONE_TIME_VERSION_FILE, load_one_time_rules

    recorded = json.loads(ONE_TIME_VERSION_FILE.read_text())["sha256"]
    assert hashlib.sha256(ONE_TIME_RULES.read_bytes()).hexdigest() == recorded, (
        "sql/rules/one_time_work.csv changed: bump rules_version and record its sha256"
    )
    rules = load_one_time_rules().to_pylist()
    assert [r["rule_order"] for r in rules] == sorted(r["rule_order"] for r in rules)


def test_a_bad_one_time_rule_is_a_clear_error(tmp_path, monkeypatch):
    from tracehouse.warehouse import rules as rules_module

    bad = tmp_path / "one_time_work.csv"
    bad.write_text(
        "rule_order,rule_name,kind,event,pattern,min_dur_ns,first_step_only\n10,x,warmth,call,^cudaFree,0,false\n"
    )
    monkeypatch.setattr(rules_module, "ONE_TIME_RULES", bad)
    with pytest.raises(rules_module.RulesError, match=r"one_time_work.csv:2 .*unknown kind 'warmth'"):
        rules_module.load_one_time_rules()

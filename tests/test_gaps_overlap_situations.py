"""Idle-gap causes, overlap opportunities and stream exclusive time (defect classes 2 and 7 of issue 14,
and "stream exclusive > busy").

The synthesized situations (synth/situations/gaps_overlap.py) carry the exact answer; the real traces
in ../shared/traces are checked against figures computed here from the tables with a plain pass.
"""

from __future__ import annotations

import pytest
from tracehouse.warehouse.catalog import connect

from tests.conftest import RunFocused, real_trace_files, require_shared
from tests.conftest import query_rows as _rows

GAP_COLUMNS = (
    "scope",
    "stream",
    "gap_start_ns",
    "gap_ns",
    "class",
    "wait_ns",
    "host_ns",
    "queued_ns",
    "host_op",
    "host_op_ns",
)


# ---- idle gaps on the situations --------------------------------------------------------------


@pytest.mark.parametrize(
    "name", ["dataloader-stall", "stream-sync-wait", "backward-thread-gap", "pageable-h2d-copy"]
)
def test_idle_gap_parts_class_and_host_op_match_the_ground_truth(sit, name):
    con, runs, expect = sit
    for want in expect[name]["idle_gaps"]:
        got = _rows(
            con,
            f"SELECT {', '.join(GAP_COLUMNS)} FROM idle_gaps WHERE run_id = ? AND scope = ? "
            "AND stream IS NOT DISTINCT FROM ? AND gap_start_ns = ?",
            [runs[name], want["scope"], want["stream"], want["gap_start_ns"]],
        )
        assert got == [{c: want[c] for c in GAP_COLUMNS}], (name, want)


@pytest.mark.parametrize(
    "name",
    [
        "dataloader-stall",
        "back-to-back-1ns",
        "same-stream-overlap",
        "backward-thread-gap",
        "pageable-h2d-copy",
    ],
)
def test_idle_gap_class_counts_match_the_ground_truth(sit, name):
    con, runs, expect = sit
    for scope, counts in expect[name]["idle_class_counts"].items():
        got = dict(
            con.execute(
                "SELECT class, count(*) FROM idle_gaps WHERE run_id = ? AND scope = ? GROUP BY 1",
                [runs[name], scope],
            ).fetchall()
        )
        assert got == counts, (name, scope)


def test_a_short_sync_before_a_dataloader_stall_is_host_bound(sit):
    """The old rule (any wait overlapping the gap) called it sync_wait; the host was in the DataLoader."""
    con, runs, expect = sit
    row = con.execute(
        "SELECT class, wait_ns, host_op FROM idle_gaps WHERE run_id = ? AND scope = 'device' "
        "AND gap_ns >= 1000000",
        [runs["dataloader-stall"]],
    ).fetchall()
    assert expect["dataloader-stall"]["old_rule_class"] == "sync_wait"
    assert row == [("host_bound", 500, "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__")]


def test_one_ns_gaps_are_tiny_and_keep_the_identity(sit):
    con, runs, expect = sit
    run = runs["back-to-back-1ns"]
    tiny, total = con.execute(
        "SELECT count(*) FILTER (WHERE class = 'tiny'), sum(gap_ns) FROM idle_gaps "
        "WHERE run_id = ? AND scope = 'device'",
        [run],
    ).fetchone()
    assert tiny == expect["back-to-back-1ns"]["idle_class_counts"]["device"]["tiny"]
    assert total == expect["back-to-back-1ns"]["tiny_gap_ns_total"]
    span, busy, idle = con.execute(
        "SELECT span_ns, busy_ns, idle_ns FROM gpu_timeline WHERE run_id = ? "
        "AND step IS NULL AND variant = 'exact'",
        [run],
    ).fetchone()
    assert busy == expect["back-to-back-1ns"]["gpu_busy_ns"] and idle == total and span == busy + idle


def test_gap_parts_add_up_on_every_situation(sit):
    con, runs, _ = sit
    for name, run in runs.items():
        bad = con.execute(
            "SELECT count(*) FROM idle_gaps WHERE run_id = ? AND (wait_ns + host_ns + queued_ns <> gap_ns "
            "OR least(wait_ns, host_ns, queued_ns) < 0)",
            [run],
        ).fetchone()[0]
        assert bad == 0, name


# ---- overlap and stream exclusive on the situations -------------------------------------------


@pytest.mark.parametrize("name", ["single-stream-overlap", "two-stream-overlap"])
def test_overlap_rows_match_the_ground_truth(sit, name):
    con, runs, expect = sit
    want = expect[name]["overlap"]
    rows = {
        r["name"]: r for r in _rows(con, "SELECT * FROM overlap_opportunity WHERE run_id = ?", [runs[name]])
    }
    assert sum(r["reportable"] for r in rows.values()) == want["reportable_rows"]
    for kernel, fields in want["rows"].items():
        got = rows[kernel]
        for field, value in fields.items():
            if isinstance(value, float):
                assert got[field] == pytest.approx(value, abs=1e-12), (kernel, field)
            else:
                assert got[field] == value, (kernel, field)


def test_single_stream_run_recommends_no_overlap(sit):
    con, runs, _ = sit
    recs = con.execute(
        "SELECT DISTINCT verdict, recommendation FROM overlap_opportunity WHERE run_id = ?",
        [runs["single-stream-overlap"]],
    ).fetchall()
    assert recs == [("single-stream", "not applicable")]


@pytest.mark.parametrize("name", ["single-stream-overlap", "two-stream-overlap", "same-stream-overlap"])
def test_stream_busy_and_exclusive_match_the_ground_truth(sit, name):
    con, runs, expect = sit
    got = {
        str(s): (b, e)
        for s, b, e in con.execute(
            "SELECT stream, busy_ns, exclusive_ns FROM stream_summary WHERE run_id = ? AND step IS NULL",
            [runs[name]],
        ).fetchall()
    }
    assert got == {s: (v["busy_ns"], v["exclusive_ns"]) for s, v in expect[name]["streams"].items()}


def test_overlapping_activities_of_one_stream_count_once(sit):
    """Each activity ran alone on the device, so their exclusive_ns sum to the sum of durations; the
    stream's exclusive time is its busy time (the overlap of consecutive activities counts once)."""
    con, runs, expect = sit
    run = runs["same-stream-overlap"]
    total, stream_total = con.execute(
        "SELECT sum(exclusive_ns), sum(stream_exclusive_ns) FROM kernel_overlap WHERE run_id = ?", [run]
    ).fetchone()
    assert total == expect["same-stream-overlap"]["sum_of_activity_exclusive_ns"]
    assert stream_total == expect["same-stream-overlap"]["streams"]["7"]["busy_ns"]


def test_stream_exclusive_never_exceeds_busy_on_the_situations(sit):
    con = sit[0]
    assert con.execute("SELECT count(*) FROM stream_summary WHERE exclusive_ns > busy_ns").fetchone()[0] == 0


# ---- real traces ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def real(real_warehouse):
    wh, run_of = real_warehouse
    con = connect(wh)
    yield RunFocused(con, run_of.values()), run_of
    con.close()


def _need_real():
    require_shared()
    if not real_trace_files():
        pytest.skip("no trace files under ../shared/traces")


def test_long_gaps_whose_launch_came_late_are_host_bound_on_every_real_trace(real):
    """The issue's criterion: a device gap of 1 ms or more whose next activity's launch call began in the
    second half of the gap is host_bound, on every real trace. Checked against the raw kernels table."""
    _need_real()
    con = real[0]
    rows = con.execute("""
        WITH d AS (
            SELECT run_id, rank, device, kernel_id, start_ns, linked, launch_start_ns,
                   max(end_ns) OVER (PARTITION BY run_id, rank, device ORDER BY start_ns, end_ns, kernel_id
                                     ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_end
            FROM kernels)
        SELECT d.run_id, d.kernel_id, d.start_ns - d.prev_end AS gap_ns, g.class
        FROM d LEFT JOIN idle_gaps AS g ON g.run_id = d.run_id AND g.rank = d.rank AND g.scope = 'device'
                                       AND g.next_kernel_id = d.kernel_id
        WHERE d.start_ns - d.prev_end >= 1000000 AND d.linked
          AND d.launch_start_ns >= d.prev_end + (d.start_ns - d.prev_end) / 2""").fetchall()
    checked = {r[0] for r in rows}
    assert len(checked) >= 5, "expected long host-bound gaps on several real traces"
    wrong = [r for r in rows if r[3] != "host_bound"]
    assert not wrong, wrong[:10]


def test_idle_gap_parts_add_up_on_every_real_trace(real):
    _need_real()
    con = real[0]
    per_run = dict(
        con.execute("""
        SELECT run_id, count(*) FILTER (WHERE wait_ns + host_ns + queued_ns <> gap_ns
                                         OR least(wait_ns, host_ns, queued_ns) < 0
                                         OR (class = 'tiny') <> (gap_ns < 1000)
                                         OR host_op_ns > gap_ns OR 2 * host_op_ns <= gap_ns)
        FROM idle_gaps GROUP BY 1""").fetchall()
    )
    assert per_run and not {r: n for r, n in per_run.items() if n}
    # every gap is a row: per scope the gaps add up to the exact timeline's idle time
    mism = con.execute("""
        SELECT g.run_id, g.rank, g.device, sum(g.gap_ns), any_value(t.idle_ns)
        FROM idle_gaps g JOIN gpu_timeline t ON t.run_id = g.run_id AND t.rank = g.rank AND t.device = g.device
                                           AND t.step IS NULL AND t.variant = 'exact'
        WHERE g.scope = 'device' GROUP BY 1, 2, 3 HAVING sum(g.gap_ns) <> any_value(t.idle_ns)""").fetchall()
    assert not mism, mism


@pytest.mark.parametrize(
    "rel, device_gap_start_us, cls, host_op",
    [
        # the sglang decode window opens with the host in a 463 ms hipMemcpyWithStream while no recorded GPU
        # work runs (the GPU is queued behind work before the window): the host waited, for most of the gap
        ("inference/sglang_decode/sglang_Qwen3-8B_decode.json.gz", None, "sync_wait", "hipMemcpyWithStream"),
    ],
)
def test_long_blocking_copy_gap_on_a_real_trace(real, rel, device_gap_start_us, cls, host_op):
    _need_real()
    con, run_of = real
    if rel not in run_of:
        pytest.skip(f"{rel} not in ../shared/traces")
    # hand check: the one device gap over 100 ms, and the blocking copy on the launching thread covering it
    (gap,) = _rows(
        con,
        "SELECT * FROM idle_gaps WHERE run_id = ? AND scope = 'device' AND gap_ns > 100000000",
        [run_of[rel]],
    )
    copy = con.execute(
        """
        SELECT sum(least(o.start_ns + o.dur_ns, ?) - greatest(o.start_ns, ?))
        FROM cpu_ops o JOIN kernels k ON k.run_id = o.run_id AND k.kernel_id = ?
        JOIN cpu_ops l ON l.run_id = k.run_id AND l.op_id = k.launch_op_id
        WHERE o.run_id = ? AND o.name = 'hipMemcpyWithStream' AND o.tid = l.tid AND o.pid = l.pid
          AND o.start_ns < ? AND o.start_ns + o.dur_ns > ?""",
        [
            gap["gap_end_ns"],
            gap["gap_start_ns"],
            gap["next_kernel_id"],
            run_of[rel],
            gap["gap_end_ns"],
            gap["gap_start_ns"],
        ],
    ).fetchone()[0]
    assert gap["wait_ns"] == copy and 2 * copy > gap["gap_ns"]
    assert (gap["class"], gap["host_op"]) == (cls, host_op) and gap["host_op_ns"] == copy


def test_stream_exclusive_never_exceeds_busy_on_every_real_trace(real):
    """b200_eager's stream 7 had exclusive 11.666 ms > busy 11.596 ms: 74 pairs of its activities overlap
    (programmatic dependent launch) and each counted the shared time."""
    _need_real()
    con, run_of = real
    bad = con.execute(
        "SELECT run_id, stream, step, busy_ns, exclusive_ns FROM stream_summary WHERE exclusive_ns > busy_ns"
    ).fetchall()
    assert not bad, bad
    # a device with one stream: its exclusive time is all of its busy time
    single = con.execute("""
        SELECT s.run_id, s.stream, s.busy_ns, s.exclusive_ns FROM stream_summary s
        JOIN (SELECT run_id, rank, device FROM streams GROUP BY ALL HAVING count(*) = 1) AS one
          USING (run_id, rank, device)
        WHERE s.step IS NULL AND s.exclusive_ns <> s.busy_ns""").fetchall()
    assert not single, single
    b200 = "nvidia/b200_eager_rank0.json.gz"
    if b200 in run_of:
        busy, excl, summed = con.execute(
            """
            SELECT s.busy_ns, s.exclusive_ns, (SELECT sum(exclusive_ns) FROM kernel_overlap k
                                               WHERE k.run_id = s.run_id AND k.stream = s.stream)
            FROM stream_summary s WHERE s.run_id = ? AND s.step IS NULL AND s.stream = 7""",
            [run_of[b200]],
        ).fetchone()
        assert (busy, excl) == (11_596_482, 11_596_482) and summed == 11_665_760


def test_single_stream_real_traces_have_no_overlap_recommendation(real):
    _need_real()
    con = real[0]
    rows = con.execute("""
        WITH dev AS (SELECT run_id, max(n) AS most FROM (SELECT run_id, rank, device, count(DISTINCT stream) AS n
                                                         FROM kernels GROUP BY ALL) GROUP BY 1)
        SELECT o.run_id, dev.most, count(*) FILTER (WHERE o.reportable),
               count(*) FILTER (WHERE o.verdict = 'single-stream'), count(*)
        FROM overlap_opportunity o JOIN dev USING (run_id) GROUP BY 1, 2""").fetchall()
    single = [r for r in rows if r[1] == 1]
    assert len(single) >= 10
    assert all(r[2] == 0 and r[3] == r[4] for r in single), single
    multi = [r for r in rows if r[1] > 1]
    assert multi and all(r[3] == 0 for r in multi), multi
    assert any(r[2] > 0 for r in multi)


def test_host_setup_takeaway_names_the_dataloader_and_its_remedy(situation_warehouse):
    """The dataloader-stall situation's step 1 spends 126 ms in DataLoader.__next__ before its first
    launch: the host-setup takeaway names that host range (idle_gaps.host_op of the gap that the step's
    first activity ends) and the DataLoader's remedy, not the generic 'overlap the next step's
    preparation'; a setup whose longest gap is not host-bound keeps the generic remedy."""
    from dataclasses import replace

    from tracehouse.reports.run import build_run_report
    from tracehouse.reports.takeaways import SETUP_REMEDY, host_setup_cause
    from tracehouse.warehouse.engine import open as open_engine

    wh, runs, expect = situation_warehouse
    run_id = runs["dataloader-stall"]
    con = open_engine(wh, runs=[run_id])
    report = build_run_report(con, run_id)
    con.close()
    step = report.step
    [gap] = [g for g in expect["dataloader-stall"]["idle_gaps"] if g["scope"] == "device"]
    assert step.step == 1  # the report's pick (the longer of two steps) is the stalled one
    doing, remedy = host_setup_cause(step)
    assert doing == f", the host in {gap['host_op']} for {gap['host_op_ns'] / 1e6:.3f} ms"
    assert "num_workers > 0" in remedy
    [setup] = [t for t in report.takeaways if t.figure == "step_breakdown.host_setup"]
    assert "enumerate(DataLoader)" in setup.text and "num_workers > 0" in setup.text
    # its window is the setup (step start to first GPU activity), said as such, not called the step
    assert setup.window_of == "setup"
    assert setup.window_end_ns - setup.window_start_ns == step.host_setup_ns < step.wall_ns
    queued = replace(step, largest_gap={**step.largest_gap, "class": "other"})
    assert host_setup_cause(queued) == ("", SETUP_REMEDY)

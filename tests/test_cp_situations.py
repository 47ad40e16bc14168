"""Critical path and step wall on the critical-path situations (synth/situations/critical_path.py) and on
real traces: a host blocked on the GPU waits for the GPU (blocking copies, hipMemcpyWithStream), a
thread waiting inside backward() hands off to the autograd thread, GPU work queued before the window is
`gpu_queued`, not host setup or launch delay. Every figure is exact against the situation's ground truth
or hand-checked against the raw trace.
"""

from __future__ import annotations

import itertools

import pytest
from conftest import RunFocused
from tracehouse.warehouse.catalog import connect

CP_SITUATIONS = [
    "blocking-d2h-copy",
    "blocking-d2h-copy-amd",
    "gpu-queued-at-window-start",
    "ddp-backward-thread",
    "host-runs-ahead",
]


@pytest.fixture(scope="module")
def sit(situation_warehouse):
    wh, runs, expect = situation_warehouse
    return RunFocused(connect(wh), runs.values()), runs, expect


@pytest.mark.parametrize("name", CP_SITUATIONS)
def test_path_kinds_and_critical_stream_are_exact(sit, name):
    con, runs, expect = sit
    run_id, truth = runs[name], expect[name]
    steps = [
        r[0]
        for r in con.execute(
            "SELECT DISTINCT step FROM critical_path WHERE run_id = ? ORDER BY 1", [run_id]
        ).fetchall()
    ]
    assert len(steps) == truth["steps"]
    for step in steps:
        want = truth["critical_path"][str(step - steps[0])]
        kinds = dict(
            con.execute(
                "SELECT kind, sum(dur_ns) FROM critical_path WHERE run_id = ? AND step = ? "
                "GROUP BY kind HAVING sum(dur_ns) > 0",
                [run_id, step],
            ).fetchall()
        )
        assert kinds == want["kinds_ns"], (name, step, kinds)
        span, cs, cs_ns, gpu_share, cs_share = con.execute(
            "SELECT span_ns, critical_stream, critical_stream_ns, gpu_share, critical_stream_share "
            "FROM critical_stream WHERE run_id = ? AND step = ?",
            [run_id, step],
        ).fetchone()
        assert (span, cs, cs_ns) == (want["span_ns"], want["critical_stream"], want["critical_stream_ns"])
        assert gpu_share == pytest.approx(want["kinds_ns"]["gpu"] / span)
        assert cs_share == pytest.approx(cs_ns / span)
        # the segments tile the path
        rows = con.execute(
            "SELECT start_ns, dur_ns FROM critical_path WHERE run_id = ? AND step = ? ORDER BY seq",
            [run_id, step],
        ).fetchall()
        assert all(a[0] + a[1] == b[0] for a, b in itertools.pairwise(rows))
        assert sum(r[1] for r in rows) == span


@pytest.mark.parametrize("name", CP_SITUATIONS)
def test_step_wall_splits_out_gpu_queueing(sit, name):
    con, runs, expect = sit
    run_id, truth = runs[name], expect[name]
    rows = con.execute(
        "SELECT b.step, b.host_setup_ns, b.gpu_queued_ns, b.wall_ns, b.compute_ns + b.exposed_comm_ns "
        "+ b.exposed_memory_ns + b.gpu_idle_ns + b.host_tail_ns + b.host_setup_ns + b.gpu_queued_ns, "
        "q.first_delay_ns, q.gpu_queued, q.queued_ns, b.gpu_utilization, q.queue_cause "
        "FROM step_breakdown b JOIN step_queueing q USING (run_id, rank, step) "
        "WHERE run_id = ? ORDER BY b.step",
        [run_id],
    ).fetchall()
    assert len(rows) == truth["steps"]
    first = rows[0][0]
    for step, setup, queued, wall, parts, first_delay, gpu_queued, q_ns, util, cause in rows:
        want_b, want_q = truth["step_breakdown"][str(step - first)], truth["step_queueing"][str(step - first)]
        assert (setup, queued) == (want_b["host_setup_ns"], want_b["gpu_queued_ns"]), (name, step)
        assert parts == wall
        assert q_ns == queued
        assert (first_delay, gpu_queued, cause) == (
            want_q["first_delay_ns"],
            want_q["gpu_queued"],
            want_q["queue_cause"],
        ), (name, step)
        assert util >= truth["gpu_busy_share_min"]


def test_blocking_copy_path_runs_through_the_gpu(sit):
    """The copy's call began 1.8 ms before the copy: the path reaches the copy by stream order, not by
    its launch, so no host call holds the path."""
    con, runs, _ = sit
    for name in ("blocking-d2h-copy", "blocking-d2h-copy-amd"):
        edges = {
            r[0]
            for r in con.execute(
                "SELECT DISTINCT edge FROM critical_path WHERE run_id = ?", [runs[name]]
            ).fetchall()
        }
        assert "program_order" not in edges, name


def test_backward_thread_hands_off_to_the_main_thread(sit):
    con, runs, _ = sit
    rows = con.execute(
        "SELECT kind, start_ns, dur_ns FROM critical_path WHERE run_id = ? AND edge = 'thread_handoff'",
        [runs["ddp-backward-thread"]],
    ).fetchall()
    assert len(rows) == 1 and rows[0][0] == "cpu" and rows[0][2] == 20_000
    nccl = con.execute(
        "SELECT count(*) FROM critical_path WHERE run_id = ? AND kind = 'gpu' AND stream = 13",
        [runs["ddp-backward-thread"]],
    ).fetchone()[0]
    assert nccl == 1


# ---------------------------------------------------------------------------------------------------
# real traces, hand-checked against the raw timeline
# ---------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def real_cp(real_runs):
    wh, run_of = real_runs
    runs = {
        rel: run_of[rel]
        for rel in (
            "inference/sglang_decode",
            "multirank/sampled_2ranks",
            "inference/vllm_decode_full",
            "nvidia/v100_ns_resolution_rank0.pt.trace.json.gz",
            "amd/mi300_resnet_act_checkpoint.json.gz",
        )
    }
    return RunFocused(connect(wh), runs.values()), runs


def test_sglang_decode_path_is_the_gpu_behind_hipmemcpywithstream(real_cp):
    """sglang_Qwen3-8B_decode: the host blocks 463.06 ms in hipMemcpyWithStream (op 892) while stream 3's
    first kernels wait on the GPU (launched 0.1 ms into the step, started 463.19 ms in). The path was 98 %
    `cpu` (the copy call); it is now the GPU work on stream 3 from 463.19 ms: 9.67 ms of 10.37 ms."""
    con, runs = real_cp
    run_id = runs["inference/sglang_decode"]
    span, gpu, cs, cs_ns = con.execute(
        "SELECT span_ns, gpu_ns, critical_stream, critical_stream_ns FROM critical_stream WHERE run_id = ?",
        [run_id],
    ).fetchone()
    assert cs == 3 and cs_ns == gpu
    assert gpu / span > 0.9
    # the copy call is crossed as a wait on its copy, never as 463 ms of host time
    assert (
        con.execute(
            "SELECT max(dur_ns) FROM critical_path WHERE run_id = ? AND kind = 'cpu'", [run_id]
        ).fetchone()[0]
        < 1_000_000
    )
    # the step wall: 463.07 ms of the 463.19 ms before the first kernel is GPU queueing, not host setup
    setup, queued, wall = con.execute(
        "SELECT host_setup_ns, gpu_queued_ns, wall_ns FROM step_breakdown WHERE run_id = ?", [run_id]
    ).fetchone()
    first = con.execute(
        "SELECT start_ns, launch_start_ns + launch_dur_ns FROM kernels WHERE run_id = ? AND step = 0 "
        "ORDER BY start_ns LIMIT 1",
        [run_id],
    ).fetchone()
    step_start = con.execute("SELECT min(start_ns) FROM step_spans WHERE run_id = ?", [run_id]).fetchone()[0]
    assert queued == first[0] - first[1] and setup == first[1] - step_start
    assert queued / wall > 0.97
    assert (
        con.execute("SELECT queue_cause FROM step_queueing WHERE run_id = ?", [run_id]).fetchone()[0]
        == "unseen_work_or_clock_offset"
    )


def test_sampled_2ranks_backward_runs_on_the_autograd_thread(real_cp):
    """sampled_2ranks rank 0, ProfilerStep#551: the main thread (tid 4037) issues no CUDA call for 244.7 ms
    inside `## backward ##` while the autograd thread (tid 23695) launches 525 kernels. The path no
    longer credits that wait to the main thread (`aten::mm`, 244.69 ms of program order): it crosses to
    the autograd thread. The GPU is 46 % busy and the host slow (Shampoo on the host), so the path stays
    host-bound, which is right for this step: its last activity (a memset) is launched 1.5 ms after
    stream 7 drained."""
    con, runs = real_cp
    run_id = runs["multirank/sampled_2ranks"]
    longest = con.execute(
        "SELECT max(dur_ns) FROM critical_path WHERE run_id = ? AND rank = 0 AND step = 551 AND kind = 'cpu'",
        [run_id],
    ).fetchone()[0]
    assert longest < 100_000_000
    tids = {
        r[0]
        for r in con.execute(
            "SELECT DISTINCT o.tid FROM critical_path c JOIN cpu_ops o ON o.run_id = c.run_id AND o.rank = c.rank "
            "AND o.op_id = c.op_id WHERE c.run_id = ? AND c.rank = 0 AND c.step = 551 AND c.edge IS NULL "
            "AND c.kind = 'cpu'",
            [run_id],
        ).fetchall()
    }
    assert tids == {"4037", "23695"}


def test_host_running_ahead_is_gpu_queueing(real_cp):
    """v100_ns_resolution, steps 102-105: the host launches the step's first kernels 65-89 ms before the
    GPU, still busy with the previous step, starts them; that time is gpu_queued_ns, not host setup."""
    con, runs = real_cp
    run_id = runs["nvidia/v100_ns_resolution_rank0.pt.trace.json.gz"]
    rows = con.execute(
        "SELECT q.step, q.gpu_queued, q.first_delay_ns, b.gpu_queued_ns, b.host_setup_ns FROM "
        "step_queueing q JOIN step_breakdown b USING (run_id, rank, step) WHERE run_id = ? "
        "ORDER BY step",
        [run_id],
    ).fetchall()
    by_step = {r[0]: r for r in rows}
    assert not by_step[101][1] and by_step[101][2] < 100_000
    for s in (102, 103, 104, 105):
        assert by_step[s][1] and by_step[s][3] > 60_000_000 and by_step[s][4] < 2_000_000
    # queued behind the previous step's kernels: the trace shows the GPU busy for 64.26 of those 64.98 ms
    cause, busy = con.execute(
        "SELECT queue_cause, visible_busy_ns FROM step_queueing WHERE run_id = ? AND step = 102", [run_id]
    ).fetchone()
    assert cause == "earlier_gpu_work" and 64_000_000 < busy < 64_980_000
    # the first activity's own delay, from the raw kernels
    start, launched = con.execute(
        "SELECT start_ns, launch_start_ns + launch_dur_ns FROM kernels WHERE run_id = ? "
        "AND step = 103 ORDER BY start_ns, kernel_id LIMIT 1",
        [run_id],
    ).fetchone()
    assert by_step[103][2] == start - launched


def test_vllm_graph_replay_queued_copy_is_not_launch_delay(real_cp):
    """vllm_decode_full: the step's first activity (a hipMemcpyAsync copy) starts 7.83 ms after its call
    with nothing on the GPU before it; the path calls that gpu_queued, not launch_delay (was 41 %)."""
    con, runs = real_cp
    run_id = runs["inference/vllm_decode_full"]
    kinds = dict(
        con.execute(
            "SELECT kind, sum(dur_ns) FROM critical_path WHERE run_id = ? GROUP BY kind", [run_id]
        ).fetchall()
    )
    assert kinds.get("launch_delay", 0) < 100_000
    assert kinds["gpu_queued"] > 7_000_000
    assert con.execute("SELECT gpu_queued FROM step_queueing WHERE run_id = ?", [run_id]).fetchone()[0]


# ---------------------------------------------------------------------------------------------------
# tiny inline graphs (tests/test_critical_path.py's Mini) for the rules' edges
# ---------------------------------------------------------------------------------------------------


def _on_thread(m, kernel_id: int, tid: str) -> None:
    """Move the launch call of kernel_id to host thread tid."""
    op = next(k[7] for k in m.kernels if k[0] == kernel_id)
    m.ops = [(o[0], o[1], tid, *o[3:]) if o[0] == op else o for o in m.ops]


def test_copy_call_returning_after_its_copy_is_a_host_sync():
    """Whatever the API (here an async device-to-device copy), a copy call that returned only after its
    copy ended waited for it: the path crosses it as a sync_wait to the copy, not as 90 ns of host time."""
    from test_critical_path import Mini, assert_tiles, path

    m = Mini()
    m.launch("gemm_a", 7, host=0, host_dur=5, start=10, dur=90)
    m.launch(
        "Memcpy DtoD (Device -> Device)",
        7,
        host=20,
        host_dur=90,
        start=102,
        dur=3,
        call="cudaMemcpyAsync",
        kind="memcpy",
    )
    m.launch("add_b", 7, host=120, host_dur=5, start=130, dur=10)
    rows = path(m.connect())
    assert_tiles(rows)
    assert [(r[0], r[2], r[3], r[4]) for r in rows] == [
        ("cpu", 0, 5, None),
        ("launch_delay", 5, 5, "launch"),
        ("gpu", 10, 90, None),
        ("kernel_gap", 100, 2, "stream_order"),
        ("gpu", 102, 3, None),
        ("sync_wait", 105, 5, "host_sync"),
        ("cpu", 110, 10, "program_order"),
        ("cpu", 120, 5, None),
        ("launch_delay", 125, 5, "launch"),
        ("gpu", 130, 10, None),
    ]


@pytest.mark.parametrize("gap", [50_000, 150_000])
def test_thread_handoff_needs_a_long_gap(gap):
    """Thread 1 launches at 0, thread 2 at 20 us, thread 1 again `gap` after its first call: a gap of
    100 us or more (thread 1 waited) hands off to thread 2's launch; a shorter one is program order.
    Thread 2's first call always takes over from thread 1's last launch before it."""
    from test_critical_path import Mini, path

    m = Mini()
    m.launch("k_a", 7, host=0, host_dur=5_000, start=10_000, dur=1_000)
    b = m.launch("k_b", 8, host=20_000, host_dur=5_000, start=30_000, dur=1_000)
    _on_thread(m, b, "2")
    m.launch("k_c", 7, host=5_000 + gap, host_dur=5_000, start=gap + 20_000, dur=1_000)
    rows = path(m.connect())
    edges = [r[4] for r in rows if r[0] == "cpu" and r[4] not in (None, "step_start")]
    if gap < 100_000:
        assert edges == ["program_order"]
    else:
        # thread 1's call [0, 5 us] -> thread 2's call [20, 25 us] -> thread 1's call at 5 us + gap
        assert [(r[2], r[3]) for r in rows if r[4] == "thread_handoff"] == [
            (5_000, 15_000),
            (25_000, 5_000 + gap - 25_000),
        ]


@pytest.mark.parametrize("lag", [5_000, 50_000])
def test_unrecorded_wait_on_another_stream_is_inferred(lag):
    """No cuda_sync records: a kernel launched at 20 ns waits until `lag` after an NCCL kernel on another
    stream ends (5 ms later). Within 20 us it was waiting for it (inferred_wait, sync_wait); later than
    that nothing explains the wait (gpu_queued)."""
    from test_critical_path import Mini, assert_tiles, path

    m = Mini()
    m.launch("ncclDevKernel_AllReduce", 8, host=0, host_dur=5, start=10, dur=5_000_000)
    m.launch("gemm_after", 7, host=20, host_dur=5, start=5_000_010 + lag, dur=100)
    rows = path(m.connect())
    assert_tiles(rows)
    kinds = [(r[0], r[4]) for r in rows]
    if lag <= 20_000:
        assert ("sync_wait", "inferred_wait") in kinds and ("gpu", None) in kinds[:3]
        assert next(r for r in rows if r[4] == "inferred_wait")[3] == lag
    else:
        assert ("gpu_queued", "launch") in kinds and all(e != "inferred_wait" for _, e in kinds)


def test_resnet_compute_waits_on_the_all_reduce(real_cp):
    """mi300_resnet_act_checkpoint (ROCm, no cuda_sync records), ProfilerStep 15: the RCCL all-reduce on
    stream 4 starts microseconds after the gradient kernel on stream 0 ends, and compute on stream 0
    resumes microseconds after the all-reduce ends; the path crosses both waits, so the
    critical stream is the all-reduce's (15.84 ms of the path) and the path is GPU work once the step's
    first kernel started (it waited 29.39 ms behind step 14's kernels: gpu_queued)."""
    con, runs = real_cp
    run_id = runs["amd/mi300_resnet_act_checkpoint.json.gz"]
    waits = con.execute(
        "SELECT s.name, s.end_ns, w.start_ns, s.stream, w.stream FROM _critical_path_pred p "
        "JOIN kernels s ON s.run_id = p.run_id AND s.rank = p.rank AND s.kernel_id = p.pred_id "
        "JOIN kernels w ON w.run_id = p.run_id AND w.rank = p.rank AND w.kernel_id = p.node_id "
        "WHERE p.run_id = ? AND p.node_type = 'gpu' AND p.edge = 'inferred_wait' AND p.node_id IN "
        "(SELECT kernel_id FROM critical_path WHERE run_id = ? AND step = 15 AND kind = 'gpu')",
        [run_id, run_id],
    ).fetchall()
    # the all-reduce waited for the gradient kernel on stream 0, compute waited for the all-reduce
    assert all(0 <= w - e <= 20_000 for _, e, w, _, _ in waits)
    assert {(src, dst) for _, _, _, src, dst in waits} == {(0, 4), (4, 0)}
    assert all(n.startswith("ncclDevKernel") for n, _, _, src, _ in waits if src == 4)
    cs, cs_ns, kinds = con.execute(
        "SELECT critical_stream, critical_stream_ns, (SELECT list(DISTINCT kind ORDER BY kind) FROM critical_path "
        "WHERE run_id = ? AND step = 15) FROM critical_stream WHERE run_id = ? AND step = 15",
        [run_id, run_id],
    ).fetchone()
    assert cs == 4 and cs_ns > 15_000_000
    assert "launch_delay" not in kinds

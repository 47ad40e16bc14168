"""Waits inside CUDA-graph replays (issue 37) on the synthesized decode run, whose simulator replays each
step's layers as one graph: the main and side (routed-expert) streams wait on each other through events
the trace does not record, while the host sits in cudaStreamSynchronize.

- the gaps between the activities of one replay are the replay's own pace (`other`), never the host's
  synchronize (`sync_wait`), which began after the replay was issued;
- the side-stream waits are inferred where the simulation made them: every inferred edge of the graph
  crosses between the main and the side stream, both ways in every layer of every step.
"""

from __future__ import annotations

import pytest
from tracehouse.warehouse.catalog import connect
from warehouses import scenario_files

DECODE = {"ranks": 1, "steps": 3, "layers": 4}  # the same run as test_critical_path's serving-decode case


@pytest.fixture(scope="module")
def decode(warehouses):
    wh, runs, truths = warehouses.named({"decode": scenario_files("serving-decode", **DECODE)})
    return connect(wh), runs["decode"], truths["decode"]


def test_gaps_inside_a_replay_are_its_own_pace(decode):
    con, run_id, _ = decode
    # independent read: gaps whose next activity was replayed by a graph launch that had returned before
    # the gap began (kernels and cpu_ops, not the view's lanes)
    rows = con.execute(
        """
        SELECT g.class, g.wait_ns, g.queued_ns, g.gap_ns, o.name
        FROM idle_gaps g
        JOIN kernels k ON k.run_id = g.run_id AND k.rank = g.rank AND k.kernel_id = g.next_kernel_id
        JOIN cpu_ops o ON o.run_id = k.run_id AND o.rank = k.rank AND o.op_id = k.launch_op_id
        WHERE g.run_id = ? AND o.start_ns + o.dur_ns <= g.gap_start_ns""",
        [run_id],
    ).fetchall()
    in_replay = [r for r in rows if r[4] == "cudaGraphLaunch"]
    assert len(in_replay) > 50
    # the host synchronizes on the main stream while the replay runs: it covers these gaps
    synced = con.execute(
        """
        SELECT count(*) FROM idle_gaps g JOIN cpu_ops s
          ON s.run_id = g.run_id AND s.rank = g.rank AND s.name = 'cudaStreamSynchronize'
         AND s.start_ns <= g.gap_start_ns AND s.start_ns + s.dur_ns >= g.gap_end_ns
        WHERE g.run_id = ? AND g.scope = 'device'""",
        [run_id],
    ).fetchone()[0]
    assert synced > 20
    # no recorded GPU-side wait in a replay: all of such a gap is queued, none of it the host's wait
    for cls, wait_ns, queued_ns, gap_ns, _ in rows:
        assert cls in ("other", "tiny") and wait_ns == 0 and queued_ns == gap_ns


def test_side_stream_waits_are_inferred_both_ways_in_every_layer(decode):
    con, run_id, truth = decode
    main, side = truth["streams"]["main"], truth["streams"]["side"]
    pairs = con.execute(
        """
        SELECT e.step, e.stream, k.stream, count(*)
        FROM _critical_path_pred e
        JOIN kernels k ON k.run_id = e.run_id AND k.rank = e.rank AND k.kernel_id = e.pred_id
        WHERE e.run_id = ? AND e.edge = 'inferred_wait'
        GROUP BY ALL ORDER BY ALL""",
        [run_id],
    ).fetchall()
    steps = sorted({st["step"] for st in truth["steps"]})
    assert len({p[0] for p in pairs}) == len(steps)
    for _, waiting, awaited, n in pairs:
        assert {waiting, awaited} == {main, side}
        assert n == DECODE["layers"]


def test_every_wait_on_the_path_names_what_it_waited_for(decode):
    """Each sync_wait segment of the path is named: an inferred wait by the activity the simulation made it
    wait for, with that activity's stream (truth: the step's path segments, named by the simulator's
    awaited activity)."""
    con, run_id, truth = decode
    got = con.execute(
        "SELECT step, start_ns, dur_ns, name FROM critical_path WHERE run_id = ? AND edge = 'inferred_wait' "
        "ORDER BY step, seq",
        [run_id],
    ).fetchall()
    want = [
        (s[2], s[3], s[1])
        for st in sorted(truth["steps"], key=lambda st: st["step"])
        for s in st["critical_path"]["segments"]
        if s[4] == "inferred_wait"
    ]
    assert [(start, dur, name) for _, start, dur, name in got] == want and want
    side = truth["streams"]["side"]
    assert any(name.endswith(f"(stream {side})") for *_, name in got)
    unnamed = con.execute(
        "SELECT count(*) FROM critical_path WHERE run_id = ? AND kind = 'sync_wait' AND name IS NULL",
        [run_id],
    ).fetchone()[0]
    assert unnamed == 0

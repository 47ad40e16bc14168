"""Host time spent waiting on the GPU is a wait, not host work (issue 37, item 1).

- On the simulated situations (synth/situations/host_waits.py: a spin-wait inside a library call, a
  blocking copy held 0.87 ms by a collective, a graph launch held by a pipeline receive) the critical path
  runs through the GPU activities the simulation says it does, and each wait the simulation made is the
  path's edge to the activity it waited for (kind sync_wait).
- On every real trace of ../shared: no `cpu` segment of the path overlaps GPU work the host waited for,
  found independently in Python from the rows of cpu_ops and kernels (a thread held 4 of its resume
  windows or more, in a gap between calls or in a launch call, that resumed within one window after the
  previous work on the stream it launches on next ended).
"""

from __future__ import annotations

from bisect import bisect_left
from statistics import median

import pytest
from conftest import RunFocused, real_trace_files, require_shared
from tracehouse.warehouse.catalog import connect
from warehouses import situation

SITUATIONS = [
    "spin-wait-in-library",
    "blocking-copy-waits-on-collective",
    "blocking-copy-on-a-waiting-stream",
    "graph-launch-held-by-recv",
]


@pytest.fixture(scope="module")
def sims(warehouses):
    wh, runs, truths = warehouses.named({n: situation(n) for n in SITUATIONS})
    return RunFocused(connect(wh), runs.values()), runs, truths


@pytest.mark.parametrize("name", SITUATIONS)
def test_path_and_waits_match_the_simulation(sims, name):
    con, runs, truths = sims
    run_id, expect = runs[name], truths[name]["expect"]
    steps = [
        r[0]
        for r in con.execute(
            "SELECT DISTINCT step FROM critical_path WHERE run_id = ? ORDER BY 1", [run_id]
        ).fetchall()
    ]
    assert len(steps) == expect["steps"]
    for i, step in enumerate(steps):
        gpu = [
            r[0]
            for r in con.execute(
                "SELECT name FROM critical_path WHERE run_id = ? AND step = ? AND kind = 'gpu' ORDER BY seq",
                [run_id, step],
            ).fetchall()
        ]
        assert gpu == expect["path_gpu"][str(i)], (name, step)
        # every simulated wait is the edge of its waiter to the activity it waited for
        edges = con.execute(
            """
            SELECT p.name, k.name, p.edge_kind FROM _critical_path_pred p
            JOIN kernels k ON k.run_id = p.run_id AND k.rank = p.rank AND k.kernel_id = p.pred_id
            JOIN critical_path c ON c.run_id = p.run_id AND c.rank = p.rank AND c.step = ?
             AND ((p.node_type = 'gpu' AND c.kernel_id = p.node_id) OR (p.node_type <> 'gpu' AND c.op_id = p.node_id))
            WHERE p.run_id = ? AND p.pred_type = 'gpu' AND p.edge_kind = 'sync_wait'""",
            [step, run_id],
        ).fetchall()
        got = {(w, a) for w, a, _ in edges}
        for waiter, awaited in expect["waits"][str(i)]:
            assert (waiter, awaited) in got, (name, step, waiter, awaited, got)
        # no host segment on the path while the host waited
        assert not con.execute(
            "SELECT count(*) FROM critical_path WHERE run_id = ? AND step = ? AND kind = 'cpu' AND dur_ns > 20000",
            [run_id, step],
        ).fetchone()[0], name


# ---------------------------------------------------------------------------------------------------
# real traces: an independent read of the rows
# ---------------------------------------------------------------------------------------------------


def host_waits(con, run_id: str) -> list[tuple[int, int, int, int, int]]:
    """(rank, pid, tid, start, end) of each interval a host thread spent held by GPU work, in Python."""
    calls = con.execute(
        """SELECT rank, pid, tid, op_id, start_ns, start_ns + dur_ns FROM cpu_ops
           WHERE run_id = ? AND cat IN ('cuda_runtime', 'cuda_driver') ORDER BY rank, pid, tid, start_ns, op_id""",
        [run_id],
    ).fetchall()
    acts = con.execute(
        """SELECT rank, device, stream, kernel_id, start_ns, end_ns, launch_op_id,
                  COALESCE(launch_start_ns, start_ns) FROM kernels WHERE run_id = ?""",
        [run_id],
    ).fetchall()
    by_stream: dict = {}
    for a in sorted(acts, key=lambda a: (a[4], a[3])):
        by_stream.setdefault((a[0], a[1], a[2]), []).append(a)
    prev_of: dict = {}  # launch op -> end of the previous activity on its first activity's stream
    for lst in by_stream.values():
        for j, a in enumerate(lst):
            if a[6] is None or (a[0], a[6]) in prev_of:
                continue
            prev_of[(a[0], a[6])] = lst[j - 1][5] if j and lst[j - 1][7] <= a[7] else None
    out = []
    threads: dict = {}
    for c in calls:
        threads.setdefault(c[:3], []).append(c)
    for (rank, pid, tid), cs in threads.items():
        gaps = [cs[j][4] - cs[j - 1][5] for j in range(1, len(cs))]
        if not gaps:
            continue
        r = max(2 * int(median(gaps)), 1000)
        launch_idx = [j for j, c in enumerate(cs) if (rank, c[3]) in prev_of]
        for j, c in enumerate(cs):
            k = bisect_left(launch_idx, j)
            if k == len(launch_idx):
                continue
            g_end = prev_of[(rank, cs[launch_idx[k]][3])]
            if g_end is None:
                continue
            if j and c[4] - cs[j - 1][5] >= 4 * r and cs[j - 1][5] < g_end <= c[4] and c[4] - g_end <= r:
                out.append((rank, pid, tid, cs[j - 1][5], g_end))
            if launch_idx[k] == j and c[5] - c[4] >= 4 * r and c[4] < g_end <= c[5] and c[5] - g_end <= r:
                out.append((rank, pid, tid, c[4], g_end))
    return out


@pytest.fixture(scope="module")
def real(real_runs):
    wh, runs = real_runs
    return wh, runs


@pytest.mark.parametrize("rel", real_trace_files() or ["<no shared traces>"])
def test_no_cpu_path_segment_while_the_host_waited(real, rel):
    require_shared()
    wh, runs = real
    con = RunFocused(connect(wh), [runs[rel]])
    run_id = runs[rel]
    waits = host_waits(con, run_id)
    # the path's host segments with their thread (the call, or the op around a gap; the step's start: any)
    segs = con.execute(
        """SELECT c.rank, o.pid, o.tid, c.start_ns, c.start_ns + c.dur_ns FROM critical_path c
           LEFT JOIN cpu_ops o ON o.run_id = c.run_id AND o.rank = c.rank AND o.op_id = c.op_id
           WHERE c.run_id = ? AND c.kind = 'cpu' AND c.dur_ns > 0""",
        [run_id],
    ).fetchall()
    bad = [
        (s, w)
        for s in segs
        for w in waits
        if s[0] == w[0] and (s[1] is None or s[1:3] == w[1:3]) and min(s[4], w[4]) - max(s[3], w[3]) > 1000
    ]
    assert not bad, (rel, len(bad), bad[:3])

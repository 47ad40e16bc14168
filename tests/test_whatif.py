"""What-if (warehouse/whatif.py, warehouse/whatif_replay.py, `tracehouse whatif`, the report's gains).

- the replay on tiny hand-made graphs: nothing changed reproduces the trace; a faster kernel moves what
  depends on it, a non-binding edge binds with its stated latency; a fusion keeps the longest member;
- synthesized runs against the simulator run again with the change (synth's slow_kernel with factor 1/K,
  the same seed: the same random draws, only the matched kernels' durations differ): the predicted step
  time is within 5 % of the re-simulated one, step by step, on a training and a serving-decode run;
  with K = 1 it is the observed step time exactly, which is the simulator's own;
- a fusion row against the simulator run again with the row's chains fused (synth's fuse, same seed):
  exact, step by step, on eager serving prefill and graph-replayed serving decode;
- the CLI's errors are one line; the report's gains are the what-if of its step.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tracehouse.warehouse import whatif_replay as wr

# ---------------------------------------------------------------------------------------------------
# tiny graphs: rows of _whatif_edges (wr.EDGE_FIELDS)
# ---------------------------------------------------------------------------------------------------


def gpu(kid, start, end, *edges, step=0, cat="gemm", name=None):
    """Rows of one activity: edges (pred_type, pred_id, ready_ns, edge[, edge_name]); choice_ns = ready_ns."""
    base = ("gpu", kid, step, name or f"k{kid}", 7, start, end)
    if not edges:
        return [(*base, None, None, None, None, None, None, None, cat)]
    return [(*base, e[0], e[1], e[2], None, e[3], "x", e[4] if len(e) > 4 else None, cat) for e in edges]


def call(oid, start, end, *edges, step=0, name="cudaLaunchKernel"):
    base = ("cpu", oid, step, name, None, start, end)
    if not edges:
        return [(*base, None, None, None, None, None, None, None, None)]
    return [(*base, e[0], e[1], e[2], None, e[3], "cpu", None, None) for e in edges]


def replayed(rows, durations=None, merged=frozenset()):
    nodes = wr.build(rows)
    wr.prepare(nodes)
    wr.replay(wr.order(nodes), nodes, lambda n: (durations or {}).get(n.key, n.end - n.start), merged)
    return nodes


def chain_rows():
    """Host calls 1, 2, 3 launch kernels 10, 11, 12 on one stream; kernel 11 waits for kernel 10 (the GPU is
    behind the host), kernel 12 for its launch (the host is behind)."""
    rows = call(1, 0, 5) + call(2, 10, 15, ("cpu", 1, 5, "program_order"))
    rows += call(3, 100, 105, ("cpu", 2, 15, "program_order"))
    rows += gpu(10, 8, 60, ("cpu", 1, 0, "launch"))
    rows += gpu(11, 62, 90, ("cpu", 2, 10, "launch"), ("gpu", 10, 60, "stream_order"))
    rows += gpu(12, 108, 130, ("cpu", 3, 100, "launch"), ("gpu", 11, 90, "stream_order"))
    return rows


def test_nothing_changed_reproduces_every_node():
    nodes = replayed(chain_rows())
    for n in nodes.values():
        assert (n.new_start, n.new_end) == (n.start, n.end), n.key
    assert wr.step_spans(nodes) == {0: (122, 122)}


def test_a_faster_kernel_moves_what_waits_for_it_not_what_waits_for_the_host():
    # kernel 10 twice as fast: 26 instead of 52; kernel 11 follows it by its stream gap (2), so it starts at
    # 36; kernel 12 still waits for its launch (100 + 8)
    nodes = replayed(chain_rows(), {("gpu", 10): 26})
    assert nodes[("gpu", 11)].new_start == 8 + 26 + 2
    assert nodes[("gpu", 12)].new_start == 108
    assert wr.step_spans(nodes)[0] == (122, 122)  # the step ends with kernel 12, held by the host


def test_a_non_binding_edge_binds_with_its_stated_latency():
    # kernel 11's launch (call 2 at 10) did not bind: the stream did. Make kernel 10 very short: 11 then
    # waits for its launch, with the launch latency the trace shows where launches bind (8: 0 -> 8 and
    # 100 -> 108), never more than its own slack (62 - 10 = 52)
    nodes = replayed(chain_rows(), {("gpu", 10): 1})
    assert nodes[("gpu", 11)].new_start == 10 + 8


def test_a_host_sync_ends_when_the_awaited_kernel_ends():
    rows = call(1, 0, 5) + gpu(10, 8, 60, ("cpu", 1, 0, "launch"))
    rows += call(2, 10, 63, ("cpu", 1, 5, "program_order"), name="cudaStreamSynchronize")
    rows += [
        (
            "cpu",
            2,
            0,
            "cudaStreamSynchronize",
            None,
            10,
            63,
            "gpu",
            10,
            60,
            None,
            "host_sync",
            "sync_wait",
            None,
            None,
        )
    ]
    rows += call(3, 70, 75, ("cpu", 2, 63, "program_order"))
    nodes = replayed(rows, {("gpu", 10): 26})
    assert nodes[("cpu", 2)].new_end == 8 + 26 + 3
    assert nodes[("cpu", 3)].new_start == 8 + 26 + 3 + 7


def test_fusion_keeps_the_longest_member_where_the_first_started():
    rows = call(1, 0, 5) + gpu(10, 8, 18, ("cpu", 1, 0, "launch"))
    rows += gpu(11, 20, 50, ("gpu", 10, 18, "stream_order"))
    rows += gpu(12, 52, 72, ("gpu", 11, 50, "stream_order"))
    rows += gpu(13, 74, 80, ("gpu", 12, 72, "stream_order"))
    nodes = replayed(rows, {("gpu", 10): 30, ("gpu", 11): 0, ("gpu", 12): 0}, {("gpu", 11), ("gpu", 12)})
    assert (nodes[("gpu", 10)].new_start, nodes[("gpu", 10)].new_end) == (8, 38)
    assert nodes[("gpu", 12)].new_end == 38
    assert nodes[("gpu", 13)].new_start == 40  # the gap after the chain stays
    assert wr.step_spans(nodes)[0] == (72, 38)


# ---------------------------------------------------------------------------------------------------
# synthesized runs against the simulator run again with the change
# ---------------------------------------------------------------------------------------------------

CASES = {
    "training": ("training", {"ranks": 2, "steps": 3, "layers": 3, "seed": 11}),
    "serving-decode": ("serving-decode", {"ranks": 2, "steps": 3, "layers": 4, "seed": 11}),
    "serving-prefill": ("serving-prefill", {"ranks": 2, "steps": 2, "layers": 2, "seed": 5}),
}
# (case, kernel regex, K, exact): exact where the graph holds every dependency the simulator used (eager
# launches, stream order, recorded event waits, host syncs, collectives across the ranks): then the
# prediction is the re-simulated step to the ns (one ns of rounding per matched activity)
CHANGES = [
    ("training", "gemm", 2.0, True),
    ("training", "flash", 3.0, True),
    ("training", "nccl", 2.0, True),  # the transfer 2x faster, the wait for the peer as it comes
    ("serving-prefill", "GroupProblemShape", 2.0, True),
    ("serving-decode", "nvjet", 2.0, False),
    ("serving-decode", "Norm", 4.0, False),
    # the MoE grouped GEMMs on the side stream inside the graph replay, which the main stream waits for
    # (inferred waits: the trace records those event waits only in the capture trace)
    ("serving-decode", "GroupProblemShape", 2.0, False),
]


@pytest.fixture(scope="module")
def synth_runs(warehouses):
    from tracehouse.warehouse.catalog import connect
    from warehouses import scenario

    wh, ids, truths = warehouses.named({case: scenario(name, **kw) for case, (name, kw) in CASES.items()})
    return connect(wh), ids, truths


def _by_rank_step(truth) -> dict[tuple[int, int], dict]:
    return {(s["rank"], s["step"]): s for s in truth["steps"]}


def _pairs(rows, truth):
    """(what-if row, truth step) of each rank's steps, in order (the warehouse numbers ProfilerStep#N N)."""
    out = []
    for rank in sorted({r["rank"] for r in rows}):
        mine = sorted((r for r in rows if r["rank"] == rank), key=lambda r: r["step"])
        theirs = sorted((s for s in truth["steps"] if s["rank"] == rank), key=lambda s: s["step"])
        assert len(mine) == len(theirs)
        out += list(zip(mine, theirs))
    return out


@pytest.mark.parametrize("case", list(CASES))
def test_speedup_one_reproduces_the_simulated_step_exactly(synth_runs, case):
    from tracehouse.warehouse.whatif import Change, whatif

    con, ids, truths = synth_runs
    rows = whatif(con, ids[case], Change(kernel=".", speedup=1.0))
    for row, st in _pairs(rows, truths[case]):
        assert row["predicted_ns"] == row["observed_ns"] == st["span_ns"]


@pytest.mark.parametrize("case,kernel,k,exact", CHANGES)
def test_prediction_is_within_5_percent_of_the_resimulated_step(synth_runs, tmp_path, case, kernel, k, exact):
    from tracehouse.synth.scenario import write_scenario
    from tracehouse.synth.truth import load_truth
    from tracehouse.warehouse.whatif import Change, whatif

    con, ids, truths = synth_runs
    name, kw = CASES[case]
    write_scenario(name, tmp_path / "again", slow_kernel=(kernel, 1.0 / k), **kw)
    again = load_truth(tmp_path / "again")
    base = _by_rank_step(truths[case])
    rows = whatif(con, ids[case], Change(kernel=kernel, speedup=k))
    assert rows and all(r["matched"] > 0 for r in rows)
    changed = 0
    for row, st in _pairs(rows, again):
        observed = base[(st["rank"], st["step"])]["span_ns"]
        assert row["observed_ns"] == observed
        truth_ns = st["span_ns"]
        changed += observed - truth_ns >= 0.02 * observed  # the change is large enough to be tested
        assert abs(row["predicted_ns"] - truth_ns) <= 0.05 * truth_ns, (row, truth_ns)
        if exact:
            assert abs(row["predicted_ns"] - truth_ns) <= row["matched"], (row, truth_ns)
    assert changed, "the change does not move the re-simulated step: the test could not fail"


# (case, fusion row): the row's chains fused in the simulator (synth/fused_chains.py: the chains one kernel
# as long as its longest member, where the first started, the other launches not made), same seed. Eager
# launches (serving prefill: each kernel its own host launch, the all-reduce an eager NCCL call across the
# ranks; the training scenario has no fusion row: the catalogue has no plain-PyTorch row) and graph replays
# (serving decode). Every dependency of these runs is in the graph: the prediction is exact.
FUSIONS = [
    ("serving-prefill", "sgl_add_rmsnorm"),
    ("serving-prefill", "sgl_allreduce_add_rmsnorm"),
    ("serving-decode", "sgl_allreduce_add_rmsnorm"),
]


def _pattern_steps(pattern_id: str) -> tuple[str, ...]:
    import csv

    with open(ROOT / "sql" / "rules" / "fusion_patterns.csv", newline="") as fh:
        [row] = [r for r in csv.DictReader(fh) if r["pattern_id"] == pattern_id]
    return tuple(row[f"split_{i}"] for i in (1, 2, 3) if row[f"split_{i}"])


@pytest.mark.parametrize("case,pattern", FUSIONS)
def test_fusion_prediction_is_the_resimulated_step(synth_runs, tmp_path, case, pattern):
    from tracehouse.synth.scenario import write_scenario
    from tracehouse.synth.truth import load_truth
    from tracehouse.warehouse.whatif import Change, whatif

    con, ids, truths = synth_runs
    status = con.execute(
        "SELECT any_value(status) FROM fusion_match WHERE run_id = ? AND pattern_id = ?", [ids[case], pattern]
    ).fetchone()[0]
    assert status == "Confirmed", "the row fires on adjacent chains, which the simulator fuses"
    name, kw = CASES[case]
    steps = _pattern_steps(pattern)
    write_scenario(name, tmp_path / "fused", fuse=steps, **kw)
    again = load_truth(tmp_path / "fused")
    base = _by_rank_step(truths[case])
    rows = whatif(con, ids[case], Change(fusion=pattern))
    for row, st in _pairs(rows, again):
        before = base[(st["rank"], st["step"])]
        assert row["observed_ns"] == before["span_ns"]
        # the simulator fused the chains the row holds: as many activities are gone as the what-if merged
        assert row["matched"] > 0 and row["matched"] % len(steps) == 0
        gone = before["n_activities"] - st["n_activities"]
        assert gone == row["matched"] // len(steps) * (len(steps) - 1), (row, gone)
        assert st["span_ns"] < before["span_ns"]
        assert row["predicted_ns"] == st["span_ns"], (row, st["span_ns"])


# ---------------------------------------------------------------------------------------------------
# the CLI
# ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args,message",
    [
        (["nope", "--category", "gemm"], "no run 'nope'"),
        (["{run}", "--kernel", "no_such_kernel_xyz"], "no GPU activity"),
        (["{run}", "--category", "gemm", "--speedup", "0"], "--speedup must be > 0"),
        (["{run}", "--category", "gemm", "--speedup", "-2"], "--speedup must be > 0"),
        (["{run}"], "exactly one of"),
        (["{run}", "--kernel", "gemm", "--category", "gemm"], "exactly one of"),
        (["{run}", "--kernel", "gemm("], "not a regular expression"),
        (["{run}", "--fusion", "no_such_row"], "not in run"),
        (["{run}", "--category", "gemm", "--step", "x"], "--step 'x'"),
    ],
)
def test_cli_errors_are_one_line(synth_runs, warehouses, cli_runner, args, message):
    from tracehouse.cli import main

    _, ids, _ = synth_runs
    wh = warehouses.named({"training": _source("training")})[0]
    res = cli_runner.invoke(
        main, ["--warehouse", str(wh.root), "whatif", *[a.format(run=ids["training"]) for a in args]]
    )
    assert res.exit_code == 1, res.output
    lines = [line for line in res.output.splitlines() if line.strip()]
    assert len(lines) == 1 and message in lines[0], res.output
    assert "Traceback" not in res.output


def _source(case):
    from warehouses import scenario

    name, kw = CASES[case]
    return scenario(name, **kw)


def test_cli_prints_each_step_and_its_change(synth_runs, warehouses, cli_runner):
    import json

    from tracehouse.warehouse.whatif import Change, whatif

    from tracehouse.cli import main

    con, ids, _ = synth_runs
    wh = warehouses.named({"training": _source("training")})[0]
    run = ids["training"]
    res = cli_runner.invoke(
        main, ["--warehouse", str(wh.root), "whatif", run, "--category", "gemm", "--format", "json"]
    )
    assert res.exit_code == 0, res.output
    printed = json.loads(res.output)
    rows = whatif(con, run, Change(category="gemm", speedup=2.0))
    assert [(p["rank"], p["step"]) for p in printed] == [(r["rank"], r["step"]) for r in rows]
    for p, r in zip(printed, rows):
        assert p["predicted_ms"] == r["predicted_ns"] / 1e6 and p["change_pct"] == r["change_pct"]
        assert p["change_ms"] < 0 and "gemm" in p["path_changes"]


# ---------------------------------------------------------------------------------------------------
# the report
# ---------------------------------------------------------------------------------------------------


def test_report_carries_the_whatif_of_its_step(synth_runs):
    """The report's gains are whatif() on its step: the dominant category's takeaway and the overlap and
    fusion rows carry them."""
    from tracehouse.reports.run import build_run_report
    from tracehouse.warehouse.whatif import Change, whatif

    con, ids, _ = synth_runs
    report = build_run_report(con, ids["serving-decode"])
    s = report.step
    gains = {(g.kind, g.subject): g for g in report.whatif}
    top = report.phases[0].categories[0].category
    assert ("category", top) in gains
    [row] = [
        r
        for r in whatif(con, ids["serving-decode"], Change(category=top, speedup=2.0), step=s.step)
        if r["rank"] == s.rank
    ]
    g = gains[("category", top)]
    assert (g.observed_ns, g.predicted_ns, g.change_pct) == (
        row["observed_ns"],
        row["predicted_ns"],
        row["change_pct"],
    )
    assert any(g.text in t.text and "2× faster" in t.text for t in report.takeaways)
    for o in report.overlap:
        if ("kernel", o.name) in gains:
            assert o.gain == gains[("kernel", o.name)].text
    fused = [f for f in report.fusion if f.gain]
    assert fused and all(f.gain == gains[("fusion", f.pattern_id)].text for f in fused)


# ---------------------------------------------------------------------------------------------------
# real traces
# ---------------------------------------------------------------------------------------------------


def _real_sources() -> list[str]:
    from conftest import REAL_FOLDERS, real_trace_files

    files = real_trace_files()
    return [*files, *REAL_FOLDERS] if files else ["<no shared traces>"]


@pytest.mark.parametrize("rel", _real_sources())
def test_speedup_one_reproduces_every_real_step(real_runs, rel):
    """Nothing changed, the replay lands every step of every real trace on its observed GPU span (the steps
    view's gpu_span_ns), whatever edges the trace has; with every activity 2x faster no node starts or
    ends later than observed (the replay is monotone)."""
    from conftest import require_shared
    from tracehouse.warehouse.catalog import connect
    from tracehouse.warehouse.whatif import Change, load_graphs, whatif

    from tracehouse.errors import InvalidArgument

    require_shared()
    wh, run_of = real_runs
    run_id = run_of[rel]
    con = connect(wh, runs=[run_id])
    spans = {
        (r, s): v
        for r, s, v in con.execute(
            "SELECT rank, step, gpu_span_ns FROM steps WHERE run_id = ? AND gpu_span_ns IS NOT NULL", [run_id]
        ).fetchall()
    }
    if not con.execute("SELECT count(*) FROM kernels WHERE run_id = ?", [run_id]).fetchone()[0]:
        with pytest.raises(InvalidArgument, match="no GPU activity"):
            whatif(con, run_id, Change(kernel=".", speedup=1.0))
        return
    graph = load_graphs(con, run_id)
    same = whatif(con, run_id, Change(kernel=".", speedup=1.0), graph=graph)
    assert {(r["rank"], r["step"]) for r in same} == set(spans)
    for r in same:
        assert r["predicted_ns"] == r["observed_ns"] == spans[(r["rank"], r["step"])], r
    graph.run({(r, n.key): (n.end - n.start) // 2 for r, g in graph.ranks.items() for n in g.gpu})
    for g in graph.ranks.values():
        assert all(n.new_start <= n.start and n.new_end <= n.end for n in g.nodes.values())

"""The step section's views (component_path, stream_path, layer_path, stream_families, step_parts) against the
synthesizer's ground truth: the simulator's own critical path (truth.critical_path_truth: gpu time per
category and per stream on the path, its segments), its per-step category, kernel and stream figures, and the
trace's own activities (the kernels table) where the truth names an activity by name and start.

The runs are test_critical_path's synthesized cases (the same warehouses, built once per session): decode
steps of CUDA-graph replays whose routed experts run on a side stream, prefill steps run eagerly, and a
two-rank training step with event waits between streams (its forward and backward do not repeat one layer:
no layer pattern, so it is left out of the layer and part checks)."""

from __future__ import annotations

import pytest
from conftest import query_rows
from tracehouse.warehouse.catalog import connect, materialize

CASES = {
    "serving-decode": {"scenario": "serving-decode", "ranks": 1, "steps": 3, "layers": 4},
    "serving-prefill": {"scenario": "serving-prefill", "ranks": 1, "steps": 2, "layers": 2},
    "training-2ranks": {"scenario": "training", "ranks": 2, "steps": 3, "layers": 3, "host_stall_us": 40.0},
}
LAYERED = ["serving-decode", "serving-prefill"]
NAMED = ("attention", "moe", "gemm", "communication", "norm", "other")


@pytest.fixture(scope="module")
def runs(warehouses):
    from warehouses import scenario_files

    sources = {
        case: scenario_files(kw["scenario"], **{k: v for k, v in kw.items() if k != "scenario"})
        for case, kw in CASES.items()
    }
    wh, ids, truths = warehouses.named(sources)
    con = connect(wh, kept=False, runs=list(ids.values()))
    # what the views under test read, once for these runs (each query would compute it again)
    materialize(
        con,
        ["_kernel_facts", "kernel_name_normalized", "step_breakdown", "critical_path", "critical_stream"]
        + ["layer_pattern_summary"],
    )
    return con, {case: (ids[case], truths[case]) for case in CASES}


def _steps(con, run_id: str, truth: dict):
    """(rank, sql step, truth step row) in step order: the warehouse numbers steps its own way."""
    by_rank: dict[int, list[dict]] = {}
    for st in truth["steps"]:
        by_rank.setdefault(st["rank"], []).append(st)
    for rank, rows in sorted(by_rank.items()):
        sql_steps = [
            r[0]
            for r in con.execute(
                "SELECT DISTINCT step FROM critical_stream WHERE run_id = ? AND rank = ? ORDER BY step",
                [run_id, rank],
            ).fetchall()
        ]
        assert len(sql_steps) == len(rows)
        yield from ((rank, s, t) for s, t in zip(sql_steps, sorted(rows, key=lambda r: r["step"])))


def _component(category: str) -> str:
    return category if category in NAMED else "rest"


@pytest.mark.parametrize("case", list(CASES))
def test_components_on_the_path_and_hidden_equal_the_simulation(runs, case):
    con, found = runs
    run_id, truth = found[case]
    for rank, step, st in _steps(con, run_id, truth):
        cp = st["critical_path"]
        want_gpu: dict[str, int] = {}
        want_path: dict[str, int] = {}
        for cat, ns in st["category_ns"].items():
            want_gpu[_component(cat)] = want_gpu.get(_component(cat), 0) + ns
        for cat, ns in cp["gpu_category_ns"].items():
            want_path[_component(cat)] = want_path.get(_component(cat), 0) + ns
        rows = query_rows(
            con,
            "SELECT component, gpu_time_ns, path_ns, hidden_ns, path_share FROM component_path "
            "WHERE run_id = ? AND rank = ? AND step = ?",
            [run_id, rank, step],
        )
        got = {("rest" if r["component"].startswith("rest (") else r["component"]): r for r in rows}
        assert {c: r["gpu_time_ns"] for c, r in got.items()} == {c: v for c, v in want_gpu.items() if v}
        assert {c: r["path_ns"] for c, r in got.items()} == {c: want_path.get(c, 0) for c in got}
        for c, r in got.items():
            assert r["hidden_ns"] == want_gpu[c] - want_path.get(c, 0), (case, step, c)
            assert r["path_share"] == pytest.approx(want_path.get(c, 0) / cp["span_ns"]), (case, step, c)


@pytest.mark.parametrize("case", list(CASES))
def test_streams_critical_parallel_and_on_the_path_equal_the_simulation(runs, case):
    con, found = runs
    run_id, truth = found[case]
    for rank, step, st in _steps(con, run_id, truth):
        cp = st["critical_path"]
        rows = query_rows(
            con,
            "SELECT stream, role, activities, path_ns FROM stream_path WHERE run_id = ? AND rank = ? AND step = ?",
            [run_id, rank, step],
        )
        assert {str(r["stream"]): r["activities"] for r in rows} == {
            s: v[2] for s, v in st["streams"].items()
        }
        assert {str(r["stream"]): r["path_ns"] for r in rows} == {
            str(r["stream"]): cp["stream_gpu_ns"].get(str(r["stream"]), 0) for r in rows
        }
        roles = {r["stream"]: r["role"] for r in rows}
        assert roles[cp["critical_stream"]] == "critical"
        assert sorted(roles.values()) == ["critical"] + ["parallel"] * (len(rows) - 1)


@pytest.mark.parametrize("case", LAYERED)
def test_each_layers_time_on_the_path_equals_the_simulations_segments(runs, case):
    """A layer's path time is the truth's gpu segments of that layer's activities: each segment is placed on
    its activity by name and start (the kernels table), the activity in the layer whose window holds it."""
    con, found = runs
    run_id, truth = found[case]
    by_stream = truth["layer_period_by_stream"]
    for rank, step, st in _steps(con, run_id, truth):
        layers = query_rows(
            con,
            "SELECT stream, layer, activities, start_ns, end_ns, path_ns FROM layer_path "
            "WHERE run_id = ? AND rank = ? AND step = ? ORDER BY stream, layer",
            [run_id, rank, step],
        )
        assert layers, (case, step)
        stream_of = {
            (name, start): stream
            for name, start, stream in con.execute(
                "SELECT name, start_ns, stream FROM kernels WHERE run_id = ? AND rank = ? AND step = ?",
                [run_id, rank, step],
            ).fetchall()
        }
        segments = [
            (stream_of[(name, start)], start, dur)
            for kind, name, start, dur, _ in st["critical_path"]["segments"]
            if kind == "gpu"
        ]
        for layer in layers:
            assert layer["activities"] == by_stream[str(layer["stream"])]
            want = sum(
                dur
                for stream, start, dur in segments
                if stream == layer["stream"] and layer["start_ns"] <= start < layer["end_ns"]
            )
            assert layer["path_ns"] == want, (case, step, layer)
        per_stream = {s: sum(1 for r in layers if str(r["stream"]) == s) for s in by_stream}
        assert set(per_stream.values()) == {truth["layers"]}


@pytest.mark.parametrize("case", LAYERED)
def test_families_and_parts_add_up_to_the_simulated_step(runs, case):
    """stream_families: every kernel of the step in exactly one family of its stream (time and calls per
    family = the truth's kernels of that normalized name); step_parts: the parts tile the wall and their busy
    time is the step's busy time."""
    con, found = runs
    run_id, truth = found[case]
    normalized = dict(con.execute("SELECT name, normalized_name FROM kernel_name_normalized").fetchall())
    for rank, step, st in _steps(con, run_id, truth):
        want: dict[str, list[int]] = {}
        for name, (ns, count) in st["kernels"].items():
            w = want.setdefault(normalized[name], [0, 0])
            w[0] += ns
            w[1] += count
        got: dict[str, list[int]] = {}
        for family, ns, calls, share in con.execute(
            "SELECT family, time_ns, calls, share_of_stream FROM stream_families "
            "WHERE run_id = ? AND rank = ? AND step = ?",
            [run_id, rank, step],
        ).fetchall():
            g = got.setdefault(family, [0, 0])
            g[0] += ns
            g[1] += calls
            assert 0 <= share <= 1
        assert got == want
        parts = query_rows(
            con,
            "SELECT p.part, p.dur_ns, p.busy_ns, b.wall_ns FROM step_parts AS p JOIN step_breakdown AS b "
            "USING (run_id, rank, step) WHERE p.run_id = ? AND p.rank = ? AND p.step = ? ORDER BY part_order",
            [run_id, rank, step],
        )
        assert [p["part"] for p in parts] == ["setup", "layers", "tail"]
        assert sum(p["dur_ns"] for p in parts) == parts[0]["wall_ns"]
        assert sum(p["busy_ns"] for p in parts) == st["busy_ns"]


def test_decode_moe_the_main_stream_waited_for_is_on_the_path(runs):
    """In every decode layer the main stream waits for the routed experts on the side stream (the record/wait
    pair of serving_layer): the next main-stream activity starts after the side stream's last activity of
    the layer ended, later than the main stream's own previous activity. Those experts decided when the
    step went on, so component_path must put their MoE time on the path (not hidden): at least 95 % of it
    (a segment clamped where the path's next one starts may lose a little). Read from the trace's activities
    alone (the kernels table), not from any path rule."""
    con, found = runs
    run_id, truth = found["serving-decode"]
    main, side = truth["streams"]["main"], truth["streams"]["side"]
    for rank, step, _ in _steps(con, run_id, truth):
        acts = query_rows(
            con,
            "SELECT stream, start_ns, end_ns, dur_ns, category FROM _kernel_facts "
            "WHERE run_id = ? AND rank = ? AND step = ? ORDER BY start_ns",
            [run_id, rank, step],
        )
        side_layers = query_rows(
            con,
            "SELECT start_ns, end_ns FROM layer_path WHERE run_id = ? AND rank = ? AND step = ? AND stream = ?",
            [run_id, rank, step, side],
        )
        awaited = 0
        for layer in side_layers:
            after = [a for a in acts if a["stream"] == main and a["start_ns"] >= layer["end_ns"]]
            before = [a for a in acts if a["stream"] == main and a["end_ns"] <= layer["end_ns"]]
            if after and before and before[-1]["end_ns"] < layer["end_ns"]:
                awaited += sum(
                    a["dur_ns"]
                    for a in acts
                    if a["stream"] == side
                    and a["category"] == "moe"
                    and layer["start_ns"] <= a["start_ns"] < layer["end_ns"]
                )
        assert awaited > 0
        (moe_path,) = con.execute(
            "SELECT path_ns FROM component_path WHERE run_id = ? AND rank = ? AND step = ? AND component = 'moe'",
            [run_id, rank, step],
        ).fetchone()
        assert moe_path >= 0.95 * awaited, (step, moe_path, awaited)


def test_decode_report_says_moe_on_the_path_and_hidden_as_the_simulation(warehouses):
    """The run report's step section (Markdown and JSON) on the report's decode run: MoE's time on the critical
    path and hidden beside it, the stream that hid it and the critical stream are the simulator's (the path
    truth's gpu time of `moe`, the rest of its time, if any, on the side stream)."""
    from conftest import REPORT_SCENARIOS
    from tracehouse.reports.run import build_run_report, render_run_report, report_json
    from tracehouse.warehouse.engine import open as open_connection
    from warehouses import scenario

    wh, ids, truths = warehouses.named(
        {name: scenario(name, seed=7, **opts) for name, opts in REPORT_SCENARIOS.items()}, derived=True
    )
    run_id, truth = ids["serving-decode"], truths["serving-decode"]
    report = build_run_report(open_connection(wh, runs=[run_id]), run_id)
    s = report.step
    steps = [
        r[0]
        for r in connect(wh, runs=[run_id])
        .execute(
            "SELECT DISTINCT step FROM step_spans WHERE run_id = ? AND rank = ? ORDER BY step",
            [run_id, s.rank],
        )
        .fetchall()
    ]
    st = sorted((t for t in truth["steps"] if t["rank"] == s.rank), key=lambda t: t["step"])[
        steps.index(s.step)
    ]
    on_path = st["critical_path"]["gpu_category_ns"].get("moe", 0)
    (moe,) = [c for c in s.path_components if c.component == "moe"]
    assert (moe.gpu_time_ns, moe.path_ns, moe.hidden_ns) == (
        st["category_ns"]["moe"],
        on_path,
        st["category_ns"]["moe"] - on_path,
    )
    # the main stream waits for the routed experts in every layer: what of MoE is not on the path ran on the
    # side stream (none when the path crossed all of it)
    assert moe.hidden_stream == (truth["streams"]["side"] if moe.hidden_ns else None)
    roles = {f.stream: f.role for f in s.stream_families}
    assert roles[st["critical_path"]["critical_stream"]] == "critical"
    assert set(roles.values()) == {"critical", "parallel"}
    assert s.parts and s.layer_streams and all(f.families for f in s.stream_families)
    md = render_run_report(report, "md")
    from tracehouse.reports.charts import fmt_ns

    row = f"| moe | {fmt_ns(moe.gpu_time_ns)} |"
    assert row in md and f"| {fmt_ns(on_path)} |" in md.split(row, 1)[1].split("\n", 1)[0]
    if moe.hidden_ns:
        assert f"stream {truth['streams']['side']} ({fmt_ns(moe.hidden_stream_ns)})" in md
    data = report_json(report)["step"]
    assert data["path_components"][0]["component"] == s.path_components[0].component


REAL_MULTISTREAM = "nvidia/a100_multistream_rank0.json.gz"


def _independent_streams(path, step_name: str) -> dict[int, tuple[int, int]]:
    """Read from the trace file alone (json, no tracehouse): the GPU activities (kernel, memcpy, memset)
    whose launch call (the runtime event of the same correlation id) starts inside the step's annotation,
    per stream (tid): (activities, sum of durations in ns; µs floats read exactly as decimals)."""
    import gzip
    import json
    from decimal import Decimal

    with gzip.open(path) as f:
        events = json.load(f)["traceEvents"]
    (step,) = [e for e in events if e.get("name") == step_name]
    start = Decimal(str(step["ts"]))
    end = start + Decimal(str(step["dur"]))
    calls = {
        e["args"]["correlation"]: Decimal(str(e["ts"]))
        for e in events
        if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {})
    }
    found: dict[int, list] = {}
    for e in events:
        if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"):
            at = calls.get(e.get("args", {}).get("correlation"))
            if at is not None and start <= at <= end:
                n = found.setdefault(e["tid"], [0, Decimal(0)])
                n[0] += 1
                n[1] += Decimal(str(e["dur"]))
    return {tid: (n, int(ns * 1000)) for tid, (n, ns) in found.items()}


def test_real_multistream_step_streams_families_and_components(warehouses):
    """A real A100 trace with six streams in its steps (ProfilerStep#552: a compute stream, send/recv on
    three, HtoD copies, embedding work): each stream's activities and GPU time, and its kernel families'
    calls and time, equal an independent read of the file; the critical stream is the compute stream; every
    component's time on the path and hidden add up to its GPU time, and the components' path time is the
    path's gpu time."""
    from warehouses import TRACES, real

    built = warehouses.get([real(REAL_MULTISTREAM)])
    (run_id,) = built.run_ids
    con = connect(built.warehouse, kept=False, runs=[run_id])
    (step,) = con.execute(
        "SELECT step FROM step_spans WHERE run_id = ? AND name = 'ProfilerStep#552'", [run_id]
    ).fetchone()
    materialize(con, ["critical_path"], where="run_id = ? AND step = ?", params=[run_id, step])
    want = _independent_streams(TRACES / REAL_MULTISTREAM, "ProfilerStep#552")
    assert len(want) == 6
    key = [run_id, step]
    streams = {
        r["stream"]: r
        for r in query_rows(
            con, "SELECT stream, role, activities, gpu_ns FROM stream_path WHERE run_id = ? AND step = ?", key
        )
    }
    assert {s: (r["activities"], r["gpu_ns"]) for s, r in streams.items()} == want
    assert streams[7]["role"] == "critical"
    assert all(r["role"] == "parallel" for s, r in streams.items() if s != 7)
    families = con.execute(
        "SELECT stream, sum(calls), sum(time_ns), sum(share_of_stream) FROM stream_families "
        "WHERE run_id = ? AND step = ? GROUP BY stream",
        key,
    ).fetchall()
    assert {s: (n, ns) for s, n, ns, _ in families} == want
    assert all(share == pytest.approx(1.0) for *_, share in families)
    components = query_rows(
        con, "SELECT gpu_time_ns, path_ns, hidden_ns FROM component_path WHERE run_id = ? AND step = ?", key
    )
    assert sum(c["gpu_time_ns"] for c in components) == sum(ns for _, ns in want.values())
    assert all(c["path_ns"] + c["hidden_ns"] == c["gpu_time_ns"] for c in components)
    (path_gpu,) = con.execute(
        "SELECT sum(dur_ns) FROM critical_path WHERE run_id = ? AND step = ? AND kind = 'gpu'", key
    ).fetchone()
    assert sum(c["path_ns"] for c in components) == path_gpu

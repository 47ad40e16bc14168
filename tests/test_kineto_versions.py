"""Every version of the PyTorch profiler's trace is understood, not only read (docs/tables.md, "Kineto
traces"): the 2021 Kineto's spellings (Operator, Runtime, Kernel, `async` launch flows) and the autograd
profiler's bare array (uncategorised events on "CPU functions" / "CUDA functions", `cpu_to_cuda` flows)
land as the same tables as the modern spelling of the same run.

Synthesized (synth/situations/kineto_versions.py): the simulator's training run in each spelling, against
the simulated truth and against the modern spelling's tables row by row. Real (../shared/traces): the 2021
ResNet-50 trace of the Kineto repository, against an independent read of its JSON.
"""

from __future__ import annotations

import pytest
from conftest import TRACES, independent_links, load_json
from tracehouse.synth.situations import write_situation
from tracehouse.synth.situations.kineto_versions import RUN
from tracehouse.warehouse.catalog import connect

LEGACY = "legacy/resnet50_2021_v100.pt.trace.json.gz"
EDGE = "edge/legacy_categories_rank1.json.gz"


# ---- the spellings, one by one ------------------------------------------------------------------------

# (ph, cat as written, pid) -> the category every later stage reads (docs/tables.md, "Kineto traces")
SPELLINGS = [
    ("X", "Operator", "1"),
    "cpu_op",
    ("X", "Runtime", "1"),
    "cuda_runtime",
    ("X", "Driver", "1"),
    "cuda_driver",
    ("X", "Kernel", "0"),
    "kernel",
    ("X", "Memcpy", "0"),
    "gpu_memcpy",
    ("X", "Memset", "0"),
    "gpu_memset",
    ("X", "User", "0"),
    "gpu_user_annotation",
    ("X", "gpu_user_Annotation", "0"),
    "gpu_user_annotation",
    ("s", "async", "1"),
    "ac2g",
    ("f", "async", "0"),
    "ac2g",
    ("s", "async_gpu", "1"),
    "ac2g",
    ("f", "async_cpu_to_gpu", "0"),
    "ac2g",
    ("s", "cpu_to_cuda", "CPU functions"),
    "ac2g",
    ("s", "fwd_bwd", "1"),
    "fwdbwd",
    ("f", "forward_backward", "1"),
    "fwdbwd",
    ("X", None, "CPU functions"),
    "cpu_op",
    ("X", None, "CUDA functions"),
    "kernel",
    ("X", None, "GPU functions"),
    "kernel",
    # modern spellings stay; an unknown category is kept as written; an async event that is no flow too
    ("X", "cpu_op", "1"),
    "cpu_op",
    ("X", "cuda_runtime", "1"),
    "cuda_runtime",
    ("s", "ac2g", "1"),
    "ac2g",
    ("X", "Trace", "Spans"),
    "Trace",
    ("b", "async", "1"),
    "async",
    ("i", None, "1"),
    None,
    ("X", None, "1"),
    None,
]


def test_every_spelling_is_read_as_the_modern_one():
    import duckdb
    from tracehouse.ingest.decode import define_categories

    con = duckdb.connect()
    define_categories(con)
    cases = list(zip(SPELLINGS[::2], SPELLINGS[1::2]))
    got = [con.execute("SELECT kineto_category(?, ?, ?)", list(args)).fetchone()[0] for args, _ in cases]
    assert got == [want for _, want in cases]


# ---- synthesized: the simulated run in each spelling -------------------------------------------------


@pytest.mark.parametrize("name", ["kineto-2021", "autograd-profiler"])
def test_older_spellings_give_the_simulated_steps_and_links(situation_warehouse, name):
    """Each ProfilerStep#N is a step with its host window; its activities, those with a launch, those
    launched inside an op, and its busy time are the simulator's."""
    wh, runs, expect = situation_warehouse
    con = connect(wh)
    rows = con.execute(
        """
        SELECT s.step, s.source, s.host_start_ns, s.host_end_ns, s.activities, s.gpu_busy_ns,
               (SELECT count(*) FILTER (WHERE k.linked) FROM kernels k
                 WHERE k.run_id = s.run_id AND k.step = s.step),
               (SELECT count(k.cpu_op_id) FROM kernels k WHERE k.run_id = s.run_id AND k.step = s.step)
        FROM steps s WHERE s.run_id = ? ORDER BY s.step
        """,
        [runs[name]],
    ).fetchall()
    got = {
        str(step): {
            "host_start_ns": start,
            "host_end_ns": end,
            "activities": n,
            "gpu_busy_ns": busy,
            "linked": linked,
            "with_op": with_op,
        }
        for step, source, start, end, n, busy, linked, with_op in rows
        if source == "profiler_step"
    }
    assert len(rows) == len(got) == RUN["steps"]
    assert got == expect[name]["steps"]


@pytest.fixture(scope="module")
def spellings(warehouses):
    """The same simulated run written in every spelling, each ingested as its own run."""
    from warehouses import scenario

    wh, runs, _ = warehouses.named(
        {
            spelling: scenario("training", spelling=spelling, **RUN)
            for spelling in ("modern", "kineto-2021", "autograd")
        }
    )
    return connect(wh), runs


KERNEL_COLUMNS = """k.device, k.stream, k.kind, k.name, k.start_ns, k.dur_ns, k.correlation, k.linked,
    k.launch_call, k.launch_start_ns, k.launch_dur_ns, k.launch_tid, k.step, k.phase, k.grid, k.block,
    k.registers, k.shared_memory, k.occupancy, k.bytes, k.collective_name, k.in_msg_nelems, k.group_size,
    o.name AS op, o.start_ns AS op_start_ns"""


def _kernels(con, run_id: str, columns: str = KERNEL_COLUMNS) -> list[tuple]:
    return con.execute(
        f"SELECT {columns} FROM kernels k LEFT JOIN cpu_ops o ON o.run_id = k.run_id AND o.op_id = k.cpu_op_id "
        "WHERE k.run_id = ? ORDER BY k.start_ns, k.name",
        [run_id],
    ).fetchall()


def test_2021_spelling_gives_the_modern_tables(spellings):
    """Row for row, ids aside: the same kernels (launch call, op, step, every figure), the same host
    ranges (ops, runtime calls, annotations: the 2021 Kineto wrote annotations as ops, so ProfilerStep#N
    is a cpu_op there) and the same steps. Not compared, because that version did not write them: Python
    frames, CUDA sync records, and the External id of runtime calls and GPU activities (spelled `external
    id` there, beside the ops' `External id`: one of the two is read)."""
    con, runs = spellings
    modern, legacy = runs["modern"], runs["kineto-2021"]
    assert _kernels(con, legacy) == _kernels(con, modern)
    assert len(_kernels(con, modern)) == 84

    host = """SELECT CASE WHEN cat = 'user_annotation' THEN 'cpu_op' ELSE cat END, name, pid, tid, start_ns,
                     dur_ns, depth, correlation, input_dims
              FROM cpu_ops WHERE run_id = ? AND cat NOT IN ('cuda_sync', 'gpu_user_annotation')
              ORDER BY pid, tid, start_ns, name"""
    assert con.execute(host, [legacy]).fetchall() == con.execute(host, [modern]).fetchall()
    gpu_annotations = "SELECT name, start_ns, dur_ns FROM cpu_ops WHERE run_id = ? AND cat = 'gpu_user_annotation' ORDER BY 2"
    assert (
        con.execute(gpu_annotations, [legacy]).fetchall() == con.execute(gpu_annotations, [modern]).fetchall()
    )

    steps = (
        "SELECT step, name, source, start_ns, end_ns, phase FROM step_spans WHERE run_id = ? ORDER BY step"
    )
    assert con.execute(steps, [legacy]).fetchall() == con.execute(steps, [modern]).fetchall()
    flows = "SELECT kind, count(*), count(src_event_id), count(dst_event_id) FROM flows WHERE run_id = ? GROUP BY 1"
    assert con.execute(flows, [legacy]).fetchall() == [("ac2g", 84, 84, 84)]


def test_autograd_export_gives_the_modern_kernels_ops_and_steps(spellings):
    """The autograd profiler wrote no runtime calls, no stream and no activity kind: each GPU activity is
    linked to the op its flow starts on, which is the op the modern trace puts around its launch call;
    its step, device and times are the modern ones; the ops (ProfilerStep#N among them) and steps too."""
    con, runs = spellings
    modern, autograd = runs["modern"], runs["autograd"]
    same = "k.device, k.name, k.start_ns, k.dur_ns, k.linked, k.step, o.name AS op, o.start_ns AS op_start_ns"
    assert _kernels(con, autograd, same) == _kernels(con, modern, same)
    assert {r[0] for r in _kernels(con, autograd, "k.launch_call = o.name")} == {True}

    host = """SELECT name, start_ns, dur_ns, depth FROM cpu_ops
              WHERE run_id = ? AND cat IN ('cpu_op', 'user_annotation') ORDER BY start_ns, name"""
    assert con.execute(host, [autograd]).fetchall() == con.execute(host, [modern]).fetchall()
    steps = "SELECT step, name, source, start_ns, end_ns FROM step_spans WHERE run_id = ? ORDER BY step"
    assert con.execute(steps, [autograd]).fetchall() == con.execute(steps, [modern]).fetchall()
    busy = "SELECT step, gpu_busy_ns FROM steps WHERE run_id = ? ORDER BY step"
    assert con.execute(busy, [autograd]).fetchall() == con.execute(busy, [modern]).fetchall()


def test_the_autograd_export_is_a_bare_array(tmp_path):
    out = write_situation("autograd-profiler", tmp_path)
    [trace] = [p for p in out.iterdir() if p.name.endswith(".json.gz")]
    events = load_json(trace)
    assert isinstance(events, list)
    assert {e.get("pid") for e in events} == {"CPU functions", "CUDA functions"}
    assert {e.get("cat") for e in events if e["ph"] == "X"} == {None}


# ---- real: the 2021 ResNet-50 trace of the Kineto repository -----------------------------------------


@pytest.fixture(scope="module")
def legacy_run(real_runs):
    wh, run_of = real_runs
    runs = {rel: run_of[rel] for rel in (LEGACY, EDGE)}
    return connect(wh, runs=list(runs.values())), runs


def test_2021_trace_has_its_six_profiler_steps(legacy_run):
    """Six steps numbered 5..10, each the window of its ProfilerStep#N (an `Operator` in that version),
    read here with json alone."""
    con, runs = legacy_run
    events = load_json(TRACES / LEGACY)["traceEvents"]
    marked = {
        int(e["name"].split("#")[1]): (int(e["ts"] * 1000), int((e["ts"] + e["dur"]) * 1000))
        for e in events
        if e.get("ph") == "X" and e.get("cat") == "Operator" and e["name"].startswith("ProfilerStep#")
    }
    assert sorted(marked) == [5, 6, 7, 8, 9, 10]
    rows = con.execute(
        "SELECT step, source, start_ns, end_ns FROM step_spans WHERE run_id = ? ORDER BY step", [runs[LEGACY]]
    ).fetchall()
    assert rows == [(n, "profiler_step", *marked[n]) for n in sorted(marked)]


def test_2021_trace_links_every_kernel_to_its_launch_and_op(legacy_run):
    """Every GPU activity (Kernel, Memcpy, Memset) has its `Runtime` launch call (by correlation: as many
    as an independent count of launch/activity pairs) and the `Operator` around that call, and a step."""
    con, runs = legacy_run
    expected = independent_links(TRACES / LEGACY)
    total, linked, with_op, stepped, kinds = con.execute(
        "SELECT count(*), count(*) FILTER (WHERE linked), count(cpu_op_id), count(step), "
        "list(DISTINCT kind ORDER BY kind) FROM kernels WHERE run_id = ?",
        [runs[LEGACY]],
    ).fetchone()
    assert total == linked == with_op == stepped == expected["correlated"] == expected["with_op"] == 9096
    assert kinds == ["kernel", "memcpy", "memset"]
    ops = con.execute(
        "SELECT count(*) FROM kernels k JOIN cpu_ops o ON o.run_id = k.run_id AND o.op_id = k.cpu_op_id "
        "WHERE k.run_id = ? AND o.cat = 'cpu_op' AND o.name LIKE 'aten::%'",
        [runs[LEGACY]],
    ).fetchone()[0]
    assert ops == 9096


def test_2021_trace_critical_path_spans_each_step(legacy_run):
    """The critical path of each step runs from the step's start (its ProfilerStep#N) to the end of its
    last GPU activity, its segments tiling that span."""
    con, runs = legacy_run
    rows = con.execute(
        """
        WITH last AS (SELECT run_id, step, max(end_ns) AS end_ns FROM kernels GROUP BY ALL)
        SELECT c.step, c.path_start_ns = s.start_ns, c.path_end_ns = l.end_ns, c.span_ns,
               c.path_end_ns - c.path_start_ns
        FROM critical_stream c
        JOIN step_spans s ON s.run_id = c.run_id AND s.step = c.step
        JOIN last l ON l.run_id = c.run_id AND l.step = c.step
        WHERE c.run_id = ? ORDER BY c.step
        """,
        [runs[LEGACY]],
    ).fetchall()
    assert [r[0] for r in rows] == [5, 6, 7, 8, 9, 10]
    assert all(r[1] and r[2] and r[3] == r[4] for r in rows), rows


def test_older_categories_edge_trace_links_by_async_gpu_flows(legacy_run):
    """The 2022 HTA test trace (`Kernel`, `Runtime`, flows `async_gpu`, no metadata): its four kernels
    are linked to their launch calls and its flows are CPU->GPU flows bound at both ends."""
    con, runs = legacy_run
    assert con.execute(
        "SELECT count(*), count(*) FILTER (WHERE linked), list(DISTINCT launch_call) FROM kernels WHERE run_id = ?",
        [runs[EDGE]],
    ).fetchone() == (4, 4, ["cudaLaunchKernel"])
    assert con.execute(
        "SELECT kind, count(*), count(src_event_id), count(dst_event_id) FROM flows WHERE run_id = ? GROUP BY 1",
        [runs[EDGE]],
    ).fetchall() == [("ac2g", 4, 4, 4)]

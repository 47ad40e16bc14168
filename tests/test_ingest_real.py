"""Every real trace ingests, and its GPU activities match an independent plain-JSON count to the ns."""

from __future__ import annotations

import json

import pytest
from conftest import (
    ORACLES,
    TRACES,
    independent_gpu_summary,
    independent_links,
    real_trace_files,
)
from tracehouse.warehouse.catalog import connect


@pytest.fixture(scope="module")
def real_con(real_warehouse):
    """(one connection over the real warehouse, {relative path: run id}): these tests read its tables,
    each a run of its own, so they share a connection rather than open one each."""
    wh, run_of = real_warehouse
    con = connect(wh)
    yield con, run_of
    con.close()


@pytest.mark.parametrize("rel", real_trace_files() or ["<no shared traces>"])
def test_gpu_activities_match_plain_json(real_con, rel):
    con, run_of = real_con
    expected = independent_gpu_summary(TRACES / rel)
    count, dur, linked = con.execute(
        "SELECT count(*), coalesce(sum(dur_ns), 0), count(*) FILTER (WHERE linked) FROM kernels WHERE run_id = ?",
        [run_of[rel]],
    ).fetchone()
    assert (count, dur, linked) == (expected["count"], expected["dur_ns"], expected["linked"])


@pytest.mark.parametrize("rel", real_trace_files() or ["<no shared traces>"])
def test_steps_and_op_links_match_plain_json(real_con, rel):
    """Every ProfilerStep#N host range is a step with its window, whatever category the trace's version
    gave it; and every GPU activity whose launch call starts inside a host op is attributed to an op, as
    many as an independent pass over the file counts (conftest.independent_links). A version whose
    spellings ingest did not understand fails here: no steps, no ops for its kernels."""
    con, run_of = real_con
    expected = independent_links(TRACES / rel)
    steps = con.execute(
        "SELECT step, start_ns, end_ns FROM step_spans WHERE run_id = ? AND source = 'profiler_step'",
        [run_of[rel]],
    ).fetchall()
    assert {step: (start, end) for step, start, end in steps} == expected["profiler_steps"]
    assert len(steps) == len(expected["profiler_steps"])
    with_op = con.execute("SELECT count(cpu_op_id) FROM kernels WHERE run_id = ?", [run_of[rel]]).fetchone()[
        0
    ]
    assert with_op == expected["with_op"]


# Linked counts stated in the issue, and attribution from TraceLens (oracles/tracelens/attribution.json).
LINKED = {
    "nvidia/b200_eager_rank0.json.gz": (929, 929),
    "nvidia/h100_qwen1.5-0.5b.json.gz": (1198, 1707),
    "amd/mi300_qwen1.5-0.5b.json.gz": (1054, 1517),
    "inference/sglang_decode/sglang_Qwen3-8B_decode.json.gz": (558, 558),
}


@pytest.mark.parametrize("rel", sorted(LINKED))
def test_linked_counts(real_con, rel):
    con, run_of = real_con
    linked, total = con.execute(
        "SELECT count(*) FILTER (WHERE linked), count(*) FROM kernels WHERE run_id = ?", [run_of[rel]]
    ).fetchone()
    assert (linked, total) == LINKED[rel]


def _tracelens_attribution():
    path = ORACLES / "tracelens" / "attribution.json"
    if not path.is_file():
        return []
    return [row for row in json.loads(path.read_text()) if row["label"] == "eager"]


@pytest.mark.parametrize("row", _tracelens_attribution(), ids=lambda r: r["trace"])
def test_eager_attribution_matches_tracelens(real_con, row):
    """Kernels with an enclosing cpu_op and a Python launch site, as TraceLens counts them."""
    con, run_of = real_con
    with_op, with_site, site_us = con.execute(
        "SELECT count(cpu_op_id), count(python_frame_id), sum(dur_ns) FILTER (WHERE python_frame_id IS NOT NULL) / 1e3 "
        "FROM kernels WHERE run_id = ?",
        [run_of[row["trace"]]],
    ).fetchone()
    assert with_op == row["with_cpu_op"]
    assert with_site == row["with_python_site"]
    assert site_us == pytest.approx(row["time_with_python_site_us"], abs=0.01)


def test_multirank_directory_is_one_run_with_two_ranks(real_runs):
    wh, run_of = real_runs
    con = connect(wh, runs=[run_of["multirank/sampled_2ranks"]])
    assert con.execute("SELECT n_ranks, world_size FROM runs").fetchone() == (2, 128)
    assert con.execute("SELECT list(DISTINCT rank ORDER BY rank) FROM kernels").fetchone()[0] == [0, 1]


def test_hardware_and_framework_detected(real_con):
    con, run_of = real_con
    rows = dict(con.execute("SELECT run_id, hardware || ' / ' || framework FROM runs").fetchall())
    assert rows[run_of["nvidia/b200_eager_rank0.json.gz"]] == "NVIDIA B200 / vllm"
    assert rows[run_of["amd/mi300_qwen1.5-0.5b.json.gz"]] == "AMD Instinct MI300X VF / pytorch"
    assert rows[run_of["inference/sglang_decode/sglang_Qwen3-8B_decode.json.gz"]].endswith("/ sglang")


def test_timestamps_are_exact_nanoseconds(real_con):
    """Epoch-µs floats lose up to 128 ns; the decimal text must survive exactly."""
    con, run_of = real_con
    rel = "nvidia/v100_ns_resolution_rank0.pt.trace.json.gz"
    from conftest import load_json

    doc = load_json(TRACES / rel)
    from decimal import Decimal

    first = min(
        (e for e in doc["traceEvents"] if e.get("ph") == "X" and e.get("cat") == "kernel"),
        key=lambda e: Decimal(e["ts"]),
    )
    start = con.execute(
        "SELECT min(start_ns) FROM kernels WHERE run_id = ? AND kind = 'kernel'", [run_of[rel]]
    ).fetchone()[0]
    assert start == int(Decimal(first["ts"]) * 1000)

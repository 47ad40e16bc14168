"""Serving views: batch composition of steps, step_latency, kernel_roofline, collective_bandwidth.

Synthesized ground truth (synth/situations/serving_batches.py) and hand-checked figures on real traces."""

from __future__ import annotations

import json

import pytest

from tests.conftest import query_rows, real_trace_files

BATCH_COLS = (
    "batch_size",
    "prefill_requests",
    "decode_requests",
    "prefill_tokens",
    "decode_tokens",
    "tokens",
    "kv_tokens",
    "sum_q_sq",
    "sum_q_kv",
    "batch_source",
)


@pytest.fixture(scope="module")
def serving(situation_warehouse):
    from tracehouse.warehouse.catalog import connect

    wh, every, truths = situation_warehouse
    runs = {name: every[name] for name in ("serving-batches", "atom-batches")}
    expect = {name: truths[name] for name in runs}
    con = connect(wh, runs=list(runs.values()))
    yield con, runs, expect
    con.close()


@pytest.mark.parametrize("name", ["serving-batches", "atom-batches"])
def test_batch_composition_equals_truth(serving, name):
    con, runs, expect = serving
    rows = query_rows(
        con, f"SELECT phase, {', '.join(BATCH_COLS)} FROM steps WHERE run_id = ? ORDER BY step", [runs[name]]
    )
    truth = expect[name]["steps"]
    assert len(rows) == len(truth)
    for row, want in zip(rows, truth):
        assert {c: row[c] for c in BATCH_COLS} == {c: want[c] for c in BATCH_COLS}
        if "phase" in want:
            assert row["phase"] == want["phase"]


def test_step_latency_by_batch_size(serving):
    con, runs, expect = serving
    rows = query_rows(
        con,
        "SELECT phase, batch_size, steps, median_step_ns, p90_step_ns FROM step_latency "
        "WHERE run_id = ? AND phase = 'decode' ORDER BY batch_size",
        [runs["serving-batches"]],
    )
    assert rows == expect["serving-batches"]["step_latency"]


def test_roofline_flops_bytes_and_bound_equal_truth(serving):
    con, runs, expect = serving
    truth = expect["serving-batches"]
    dev = truth["device"]
    rows = query_rows(
        con, "SELECT op_name, dims, flops, bytes FROM _op_work WHERE run_id = ?", [runs["serving-batches"]]
    )
    for op in truth["ops"]:
        got = [r for r in rows if r["op_name"] == op["op"] and ("dims" not in op or r["dims"] == op["dims"])]
        assert got, (op, rows)
        assert {(r["flops"], r["bytes"]) for r in got} == {(op["flops"], op["bytes"])}
    roof = query_rows(
        con,
        "SELECT kernel, family, dur_ns, flops, bytes, achieved_tflops, achieved_tbps, device, "
        "peak_tflops, peak_tbps, bound, pct_of_bound FROM kernel_roofline WHERE run_id = ?",
        [runs["serving-batches"]],
    )
    assert {r["device"] for r in roof} == {dev["device"]}
    by_family = {}
    for r in roof:
        by_family.setdefault(r["family"], []).append(r)
    # the GEMM kernel: every aten::mm launches it; the flops are the sum of the mm ops'
    gemm = by_family["gemm"]
    assert len(gemm) == 2  # decode and prefill phases
    mms = [o for o in truth["ops"] if o["op"] == "aten::mm"]
    decode_mm = next(o for o in mms if o["dims"].startswith("[[4,"))
    prefill = next(r for r in gemm if r["dur_ns"] == 200_000)
    big = next(o for o in mms if o["dims"].startswith("[[300,"))
    assert prefill["flops"] == big["flops"] and prefill["bytes"] == big["bytes"]
    assert prefill["achieved_tflops"] == pytest.approx(big["flops"] / big["dur_ns"] / 1e3, rel=1e-12)
    intensity = big["flops"] / big["bytes"]
    ridge = dev["bf16_tflops"] / dev["hbm_tbps"]
    assert prefill["bound"] == ("compute" if intensity >= ridge else "memory")
    attainable = min(dev["bf16_tflops"], intensity * dev["hbm_tbps"])
    assert prefill["pct_of_bound"] == pytest.approx(
        100 * big["flops"] / big["dur_ns"] / 1e3 / attainable, rel=1e-12
    )
    decode = next(r for r in gemm if r["dur_ns"] != 200_000)
    assert decode["flops"] == 2 * decode_mm["flops"] + 2 * 8 * 4096 * 4096  # bs 4, 4, 8
    assert decode["bound"] == "memory"
    attn = by_family["attention"][0]
    fa = next(o for o in truth["ops"] if o["op"] == "aten::_flash_attention_forward")
    assert (attn["flops"], attn["bytes"], attn["dur_ns"]) == (fa["flops"], fa["bytes"], fa["dur_ns"])
    add = next(r for r in by_family["elementwise"] if r["dur_ns"] == 10_000)
    el = next(o for o in truth["ops"] if o["op"] == "aten::add")
    assert add["flops"] is None and add["bytes"] == el["bytes"] and add["bound"] == "memory"
    assert add["pct_of_bound"] == pytest.approx(
        100 * el["bytes"] / el["dur_ns"] / 1e3 / dev["hbm_tbps"], rel=1e-12
    )


def test_collective_bandwidth_nccl_tests_formulas(serving):
    """nccl-tests (PERFORMANCE.md): algbw = S / t; busbw = algbw × 2(n-1)/n for all-reduce, (n-1)/n for
    all-gather and reduce-scatter (S = the gathered output / the scattered input), 1 for broadcast."""
    con, runs, expect = serving
    truth = expect["serving-batches"]
    rows = {
        r["collective"]: r
        for r in query_rows(
            con,
            "SELECT collective, group_size, bytes, dur_ns, algbw_gbps, bus_factor, busbw_gbps, size_bucket_bytes, "
            "link_gbps, pct_of_link FROM collective_bandwidth WHERE run_id = ?",
            [runs["serving-batches"]],
        )
    }
    assert set(rows) == {c["collective"] for c in truth["collectives"]}
    for c in truth["collectives"]:
        r = rows[c["collective"]]
        assert (r["group_size"], r["bytes"], r["dur_ns"]) == (4, c["bytes"], c["dur_ns"])
        assert r["bus_factor"] == c["bus_factor"]
        assert r["algbw_gbps"] == c["bytes"] / c["dur_ns"]
        assert r["busbw_gbps"] == pytest.approx(c["bytes"] / c["dur_ns"] * c["bus_factor"], rel=1e-15)
        assert r["size_bucket_bytes"] <= c["bytes"] < 2 * r["size_bucket_bytes"]
        assert r["link_gbps"] == truth["device"]["link_gbps"]
    # hand case: 2 MiB all-reduce in 50 us over 4 ranks: algbw 41.94304 GB/s, busbw 62.91456 GB/s
    assert rows["allreduce"]["algbw_gbps"] == pytest.approx(41.94304, rel=1e-12)
    assert rows["allreduce"]["busbw_gbps"] == pytest.approx(62.91456, rel=1e-12)


def test_device_peaks_user_file_wins(tmp_path, monkeypatch):
    from tracehouse.warehouse.peaks import load_device_peaks
    from tracehouse.warehouse.rules import RulesError

    user = tmp_path / "peaks.csv"
    user.write_text(
        "rule_order,device,pattern,bf16_tflops,hbm_tbps,source\n1,measured H100,(?i)H100,600,2.6,bench\n"
    )
    table = load_device_peaks(user).to_pylist()
    assert table[0]["device"] == "measured H100" and table[0]["bf16_tflops"] == 600.0
    assert table[0]["peaks_version"].startswith("1+user.")
    bad = tmp_path / "bad.csv"
    bad.write_text("rule_order,device,pattern,bf16_tflop\n1,x,y,3\n")
    with pytest.raises(RulesError, match="unknown column"):
        load_device_peaks(bad)


def test_device_peaks_version_matches_file():
    from tracehouse.warehouse.peaks import PEAKS_VERSION_FILE, shipped_peaks_sha256

    assert json.loads(PEAKS_VERSION_FILE.read_text())["sha256"] == shipped_peaks_sha256(), (
        "sql/rules/device_peaks.csv changed: bump peaks_version and record the new sha256"
    )


# ---- real traces ------------------------------------------------------------------------------------

INFERENCE = {
    # file: (batch_size, prefill_tokens, decode_tokens, sum_q_kv) from the annotations (zcat | grep)
    "inference/sglang_decode/sglang_Qwen3-8B_decode.json.gz": (32, 0, 32, 32785),
    "inference/sglang_prefilldecode/sglang_Qwen3-8B_prefilldecode.json.gz": (15, 15360, 0, 15728640),
    "inference/vllm_decode_full/graph_execution.json.gz": (32, 0, 32, 55086),
}


@pytest.fixture(scope="module")
def real_serving(real_runs):
    from tracehouse.warehouse.catalog import connect

    wh, run_of = real_runs
    runs = {
        rel: run_of[rel]
        for rel in [
            *INFERENCE,
            "nvidia/h100_qwen1.5-0.5b.json.gz",
            "nvidia/a100_nccl_rank0.json.gz",
            "nvidia/b200_eager_rank0.json.gz",
        ]
    }
    con = connect(wh, runs=list(runs.values()))
    yield con, runs
    con.close()


@pytest.mark.parametrize("rel", sorted(INFERENCE))
def test_real_batch_sizes_equal_annotations(real_serving, rel):
    con, runs = real_serving
    rows = query_rows(
        con,
        "SELECT batch_size, prefill_tokens, decode_tokens, sum_q_kv FROM steps WHERE run_id = ?",
        [runs[rel]],
    )
    assert [tuple(r.values()) for r in rows] == [INFERENCE[rel]]


def test_real_gemm_flops_are_2mnk(real_serving):
    """Hand-checked: Qwen1.5-0.5B on the H100, aten::mm [[8944,1024],[1024,2816]] = 2·8944·2816·1024 FLOPs;
    Qwen3-8B prefill on the MI300X, aten::mm [[15360,4096],[4096,24576]] = 2·15360·24576·4096."""
    con, runs = real_serving
    for rel, dims, flops in (
        ("nvidia/h100_qwen1.5-0.5b.json.gz", "[[8944,1024],[1024,2816]]", 51_581_550_592),
        (
            "inference/sglang_prefilldecode/sglang_Qwen3-8B_prefilldecode.json.gz",
            "[[15360,4096],[4096,24576]]",
            3_092_376_453_120,
        ),
    ):
        got = query_rows(
            con,
            "SELECT DISTINCT flops, bytes FROM _op_work WHERE run_id = ? AND op_name = 'aten::mm' "
            "AND dims = ?",
            [runs[rel], dims],
        )
        m, k = json.loads(dims)[0]
        n = json.loads(dims)[1][1]
        assert got == [{"flops": flops, "bytes": (m * k + k * n + m * n) * 2}]
        assert flops == 2 * m * n * k


def test_real_collective_hand_case(real_serving):
    """a100_nccl: an all-reduce of 7875584 floats over 2 ranks: S = 31502336 B, busbw = algbw (2·1/2)."""
    con, runs = real_serving
    rows = query_rows(
        con,
        "SELECT bytes, dur_ns, algbw_gbps, busbw_gbps, link_gbps FROM collective_bandwidth "
        "WHERE run_id = ? AND collective = 'allreduce' AND bytes = 31502336",
        [runs["nvidia/a100_nccl_rank0.json.gz"]],
    )
    assert len(rows) == 3
    for r in rows:
        assert r["algbw_gbps"] == 31502336 / r["dur_ns"] and r["busbw_gbps"] == r["algbw_gbps"]
        assert r["link_gbps"] == 300.0


def test_no_kernel_exceeds_its_bound_over_the_corpus(real_runs):
    from tracehouse.warehouse.catalog import connect

    wh, run_of = real_runs  # every real trace file, each its own run, not derived
    con = connect(wh, runs=[run_of[rel] for rel in real_trace_files()])
    over = query_rows(
        con, "SELECT run_id, kernel, pct_of_bound FROM kernel_roofline WHERE pct_of_bound > 100"
    )
    assert over == []
    assert (
        query_rows(con, "SELECT count(*) AS n FROM kernel_roofline WHERE pct_of_bound IS NOT NULL")[0]["n"]
        > 50
    )


def test_run_metrics_mfu_and_step_time_at_a_fixed_batch_size(serving):
    """run_metrics: step_time_bs.<N>_median_ns is the median (continuous, as step_time_median_ns) over the
    steps of batch size N; mfu_pct the mean over steps of 100 × (FLOPs / peak) / step time."""
    import statistics

    con, runs, expect = serving
    truth = expect["serving-batches"]
    rows = {
        r["metric"]: r
        for r in query_rows(
            con,
            "SELECT metric, value, better FROM run_metrics WHERE run_id = ? AND rank = 0 AND phase = 'decode'",
            [runs["serving-batches"]],
        )
    }
    spans = {(r["batch_size"]): r for r in truth["step_latency"]}
    decode_spans = [100_000, 130_000, 150_000]
    assert rows["step_time_bs.4_median_ns"]["value"] == statistics.median(decode_spans[:2])
    assert rows["step_time_bs.8_median_ns"]["value"] == spans[8]["median_step_ns"]
    peak = truth["device"]["bf16_tflops"] * 1000  # FLOP per ns
    mfu = [100 * (2 * bs * 4096 * 4096) / peak / span for bs, span in zip((4, 4, 8), decode_spans)]
    assert rows["mfu_pct"]["value"] == pytest.approx(sum(mfu) / 3, rel=1e-12)
    assert rows["mfu_pct"]["better"] == "higher"
    hbm = truth["device"]["hbm_tbps"] * 1000  # bytes per ns
    mbu = [
        100 * ((bs * 4096 + 4096 * 4096 + bs * 4096) * 2) / hbm / span
        for bs, span in zip((4, 4, 8), decode_spans)
    ]
    assert rows["mbu_pct"]["value"] == pytest.approx(sum(mbu) / 3, rel=1e-12)

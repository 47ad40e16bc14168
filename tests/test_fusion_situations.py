"""fusion_match on the fusion situations (synth/situations/fusion.py) and on real traces, checked by hand.

Evidence for a fusion row is the pattern's own op sequence (a chain in order on one stream, inside one step
and one graph replay, with the launching ops and shapes the pattern names), on the run's framework (a
framework's rows only on that framework's runs, else one generic row per pattern key)."""

from __future__ import annotations

import gzip
import json
from itertools import pairwise

import pytest

from tests.conftest import TRACES
from tests.conftest import query_rows as _rows

ROW_FIELDS = (
    "status",
    "occurrences",
    "chains_near",
    "related_gpu_time_ns",
    "pattern_framework",
    "evidence_basis",
)


FUSION_SITUATIONS = [
    "fusion-gelu-mlp",
    "fusion-gated-mlp",
    "fusion-gqa-vllm",
    "fusion-piecewise-graph",
    "fusion-diffusion",
]


@pytest.mark.parametrize("name", FUSION_SITUATIONS)
def test_fusion_rows_match_the_ground_truth_exactly(sit, name):
    con, runs, expect = sit
    truth = expect[name]["fusion"]
    (framework,) = con.execute("SELECT framework FROM runs WHERE run_id = ?", [runs[name]]).fetchone()
    assert framework == truth["framework"]
    rows = _rows(con, "SELECT * FROM fusion_match WHERE run_id = ? ORDER BY pattern_id", [runs[name]])
    got = {
        r["pattern_id"]: {f: r[f] for f in ROW_FIELDS if f in truth["rows"].get(r["pattern_id"], {})}
        for r in rows
    }
    assert set(got) == set(truth["rows"]), (
        f"{name}: rows {sorted(got)} but the ground truth has {sorted(truth['rows'])}"
    )
    for pid, want in truth["rows"].items():
        want_fields = {f: want[f] for f in ROW_FIELDS if f in want}
        assert got[pid] == want_fields, (name, pid)
        if "evidence_ops" in want:
            (row,) = [r for r in rows if r["pattern_id"] == pid]
            assert row["evidence_ops"] == want["evidence_ops"]
    # never two rows for one pattern key, never a row of another framework
    assert len({r["pattern_key"] for r in rows}) == len(rows)
    for r in rows:
        assert r["pattern_framework"] == (
            framework if framework in ("sglang", "vllm", "tensorrt-llm") else "generic"
        )


def test_gelu_mlp_scalar_mul_and_attention_scaling_are_not_a_gate_product(sit):
    con, runs, _ = sit
    run = runs["fusion-gelu-mlp"]
    # the GELU is followed directly by a mul, and muls are everywhere: still no gated-MLP row
    (adjacent,) = con.execute(
        """
        WITH s AS (SELECT name, lead(name) OVER (ORDER BY start_ns) AS nxt FROM kernels WHERE run_id = ?)
        SELECT count(*) FROM s WHERE name LIKE '%Gelu%' AND nxt LIKE '%MulFunctor%'""",
        [run],
    ).fetchone()
    assert adjacent == 4
    assert (
        _rows(con, "SELECT * FROM fusion_match WHERE run_id = ? AND pattern_key = 'act_and_mul'", [run]) == []
    )
    # the script's folder is named vllm_experiments: not a vLLM run
    assert con.execute("SELECT framework FROM runs WHERE run_id = ?", [run]).fetchone() == ("pytorch",)


def test_gated_mlp_row_is_generic_once_with_its_own_time(sit):
    con, runs, _ = sit
    run = runs["fusion-gated-mlp"]
    (row,) = _rows(con, "SELECT * FROM fusion_match WHERE run_id = ?", [run])
    # related time is the chains' silu + mul, not every aten::mul of the run (the attention scaling muls)
    (all_mul,) = con.execute(
        "SELECT sum(dur_ns) FROM kernels WHERE run_id = ? AND name LIKE '%MulFunctor%'", [run]
    ).fetchone()
    assert (
        row["related_gpu_time_ns"]
        < all_mul
        + con.execute(
            "SELECT sum(dur_ns) FROM kernels WHERE run_id = ? AND name LIKE '%silu_kernel%'", [run]
        ).fetchone()[0]
    )
    assert row["source_path"].startswith("sglang: ") and "; vllm: " in row["source_path"]
    assert row["framework_match"] is None and row["row_scope"] == "generic"
    # the evidence is given whole: every step's kernel, launches, op and dims, and the chain counts
    assert row["evidence_sequence"].endswith("; 6 adjacent, 0 near chain(s)")
    assert "×6 (aten::silu [[1024,5632]])" in row["evidence_sequence"]
    assert "×6 (aten::mul [[1024,5632],[1024,5632]])" in row["evidence_sequence"]


def test_piecewise_graph_boundary_breaks_a_chain(sit):
    con, runs, _ = sit
    run = runs["fusion-piecewise-graph"]
    # the add and the next piece's rms_norm ARE neighbours on the stream ...
    (pairs,) = con.execute(
        """
        WITH s AS (SELECT name, correlation, lead(name) OVER w AS nxt, lead(correlation) OVER w AS nxt_corr
                   FROM kernels WHERE run_id = ? WINDOW w AS (PARTITION BY stream ORDER BY start_ns))
        SELECT count(*) FROM s WHERE name LIKE '%CUDAFunctor_add%' AND nxt LIKE '%rms_norm_kernel%'
          AND nxt_corr <> correlation""",
        [run],
    ).fetchone()
    assert pairs == 5
    # ... but in different graph replays: no add + RMSNorm row at all
    assert (
        _rows(con, "SELECT * FROM fusion_match WHERE run_id = ? AND pattern_key = 'add_rmsnorm'", [run]) == []
    )


SHAPE_ACTS = [  # run, kernel, category, launching op, its Input Dims (no op: a graph replay's kernel)
    ("g", "silu_kernel_x", "activation", "aten::silu", "[[4,8]]"),
    ("g", "MulFunctor_x", "elementwise", "aten::mul", "[[4,8],[4,8]]"),
    ("s", "silu_kernel_x", "activation", "aten::silu", "[[4,8]]"),
    ("s", "MulFunctor_x", "elementwise", "aten::mul", "[[4,8],[]]"),
    ("b", "silu_kernel_x", "activation", "aten::silu", "[[4,8]]"),
    ("b", "MulFunctor_x", "elementwise", "aten::mul", "[[4,8],[1,8]]"),
    ("w", "silu_kernel_x", "activation", "aten::sigmoid", "[[4,8]]"),
    ("w", "MulFunctor_x", "elementwise", "aten::mul", "[[4,8],[4,8]]"),
    ("a", "CUDAFunctor_add_x", "elementwise", "aten::add", "[[4,8],[4,8],[]]"),
    ("a", "vllm::rms_norm_kernel_x", "norm", "_C::rms_norm", "[[4, 8],[8],[]]"),
    ("x", "CUDAFunctor_add_x", "elementwise", "aten::add", "[[4,8],[4,8],[]]"),
    ("x", "vllm::rms_norm_kernel_x", "norm", "_C::rms_norm", "[[2,8],[8],[]]"),
    ("l", "cunn_SoftMaxForward_x", "activation", "aten::_softmax", "[[4,32000],[],[]]"),
    ("l", "gatherTopK_x", "reduction", "aten::topk", "[[4,32000]]"),
    ("l", "multinomial_x", "sampling", "aten::multinomial", "[[4,50],[]]"),
    ("d", "cunn_SoftMaxForward_x", "activation", "aten::_softmax", "[[2,8,64,64],[],[]]"),
    ("d", "gatherTopK_x", "reduction", "aten::topk", "[[2,64]]"),
    ("d", "multinomial_x", "sampling", "aten::multinomial", "[[2,50],[]]"),
    ("n", "silu_kernel_x", "activation", None, None),
    ("n", "MulFunctor_x", "elementwise", None, None),
]
SHAPE_EXPECTED = {
    ("g", "vllm_act_and_mul"): ("Confirmed", "ops"),  # the gate product
    ("a", "vllm_fused_add_rms_norm"): (
        "Confirmed",
        "ops",
    ),  # the norm of the add's output (dims with a space)
    ("l", "vllm_sampling"): ("Confirmed", "ops"),  # softmax over [tokens, vocab]
    ("n", "vllm_act_and_mul"): ("Confirmed", "kernel names"),  # no launching op: names and order alone
}
# s: mul by a scalar; b: broadcast mul; w: the op is not a silu/gelu; x: the norm is not of the add's
# output; d: softmax over 4-D attention scores: no row


def _shape_inputs() -> dict[str, list[dict]]:
    """SHAPE_ACTS as rows of _kernel_facts, kernels (the launching op), cpu_ops (its dims) and runs (vLLM)."""
    facts, kernels, ops = [], [], []
    for i, (run, name, cat, op, dims) in enumerate(SHAPE_ACTS):
        facts.append(
            {
                "run_id": run,
                "rank": 0,
                "kernel_id": i + 1,
                "device": 0,
                "stream": 7,
                "kind": "kernel",
                "name": name,
                "start_ns": i * 10,
                "dur_ns": 10,
                "end_ns": i * 10 + 10,
                "step": 0,
                "category": cat,
                "launch_call": "cudaLaunchKernel",
                "phase_key": "decode",
            }
        )
        kernels.append({"run_id": run, "rank": 0, "kernel_id": i + 1, "cpu_op_id": i + 1 if op else None})
        if op:
            ops.append({"run_id": run, "rank": 0, "op_id": i + 1, "name": op, "input_dims": dims})
    runs = [{"run_id": r, "framework": "vllm"} for r in sorted({a[0] for a in SHAPE_ACTS})]
    return {"_kernel_facts": facts, "kernels": kernels, "cpu_ops": ops, "runs": runs}


SHAPE_VIEWS = ["kernel_summary", "_run_vendor", "_fusion_chains", "fusion_match"]


def _shape_connection():
    """fusion_match (and what it reads) over the handmade chains alone (tests/viewtest.py)."""
    from viewtest import connect_views

    return connect_views(SHAPE_VIEWS, _shape_inputs())


def test_shape_rules_are_checked_on_handmade_chains():
    """gate_product / logits_2d / same_input decide a chain where the launching ops have dims."""
    con = _shape_connection()
    got = {
        (r, p): (s, b)
        for r, p, s, b in con.execute(
            "SELECT run_id, pattern_id, status, evidence_basis FROM fusion_match"
        ).fetchall()
    }
    assert got == SHAPE_EXPECTED


def test_fusion_match_same_rows_on_spark(spark):
    """The view transpiled to Spark gives the same rows on the handmade chains as DuckDB, and the
    hand-worked SHAPE_EXPECTED. The inputs reach Spark as data frames (tests/viewtest.py spark_frame), and
    each view is computed once as it is made (materialize): built as one tree, kernel_summary's (launch
    sites, frames, categories) under fusion_match's runs Spark's analyzer out of its 2 GB heap."""
    from viewtest import spark_views

    con = _shape_connection()
    session = spark_views(spark, SHAPE_VIEWS, _shape_inputs(), materialize=True)
    cols = (
        "run_id, pattern_id, status, occurrences, related_gpu_time_ns, evidence_ops, evidence_sequence, "
        "evidence_basis, source_path"
    )
    duck = sorted(con.execute(f"SELECT {cols} FROM fusion_match").fetchall())
    theirs = sorted(tuple(r) for r in session.sql(f"SELECT {cols} FROM fusion_match").collect())
    assert theirs == duck
    assert {(r[0], r[1]): (r[2], r[7]) for r in theirs} == SHAPE_EXPECTED


# ---- real traces, checked by hand ------------------------------------------------------------------

REAL = {
    "amd/mi300_qwen1.5-0.5b.json.gz": "pytorch",
    "nvidia/h100_qwen1.5-0.5b.json.gz": "pytorch",
    "nvidia/b200_eager_rank0.json.gz": "vllm",
    "inference/sglang_decode/sglang_Qwen3-8B_decode.json.gz": "sglang",
    "inference/vllm_decode_full/graph_execution.json.gz": "vllm",
    "multirank/sampled_2ranks": "pytorch",
    "nvidia/h100_bert-small.json.gz": "pytorch",
}


@pytest.fixture(scope="module")
def real(real_runs):
    from tracehouse.warehouse.catalog import connect

    wh, run_of = real_runs
    ids = {rel: run_of[rel] for rel in REAL}
    con = connect(wh, runs=list(ids.values()))
    yield con, ids
    con.close()


def _fusion(con, run_id):
    return {r["pattern_id"]: r for r in _rows(con, "SELECT * FROM fusion_match WHERE run_id = ?", [run_id])}


def test_real_framework_detection(real):
    con, ids = real
    for rel, framework in REAL.items():
        assert con.execute("SELECT framework FROM runs WHERE run_id = ?", [ids[rel]]).fetchone() == (
            framework,
        ), rel


def _silu_mul_oracle(path):
    """From the raw JSON: silu kernels followed on their stream, within 3 kernels, by a MulFunctor kernel:
    (chains, their GPU ns, chains whose both ops are known, and those ops' dims are a gate product)."""
    with gzip.open(path) as f:
        ev = json.load(f)["traceEvents"]
    ops = {}
    for e in ev:
        if (
            e.get("ph") == "X"
            and e.get("cat") == "cpu_op"
            and (e.get("args") or {}).get("External id") is not None
        ):
            ops[e["args"]["External id"]] = e  # the last (innermost) op with that id
    by_stream = {}
    for e in ev:
        if e.get("ph") == "X" and e.get("cat") == "kernel":
            by_stream.setdefault((e["pid"], e["tid"]), []).append(e)
    n, ns, gate = 0, 0, 0
    for acts in by_stream.values():
        acts.sort(key=lambda k: k["ts"])
        for i, k in enumerate(acts):
            if "silu_kernel" not in k["name"]:
                continue
            m = next((m for m in acts[i + 1 : i + 4] if "MulFunctor" in m["name"]), None)
            if m is None:
                continue
            n += 1
            ns += round(k["dur"] * 1000) + round(m["dur"] * 1000)
            o1, o2 = ops.get(k["args"].get("External id")), ops.get(m["args"].get("External id"))
            if o1 and o2:
                d1 = o1["args"]["Input Dims"]
                gate += o2["args"]["Input Dims"] == [d1[0], d1[0]]
    return n, ns, gate


@pytest.mark.parametrize("rel", ["amd/mi300_qwen1.5-0.5b.json.gz", "nvidia/h100_qwen1.5-0.5b.json.gz"])
def test_real_qwen_gated_mlp_is_one_generic_likely_row(real, rel):
    """Qwen1.5 (Qwen2MLP: down(silu(gate(x)) * up(x))) in plain PyTorch: silu, the up-projection GEMM, then
    the gate product. Before: two rows (SGLang and vLLM), 'Likely' at 17.8 % (MI300) / 24.1 % (H100) built
    from every aten::mul of the run. Now one generic Likely row whose time is the 35 silu -> mul chains."""
    con, ids = real
    rows = _fusion(con, ids[rel])
    assert list(rows) == ["sgl_act_and_mul"]
    row = rows["sgl_act_and_mul"]
    chains, ns, gate = _silu_mul_oracle(TRACES / rel)
    assert (chains, gate) == (35, 24)  # 24 layers of the linked step (ops known), 11 more kernels unlinked
    assert (row["status"], row["pattern_framework"], row["occurrences"], row["chains_adjacent"]) == (
        "Likely",
        "generic",
        chains,
        0,
    )
    assert abs(row["related_gpu_time_ns"] - ns) <= chains * 2  # ns rounding of the µs durations
    assert row["evidence_ops"] == "aten::silu [[16,559,2816]] -> aten::mul [[16,559,2816],[16,559,2816]]"
    assert row["evidence_basis"] == "ops and kernel names"
    assert row["share"] < 0.08


def test_real_b200_vllm_gqa_has_no_mla_or_other_framework_rows(real):
    """gpt-oss on vLLM (eager, B200): fused_add_rms_norm already runs (72), and each all-reduce is followed,
    one DtoD copy later, by fused_add_rms_norm: the all-reduce fusion is Likely (72 near chains). Before:
    vllm_mla_rope_cache 'Likely' on this GQA model, plus sglang / tensorrt-llm rows."""
    con, ids = real
    rows = _fusion(con, ids["nvidia/b200_eager_rank0.json.gz"])
    got = {p: (r["status"], r["occurrences"]) for p, r in rows.items()}
    assert got == {"vllm_allreduce_rms": ("Likely", 72), "vllm_fused_add_rms_norm": ("Fused", 72)}
    assert "Memcpy" not in rows["vllm_allreduce_rms"]["evidence"]
    assert rows["vllm_allreduce_rms"]["evidence_ops"].startswith(
        "symm_mem::multimem_all_reduce_ [[2557440],[],[]] -> _C::fused_add_rms_norm [[888,2880],"
    )


def test_real_serving_graph_runs(real):
    con, ids = real
    sgl = _fusion(con, ids["inference/sglang_decode/sglang_Qwen3-8B_decode.json.gz"])
    # an MI300X: the RoPE + KV-store fusion SGLang has on ROCm is AITER's Triton kernel; FlashInfer's
    # (CUDA only, sgl_rope_set_kv_buffer) was suggested here before the vendor gate
    assert {p: (r["status"], r["occurrences"]) for p, r in sgl.items()} == {
        "sgl_act_and_mul": ("Fused", 36),
        "sgl_add_rmsnorm": ("Fused", 145),
        "sgl_rope_reshape_cache_hip": ("Confirmed", 36),
    }
    rope = sgl["sgl_rope_reshape_cache_hip"]
    # RoPE -> store_kvcache inside the decode graph replay: judged by kernel names (no host ops in a replay)
    assert rope["evidence_basis"] == "kernel names" and rope["run_vendor"] == "amd"
    # what it removes: the 36 store_kvcache kernels and the idle time between each RoPE and its store, read
    # from the JSON (173,545 ns of stores, 36 ns of gaps), not the RoPE kernels the fused kernel still runs
    stores, gaps = _rope_store_oracle(TRACES / "inference/sglang_decode/sglang_Qwen3-8B_decode.json.gz")
    assert abs(rope["removable_gpu_time_ns"] - (stores + gaps)) <= 36 * 2
    assert rope["removable_gpu_time_ns"] < rope["related_gpu_time_ns"]
    vllm = _fusion(con, ids["inference/vllm_decode_full/graph_execution.json.gz"])
    # before: vllm_mla_rope_cache 'Confirmed' from RoPE -> reshape_and_cache of a GQA model, and two foreign rows
    assert {p: (r["status"], r["occurrences"]) for p, r in vllm.items()} == {
        "vllm_moe_gemm_swiglu": ("Fused", 24)
    }


def _rope_store_oracle(path):
    """From the raw JSON: rotary_embedding kernels followed directly on their stream by store_kvcache: the
    stores' GPU ns and the idle ns between each pair."""
    with gzip.open(path) as f:
        ev = json.load(f)["traceEvents"]
    by_stream = {}
    for e in ev:
        if e.get("ph") == "X" and e.get("cat") == "kernel":
            by_stream.setdefault((e["pid"], e["tid"]), []).append(e)
    stores, gaps = 0, 0
    for acts in by_stream.values():
        acts.sort(key=lambda k: k["ts"])
        for a, b in pairwise(acts):
            if "rotary_embedding_kernel" in a["name"] and "store_kvcache" in b["name"]:
                stores += round(b["dur"] * 1000)
                gaps += max(0, round(b["ts"] * 1000) - round(a["ts"] * 1000) - round(a["dur"] * 1000))
    return stores, gaps


def test_real_run_vendor(real):
    """The vendor each real run is judged by: the device name where the trace has one, else the launch
    calls (the vLLM decode replay names no device; its graphs are launched by hipGraphLaunch)."""
    con, ids = real
    want = {
        "inference/sglang_decode/sglang_Qwen3-8B_decode.json.gz": ("amd", "device name"),
        "inference/vllm_decode_full/graph_execution.json.gz": ("amd", "launch calls"),
        "nvidia/b200_eager_rank0.json.gz": ("nvidia", "device name"),
        "multirank/sampled_2ranks": ("nvidia", "launch calls"),
    }
    for rel, vendor in want.items():
        got = con.execute(
            "SELECT vendor, vendor_basis FROM _run_vendor WHERE run_id = ?", [ids[rel]]
        ).fetchone()
        assert got == vendor, rel


def test_real_dense_training_and_bert_have_no_rows(real):
    """HTA's sampled 2-rank training: before, 'MoE finalize' Likely twice (an index + a sum somewhere in a
    dense model). The temperature + softmax pattern must not take its `aten::div [[2048,1],[2048,1]]` followed
    by a softmax of a [2,1] tensor for a logits temperature (shape rule same_input_2d). BERT: nothing fuses by
    a known pattern."""
    con, ids = real
    assert _fusion(con, ids["multirank/sampled_2ranks"]) == {}
    assert _fusion(con, ids["nvidia/h100_bert-small.json.gz"]) == {}

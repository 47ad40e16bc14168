"""overlap_opportunity, fusion_match and the fusion catalogue (sql/rules/fusion_patterns.csv)."""

from __future__ import annotations

import csv
from pathlib import Path

import duckdb
import pytest
from conftest import RunFocused
from conftest import query_rows as _rows
from tracehouse.warehouse import fusion
from tracehouse.warehouse.catalog import view_files

ROOT = Path(__file__).resolve().parents[1]
SQL = view_files()  # {view: its sql/<domain>/<view>.sql}


# ---- the catalogue ------------------------------------------------------------------------------


def test_catalog_validates_and_covers_every_framework():
    head, steps = fusion.load_fusion_catalog()
    rows = head.to_pylist()
    assert len(rows) >= 15
    assert len({r["pattern_id"] for r in rows}) == len(rows)
    per_fw = {fw: sum(r["framework"] == fw for r in rows) for fw in fusion.FRAMEWORKS}
    assert all(n >= 3 for n in per_fw.values()), per_fw
    for r in rows:
        assert 2 <= r["n_splits"] <= fusion.MAX_SPLITS
        assert r["source_path"] and not r["source_path"].startswith("/") and r["rationale"] and r["reference"]
    con = duckdb.connect()
    for regex in [r["fused_pattern"] for r in rows] + [s["pattern"] for s in steps.to_pylist()]:
        con.execute("SELECT regexp_matches('x', ?)", [regex]).fetchall()  # compiles in DuckDB (RE2)


def test_catalog_version_records_the_file_hash():
    assert fusion.recorded_sha256() == fusion.catalog_sha256(), (
        "sql/rules/fusion_patterns.csv changed: bump catalog_version and record the new sha256 in "
        "sql/rules/fusion_patterns.version.json"
    )


def test_attention_and_cache_store_steps_never_accept_moe():
    _, steps = fusion.load_fusion_catalog()
    for s in steps.to_pylist():
        cats = s["categories"].split(";")
        if "attention" in cats or "rope" in cats:
            assert "moe" not in cats, s


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda r: r.__setitem__("split_2_categories", "gemm;bogus"), "unknown category"),
        (lambda r: r.__setitem__("fused", "(?i)foo(?=bar)"), "not portable"),
        (lambda r: r.__setitem__("split_1", "(unclosed"), "invalid RE2"),
        (lambda r: r.__setitem__("framework", "tgi"), "framework"),
        (lambda r: (r.__setitem__("split_2", ""), r.__setitem__("split_2_categories", "")), "split_3 given"),
    ],
)
def test_bad_catalog_is_rejected_with_file_and_line(tmp_path, mutate, message):
    rows = list(csv.DictReader(fusion.CATALOG_FILE.open(encoding="utf-8")))
    target = next(r for r in rows if r["split_3"])
    mutate(target)
    bad = tmp_path / "bad.csv"
    with bad.open("w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    with pytest.raises(fusion.FusionCatalogError, match=message) as info:
        fusion.load_fusion_catalog(bad)
    assert f"{bad}:" in str(info.value)


def test_views_transpile_to_spark():
    import sqlglot

    for name in ("overlap_opportunity", "fusion_match"):
        (out,) = sqlglot.transpile(SQL[name].read_text(), read="duckdb", write="spark")
        assert "ROW_NUMBER()" in out.upper()
    fm = sqlglot.transpile(SQL["fusion_match"].read_text(), read="duckdb", write="spark")[0]
    assert "RLIKE" in fm.upper()


# ---- handmade rows ------------------------------------------------------------------------------


def _run_row(run: str, framework: str) -> dict:
    """A runs row: `framework` may carry the device name after a slash ('sglang/AMD Instinct MI300X')."""
    fw, _, hardware = framework.partition("/")
    return {"run_id": run, "framework": fw, "hardware": hardware or None}


def _handmade(rows: list[tuple], runs: dict[str, str]) -> duckdb.DuckDBPyConnection:
    """A connection whose _kernel_facts holds `rows` (run, stream, name, category, start, dur[, site]) and
    the real views on top of it."""
    from viewtest import connect_views

    facts = [
        {
            "run_id": run,
            "rank": 0,
            "kernel_id": i + 1,
            "device": 0,
            "stream": stream,
            "kind": "kernel",
            "name": name,
            "start_ns": start,
            "dur_ns": dur,
            "end_ns": start + dur,
            "step": 0,
            "category": cat,
            "site": site[0] if site else None,
            "launch_call": "cudaLaunchKernel",
            "phase_key": "decode",
        }
        for i, (run, stream, name, cat, start, dur, *site) in enumerate(rows)
    ]
    # fusion_match reads each launch's op and correlation (none here: activities are judged by name and
    # order): kernels and cpu_ops stay empty
    return connect_views(
        [
            "kernel_overlap",
            "kernel_summary",
            "_run_vendor",
            "_fusion_chains",
            "fusion_match",
            "fusion_removable",
            "overlap_opportunity",
        ],
        {"_kernel_facts": facts, "runs": [_run_row(r, f) for r, f in runs.items()]},
    )


ADD = "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16> >"
RMS = "void flashinfer::norm::RMSNormKernel<8u, __nv_bfloat16>"
VLLM_FUSED = "void vllm::fused_add_rms_norm_kernel<c10::BFloat16, 8>(c10::BFloat16*, long, c10::BFloat16*)"
GEMM = "nvjet_tst_64x8_64x16_4x1_v_bz_TNT"
ROPE = "void flashinfer::BatchQKApplyRotaryPosIdsCosSinCacheKernel<true>"
STORE = "store_kvcache_kernel"
MOE_DISGUISED = "cutlass::GemmUniversal<cutlass::gemm::GroupProblemShape> grouped_gemm_store_kvcache"


def test_fusion_match_statuses_on_handmade_rows():
    rows = [
        # r1: add -> RMSNorm adjacent on stream 7 (twice), plus a non-adjacent pair: Confirmed, 2 chains
        ("r1", 7, ADD, "elementwise", 0, 100, "model.py(10): forward"),
        ("r1", 7, RMS, "norm", 100, 50),
        ("r1", 7, GEMM, "gemm", 200, 400),
        ("r1", 7, ADD, "elementwise", 700, 100, "model.py(10): forward"),
        ("r1", 7, RMS, "norm", 800, 50),
        ("r1", 7, ADD, "elementwise", 900, 100, "model.py(10): forward"),
        ("r1", 7, GEMM, "gemm", 1000, 400),
        ("r1", 7, RMS, "norm", 1400, 50),
        # r2: the add and the norm in order on one stream with a GEMM between them: Likely (near chain)
        ("r2", 7, ADD, "elementwise", 0, 100, "model.py(10): forward"),
        ("r2", 7, GEMM, "gemm", 100, 400),
        ("r2", 7, RMS, "norm", 500, 50),
        # r6: the add and the norm on different streams: no chain, no row
        ("r6", 7, ADD, "elementwise", 0, 100),
        ("r6", 8, RMS, "norm", 50, 50),
        # r3 (a vLLM run): vLLM's fused kernel: Fused, on the vllm row only (no sglang row on a vllm run)
        ("r3", 7, GEMM, "gemm", 0, 400),
        ("r3", 7, VLLM_FUSED, "norm", 400, 60, "layernorm.py(94): forward_cuda"),
        # r4: RoPE followed by a grouped MoE GEMM whose name says kv-cache store: no evidence;
        #     RoPE followed by a real cache store: Confirmed
        ("r4", 7, ROPE, "rope", 0, 30),
        ("r4", 7, MOE_DISGUISED, "moe", 30, 500),
        ("r5", 7, ROPE, "rope", 0, 30, "rotary_embedding.py(233): forward_cuda"),
        ("r5", 7, STORE, "attention", 30, 20),
    ]
    con = _handmade(
        rows, {"r1": "sglang", "r2": "sglang", "r3": "vllm", "r4": "sglang", "r5": "sglang", "r6": "sglang"}
    )
    got = con.execute(
        "SELECT run_id, phase, pattern_id, status, occurrences, related_gpu_time_ns, evidence, python_site, "
        "framework_match FROM fusion_match "
        "WHERE pattern_key IN ('add_rmsnorm', 'rope_kv_store') ORDER BY run_id, pattern_id"
    ).fetchall()
    assert got == [
        (
            "r1",
            "decode",
            "sgl_add_rmsnorm",
            "Confirmed",
            2,
            300,
            f"{ADD} -> {RMS}",
            "model.py(10): forward",
            True,
        ),
        (
            "r2",
            "decode",
            "sgl_add_rmsnorm",
            "Likely",
            1,
            150,
            f"{ADD} -> {RMS}",
            "model.py(10): forward",
            True,
        ),
        (
            "r3",
            "decode",
            "vllm_fused_add_rms_norm",
            "Fused",
            1,
            60,
            VLLM_FUSED,
            "layernorm.py(94): forward_cuda",
            True,
        ),
        (
            "r5",
            "decode",
            "sgl_rope_set_kv_buffer",
            "Confirmed",
            1,
            50,
            f"{ROPE} -> {STORE}",
            "rotary_embedding.py(233): forward_cuda",
            True,
        ),
    ]
    share = con.execute(
        "SELECT share FROM fusion_match WHERE run_id = 'r1' AND pattern_id = 'sgl_add_rmsnorm'"
    ).fetchone()
    # the phase: 3 adds, 3 norms, 2 GEMMs (1250 ns). The fused add + RMSNorm does the norm's work: it removes
    # the two adjacent chains' adds (100 ns each; no idle time between add and norm), not the norms
    assert share[0] == pytest.approx(200 / 1250)
    related = con.execute(
        "SELECT related_share, removable_gpu_time_ns FROM fusion_match WHERE run_id = 'r1' AND pattern_id = 'sgl_add_rmsnorm'"
    ).fetchone()
    assert related == (pytest.approx(300 / 1250), 200)
    moe_evidence = con.execute(
        "SELECT count(*) FROM fusion_match WHERE run_id = 'r4' AND evidence LIKE '%GroupProblemShape%'"
    ).fetchone()
    assert moe_evidence == (0,)


def test_overlap_opportunity_on_handmade_rows():
    rows = [
        ("o", 1, "gemm_a", "gemm", 0, 10_000),  # half under D: headroom, next is its activation
        ("o", 1, "act_b", "activation", 10_000, 2_000),  # fully under D: low-roi-hidden
        ("o", 1, "gemm_c", "gemm", 12_000, 8_000),  # 3 of 8 us under D: headroom, prev is activation
        ("o", 2, "moe_d", "moe", 5_000, 10_000),  # fully hidden, alone on its stream: unclear risk
        ("o", 1, "norm_e", "norm", 20_000, 6_000),  # alone, unrelated neighbours: try overlap
        ("o", 1, "other_f", "other", 26_000, 3_000),  # < 5 us: neutral, P2
        ("o", 1, "other_g", "other", 29_000, 200),  # tiny: neutral, P5, not reportable
    ]
    con = _handmade(rows, {"o": "sglang"})
    got = con.execute(
        "SELECT name, gpu_time_ns, exclusive_ns, hidden_ns, round(exclusive_pct, 2), verdict, priority, "
        "dependency_risk, recommendation, reportable FROM overlap_opportunity ORDER BY name"
    ).fetchall()
    assert got == [
        ("act_b", 2_000, 0, 2_000, 0.0, "low-roi-hidden", "P2", "high", "skip overlap", True),
        # its neighbour consumes its output, but no fusion row holds it: not "try fusion"
        ("gemm_a", 10_000, 5_000, 5_000, 50.0, "headroom", "P1", "high", "keep in order", True),
        ("gemm_c", 8_000, 5_000, 3_000, 62.5, "headroom", "P1", "high", "keep in order", True),
        ("moe_d", 10_000, 0, 10_000, 0.0, "low-roi-hidden", "P1", "unclear", "skip overlap", True),
        ("norm_e", 6_000, 6_000, 0, 100.0, "headroom", "P1", "low", "try overlap", True),
        ("other_f", 3_000, 3_000, 0, 100.0, "neutral", "P2", "unclear", "manual check", True),
        ("other_g", 200, 200, 0, 100.0, "neutral", "P5", "unclear", "observe later", False),
    ]


AR = "void cross_device_reduce_1stage<__nv_bfloat16, 8>(RankData*, RankSignals, Signal*, __nv_bfloat16*, int, int)"
FUSED_ADD_RMS = "void flashinfer::norm::FusedAddRMSNormKernel<8u, __nv_bfloat16>"


def test_vendor_gate_and_what_the_fusion_removes_on_handmade_rows():
    """An all-reduce, 200 ns of idle stream, then fused_add_rmsnorm: the all-reduce + RMSNorm fusion keeps the
    all-reduce (the fused kernel still reduces) and removes the norm kernel and the gap: 500 + 200 ns, not
    the 10,500 ns of the chain's kernels. On an NVIDIA device the FlashInfer fusion is the row, on an AMD one the AITER
    fusion, never both; a run without a device name is judged by its launch calls (cudaLaunchKernel)."""
    rows = []
    for run in ("n1", "a1", "u1"):
        rows += [
            (run, 7, AR, "communication", 0, 10_000),
            (run, 7, FUSED_ADD_RMS, "norm", 10_200, 500),
            (run, 7, GEMM, "gemm", 10_700, 4_000),
            (run, 8, GEMM, "gemm", 50_000, 1_000),  # a second stream, after the rest: overlap has a peer
        ]
    con = _handmade(
        rows, {"n1": "sglang/NVIDIA H100 80GB HBM3", "a1": "sglang/AMD Instinct MI300X", "u1": "sglang"}
    )
    assert con.execute("SELECT run_id, vendor, vendor_basis FROM _run_vendor ORDER BY run_id").fetchall() == [
        ("a1", "amd", "device name"),
        ("n1", "nvidia", "device name"),
        ("u1", "nvidia", "launch calls"),
    ]
    got = con.execute(
        "SELECT run_id, pattern_id, status, related_gpu_time_ns, removable_gpu_time_ns, removable_gap_ns, share, "
        "pattern_vendor FROM fusion_match WHERE pattern_key = 'allreduce_add_rmsnorm' ORDER BY run_id"
    ).fetchall()
    total = 10_000 + 500 + 4_000 + 1_000
    assert got == [
        (
            "a1",
            "sgl_aiter_allreduce_rmsnorm",
            "Confirmed",
            10_500,
            700,
            200,
            pytest.approx(700 / total),
            "amd",
        ),
        (
            "n1",
            "sgl_allreduce_add_rmsnorm",
            "Confirmed",
            10_500,
            700,
            200,
            pytest.approx(700 / total),
            "nvidia",
        ),
        (
            "u1",
            "sgl_allreduce_add_rmsnorm",
            "Confirmed",
            10_500,
            700,
            200,
            pytest.approx(700 / total),
            "nvidia",
        ),
    ]
    # the items behind the figure: the norm kernel (id 2 of run n1) and the gap before it
    items = con.execute(
        "SELECT kind, kernel_id, step, removable_ns FROM fusion_removable WHERE run_id = 'n1' "
        "AND pattern_id = 'sgl_allreduce_add_rmsnorm' ORDER BY kind"
    ).fetchall()
    assert items == [("gap", 2, 2, 200), ("kernel", 2, 2, 500)]
    # the all-reduce feeds the norm (high risk) and runs alone: the overlap row points to the fusion row
    rec = con.execute(
        "SELECT run_id, recommendation, fusion_pattern_id FROM overlap_opportunity WHERE name = ? ORDER BY run_id",
        [AR],
    ).fetchall()
    assert rec == [
        ("a1", "try fusion", "sgl_aiter_allreduce_rmsnorm"),
        ("n1", "try fusion", "sgl_allreduce_add_rmsnorm"),
        ("u1", "try fusion", "sgl_allreduce_add_rmsnorm"),
    ]


# ---- synthesized runs ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def synth_runs(warehouses):
    from tracehouse.warehouse.catalog import connect
    from warehouses import scenario

    # not derived: the views are computed, not read stored
    wh, ids, truths = warehouses.named(
        {name: scenario(name, ranks=2, steps=2, layers=2) for name in ("serving-decode", "serving-prefill")}
    )
    con = connect(wh)
    yield RunFocused(con, ids.values()), ids, truths
    con.close()


def test_split_add_rmsnorm_in_prefill_is_confirmed_and_fused_in_decode(synth_runs):
    con, ids, truth = synth_runs
    q = (
        "SELECT status, evidence_1, evidence_2, occurrences, python_site FROM fusion_match "
        "WHERE run_id = ? AND pattern_id = 'sgl_add_rmsnorm' ORDER BY phase"
    )
    (pre,) = _rows(con, q, [ids["serving-prefill"]])
    assert pre["status"] == "Confirmed"
    cats = truth["serving-prefill"]["kernel_categories"]
    assert "CUDAFunctor_add" in pre["evidence_1"] and cats[pre["evidence_1"]] == "elementwise"
    assert (
        "RMSNormKernel" in pre["evidence_2"]
        and "Fused" not in pre["evidence_2"]
        and cats[pre["evidence_2"]] == "norm"
    )
    # two add+norm pairs per layer, every layer, step and rank
    t = truth["serving-prefill"]
    assert pre["occurrences"] == 2 * t["layers"] * t["n_steps"] * t["ranks"]
    assert pre["python_site"].endswith("deepseek_v2.py(1893): forward")
    (dec,) = _rows(con, q, [ids["serving-decode"]])
    assert dec["status"] == "Fused"
    fused = _rows(
        con,
        "SELECT fused_kernel, python_site FROM fusion_match WHERE run_id = ? "
        "AND pattern_id = 'sgl_add_rmsnorm'",
        [ids["serving-decode"]],
    )[0]
    assert "FusedAddRMSNormKernel" in fused["fused_kernel"]
    assert truth["serving-decode"]["kernel_categories"][fused["fused_kernel"]] == "norm"


def test_evidence_is_specific(synth_runs):
    con, ids, _ = synth_runs
    # every evidence kernel has a category that its step allows
    bad = _rows(
        con,
        """
        WITH ev AS (
            SELECT run_id, pattern_id, 1 AS step, evidence_1 AS name FROM fusion_match WHERE evidence_1 IS NOT NULL
            UNION ALL SELECT run_id, pattern_id, 2, evidence_2 FROM fusion_match WHERE evidence_2 IS NOT NULL
            UNION ALL SELECT run_id, pattern_id, 3, evidence_3 FROM fusion_match WHERE evidence_3 IS NOT NULL
        )
        SELECT ev.*, c.category, s.categories FROM ev
        JOIN kernel_category c ON c.name = ev.name
        JOIN fusion_pattern_steps s ON s.pattern_id = ev.pattern_id AND s.step = ev.step
        WHERE NOT (';' || s.categories || ';' LIKE '%;' || c.category || ';%')
        ORDER BY ev.run_id, ev.pattern_id, ev.step""",
    )
    assert bad == []
    # a grouped MoE GEMM is never evidence for an attention or cache-store pattern
    moe_in_attention = _rows(
        con,
        """
        SELECT f.run_id, f.pattern_id, f.evidence FROM fusion_match f
        WHERE f.pattern_id IN (SELECT pattern_id FROM fusion_pattern_steps
                               WHERE categories LIKE '%attention%' OR categories LIKE '%rope%')
          AND (f.evidence LIKE '%GroupProblemShape%' OR f.evidence LIKE '%MoeGemm%'
               OR f.evidence LIKE '%grouped%')
        ORDER BY f.run_id, f.pattern_id""",
    )
    assert moe_in_attention == []
    # a framework run shows only its framework's rows: the TensorRT-LLM MoE expert pattern (GEMM -> act ->
    # GEMM) has no row on these SGLang runs, whatever its chains
    frameworks = _rows(
        con,
        "SELECT DISTINCT f.pattern_framework, r.framework FROM fusion_match f "
        "JOIN runs r USING (run_id) WHERE f.run_id IN (?, ?)",
        [ids["serving-decode"], ids["serving-prefill"]],
    )
    assert frameworks == [{"pattern_framework": "sglang", "framework": "sglang"}]


def _interval_oracle(con, run_id):
    """Per kernel name: (gpu time, exclusive time), by plain interval arithmetic over `kernels`."""
    acts = con.execute(
        "SELECT rank, device, stream, name, start_ns, end_ns FROM kernels WHERE run_id = ? "
        "ORDER BY rank, device, stream, start_ns",
        [run_id],
    ).fetchall()
    by_dev: dict[tuple, list] = {}
    for a in acts:
        by_dev.setdefault((a[0], a[1]), []).append(a)
    per_name: dict[str, list[int]] = {}
    per_stream: dict[tuple, int] = {}
    for dev_acts in by_dev.values():
        for rank, _, stream, name, s, e in dev_acts:
            others = sorted((o[4], o[5]) for o in dev_acts if o[2] != stream and o[4] < e and o[5] > s)
            covered, cur = 0, s
            for os_, oe in others:
                lo, hi = max(os_, cur), min(oe, e)
                if hi > lo:
                    covered += hi - lo
                    cur = hi
            v = per_name.setdefault(name, [0, 0])
            v[0] += e - s
            v[1] += (e - s) - covered
            per_stream[(rank, stream)] = per_stream.get((rank, stream), 0) + (e - s) - covered
    return per_name, per_stream


def test_overlap_verdicts_on_decode_follow_from_the_ground_truth(synth_runs):
    con, ids, truths = synth_runs
    run_id, truth = ids["serving-decode"], truths["serving-decode"]
    per_name, per_stream = _interval_oracle(con, run_id)
    # the oracle agrees with the ground truth's per-stream exclusive time
    for r in truth["ranks_summary"]:
        for stream, v in r["streams"].items():
            assert per_stream[(r["rank"], int(stream))] == v["exclusive_ns"]
    rows = _rows(con, "SELECT * FROM overlap_opportunity WHERE run_id = ? ORDER BY phase, name", [run_id])
    total_excl = sum(v["exclusive_ns"] for r in truth["ranks_summary"] for v in r["streams"].values())
    total_busy = sum(v["busy_ns"] for r in truth["ranks_summary"] for v in r["streams"].values())
    assert sum(r["exclusive_ns"] for r in rows) == total_excl
    assert sum(r["hidden_ns"] for r in rows) == total_busy - total_excl
    for r in rows:
        time_ns, excl = per_name[r["name"]]
        assert (r["gpu_time_ns"], r["exclusive_ns"]) == (time_ns, excl), r["name"]
        ratio = excl / time_ns if time_ns else None
        expected = (
            "headroom"
            if time_ns >= 5000 and ratio is not None and ratio >= 0.45
            else "low-roi-hidden"
            if ratio is not None and 1 - ratio >= 0.65
            else "neutral"
        )
        assert r["verdict"] == expected, r["name"]
    by_name = {r["name"]: r for r in rows}
    side = str(truth["streams"]["side"])
    assert all(
        r["streams"][side]["exclusive_ns"] < r["streams"][side]["busy_ns"] for r in truth["ranks_summary"]
    )
    # the shared expert runs on the main stream entirely under the routed experts: already hidden
    shared = by_name["nvjet_tst_64x8_64x16_4x1_v_bz_TNT"]
    assert shared["verdict"] == "low-roi-hidden" and shared["recommendation"] == "skip overlap"
    # attention runs while the expert stream is idle: all exclusive
    (attn,) = [r for r in rows if "BatchMLAPagedAttentionKernel" in r["name"]]
    assert attn["exclusive_ratio"] == 1.0 and attn["verdict"] == "headroom" and attn["priority"] == "P1"
    assert {r["reportable"] for r in rows} == {True, False}
    assert all(r["reportable"] == (r["share"] >= 0.01) for r in rows)

"""The kernel category rule table: fixture pairs through DuckDB, user rules, bad files, coverage.

The fixture tests/fixtures/kernel_categories.csv (name, kind, expected_category) is the reviewable
truth: every distinct GPU activity name in ../shared/traces that takes at least 0.1 % of its trace's GPU
time, the names the issue lists, and typical SGLang / vLLM / TRT-LLM names, each checked by hand.
"""

from __future__ import annotations

import csv
import gzip
import hashlib
import json
import sys
from pathlib import Path

import duckdb
import pyarrow as pa
import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tracehouse.warehouse.catalog import view_files
from tracehouse.warehouse.rules import (
    CATEGORIES,
    RULES_VERSION,
    SHIPPED_RULES,
    VERSION_FILE,
    load_category_rules,
    match_literals,
    shipped_rules_sha256,
)

FIXTURE = ROOT / "tests" / "fixtures" / "kernel_categories.csv"
VIEW_SQL = view_files()["kernel_category"]
TRACES = Path(__file__).resolve().parents[1].parent / "shared" / "traces"

# Kineto categories of GPU activities (older traces capitalise them) -> kernels.kind
GPU_KINDS = {
    "kernel": "kernel",
    "gpu_memcpy": "memcpy",
    "gpu_memset": "memset",
    "Kernel": "kernel",
    "Memcpy": "memcpy",
    "Memset": "memset",
}
OTHER_LIMIT_PCT = 5.0
# Rules that classify as `other` on purpose: time that is no work, reported apart from the limit.
NO_WORK_RULES = {"torch_cuda_sleep"}


def classify(names: list[tuple[str, str]], rules: pa.Table | None = None) -> dict[tuple[str, str], tuple]:
    """(name, kind) -> (category, rule_name, rules_version), through sql/kernels/kernel_category.sql on DuckDB."""
    con = duckdb.connect()
    con.register("category_rules", rules if rules is not None else load_category_rules())
    con.register(
        "kernels",
        pa.table(
            {
                "name": pa.array([n for n, _ in names], pa.string()),
                "kind": pa.array([k for _, k in names], pa.string()),
            }
        ),
    )
    con.execute(VIEW_SQL.read_text(encoding="utf-8"))
    rows = con.execute(
        "SELECT name, kind, category, rule_name, rules_version FROM kernel_category"
    ).fetchall()
    con.close()
    return {(n, k): (c, r, v) for n, k, c, r, v in rows}


def read_fixture() -> list[tuple[str, str, str]]:
    with FIXTURE.open(newline="", encoding="utf-8") as fh:
        return [(r["name"], r["kind"], r["expected_category"]) for r in csv.DictReader(fh)]


FIXTURE_ROWS = read_fixture()


def _case_id(i: int, row: tuple[str, str, str]) -> str:
    short = row[0].replace("void ", "")[:60]
    return f"{i:03d}-{row[2]}-{''.join(ch if ch.isalnum() or ch in '_:' else '_' for ch in short)}"


@pytest.fixture(scope="module")
def fixture_results() -> dict[tuple[str, str], tuple]:
    return classify([(n, k) for n, k, _ in FIXTURE_ROWS])


@pytest.mark.parametrize(
    "name,kind,expected", FIXTURE_ROWS, ids=[_case_id(i, r) for i, r in enumerate(FIXTURE_ROWS)]
)
def test_fixture_pair(fixture_results, name, kind, expected):
    category, rule, _ = fixture_results[(name, kind)]
    assert category == expected, f"{name!r} ({kind}) -> {category} by rule {rule}, expected {expected}"


def test_fixture_is_well_formed():
    assert len(FIXTURE_ROWS) > 400
    keys = [(n, k) for n, k, _ in FIXTURE_ROWS]
    assert len(keys) == len(set(keys)), "duplicate (name, kind) in the fixture"
    assert {e for _, _, e in FIXTURE_ROWS} == set(CATEGORIES), "every category needs fixture pairs"
    assert {k for _, k, _ in FIXTURE_ROWS} == {"kernel", "memcpy", "memset"}


ISSUE_NAMES = [  # the names issue 4 says a person must see classified right (short forms)
    ("ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)", "communication"),
    ("ncclDevKernel_AllReduce_Sum_bf16_RING_LL", "communication"),
    ("multimem_all_reduce_kernel", "communication"),
    ("void vllm::cross_device_reduce_1stage<__nv_bfloat16, 8>(vllm::RankData*)", "communication"),
    ("void c10d::symmetric_memory::two_shot_all_reduce_kernel<c10::BFloat16, 16, 8>()", "communication"),
    ("allreduce_fusion_kernel_oneshot_lamport", "communication"),
    ("void deep_ep::intranode::dispatch<8, 768, 8192>()", "communication"),
    ("void deep_ep::internode_ll::combine<false, 7168>()", "communication"),
    (
        (
            "void cutlass::device_kernel<cutlass::gemm::kernel::GemmUniversal<cutlass::gemm::GroupProblemShape<"
            "cute::tuple<int, int, int> >, cute::tuple<cutlass::float_e2m1_t, cutlass::float_ue4m3_t> > >()"
        ),
        "moe",
    ),
    ("void cutlass::Kernel2<cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_32x32_128x2_tn_align8>()", "gemm"),
    ("nvjet_tst_64x64_64x16_2x1_2cta_v_bz_bias_TNT", "gemm"),
    ("Cijk_Alik_Bljk_BBS_BH_Bias_HA_S_SAV_UserArgs_MT256x128x64_MI16x16x1", "gemm"),
    ("kernel_cutlass__dsv3_fused_a_gemm_kernel_0", "gemm"),
    ("void flashinfer::sparse_mla_sm120::sparse_mla_decode_kernel<128>()", "attention"),
    ("fmhaSm100aKernel_QkvE4m3OBfloat16H64PagedKvCausalP16VarSeqQ128Kv128PersistentContext", "attention"),
    ("void paged_attention_ll4mi_QKV_mfma16_kernel<0, __hip_bfloat16>()", "attention"),
    (
        (
            "void pytorch_flash::flash_fwd_kernel<pytorch_flash::Flash_fwd_kernel_traits<64, 128, 128, 4, false, "
            "false, cutlass::bfloat16_t> >()"
        ),
        "attention",
    ),
    ("attn_fwd", "attention"),
    ("void tensorrt_llm::kernels::cutlass_kernels::finalizeMoeRoutingKernel<__nv_bfloat16>()", "moe"),
    ("bmm_MxE4m3_MxE2m1MxE4m3_Fp32_t128x16x256u2_s3_swiGlu_dynBatch_sm100f", "moe"),
    ("void sglang::router_gemm_kernel<__nv_bfloat16, 128>()", "moe"),
    ("void flashinfer::norm::FusedAddRMSNormKernel<8u, cutlass::bfloat16_t>(cutlass::bfloat16_t*)", "norm"),
    ("_matmul_ogs_NNT_bf16xbf16xmxfp4_16x128x256x1_swiglu", "moe"),
    (
        (
            "void at::native::elementwise_kernel<128, 4, at::native::gpu_kernel_impl_nocast<at::native::"
            "direct_copy_kernel_cuda(at::TensorIteratorBase&)> >()"
        ),
        "elementwise",
    ),
    (
        "void at::native::(anonymous namespace)::CatArrayBatchedCopy<float, unsigned int, 2, 128, 1>()",
        "elementwise",
    ),
]


@pytest.mark.parametrize(
    "name,expected", ISSUE_NAMES, ids=[f"{i:02d}-{e}" for i, (_, e) in enumerate(ISSUE_NAMES)]
)
def test_issue_names(name, expected):
    category, rule, _ = classify([(name, "kernel")])[(name, "kernel")]
    assert category == expected, f"{name!r} -> {category} by rule {rule}"


def test_kind_decides_memory_before_any_rule():
    names = [
        ("Memcpy HtoD (Pageable -> Device)", "memcpy"),
        ("Memset (Device)", "memset"),
        ("ncclDevKernel_SendRecv", "memcpy"),
        ("direct_copy_kernel_cuda", "kernel"),
        ("no_rule_matches_this", "kernel"),
    ]
    got = classify(names)
    assert got[names[0]][:2] == ("memory", "kind_memcpy")
    assert got[names[1]][:2] == ("memory", "kind_memset")
    assert got[names[2]][:2] == ("memory", "kind_memcpy")  # a memcpy is memory whatever its name says
    assert got[names[3]][0] == "elementwise"  # a copy kernel on the SMs is not memory
    assert got[names[4]][:2] == ("other", "unmatched")
    assert {v for _, _, v in got.values()} == {RULES_VERSION}


def test_one_row_per_distinct_name_and_kind():
    names = [("attn_fwd", "kernel")] * 3 + [("attn_fwd", "memcpy"), ("unknown_thing", "kernel")] * 2
    got = classify(names)
    assert set(got) == {("attn_fwd", "kernel"), ("attn_fwd", "memcpy"), ("unknown_thing", "kernel")}


def test_shipped_rules_table():
    rules = load_category_rules()
    assert rules.column_names == [
        "rule_order",
        "rule_name",
        "category",
        "pattern",
        "op_pattern",
        "op_shape",
        "module_pattern",
        "pattern_literals",
        "op_pattern_literals",
        "module_pattern_literals",
        "rules_version",
    ]
    assert rules.schema.field("rule_order").type == pa.int32()
    orders = rules.column("rule_order").to_pylist()
    assert orders == sorted(orders) and len(set(orders)) == len(orders)
    assert len(set(rules.column("rule_name").to_pylist())) == rules.num_rows
    assert set(rules.column("category").to_pylist()) <= set(CATEGORIES)
    assert set(rules.column("rules_version").to_pylist()) == {RULES_VERSION}


def test_rules_version_matches_the_csv():
    meta = json.loads(VERSION_FILE.read_text(encoding="utf-8"))
    assert meta["rules_version"] == RULES_VERSION
    assert meta["sha256"] == shipped_rules_sha256(), (
        f"{SHIPPED_RULES.name} changed: bump rules_version in {VERSION_FILE.name} and record its new sha256 "
        f"{shipped_rules_sha256()} (see sql/rules/README.md)"
    )


def test_view_transpiles_to_spark():
    sqlglot = pytest.importorskip("sqlglot")
    sql = VIEW_SQL.read_text(encoding="utf-8")
    (spark,) = sqlglot.transpile(sql, read="duckdb", write="spark")
    assert "RLIKE" in spark.upper() and "ROW_NUMBER()" in spark.upper()


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def test_user_rules_win(tmp_path):
    user = write(
        tmp_path / "mine.csv",
        "rule_order,rule_name,category,pattern\n"
        "1,sendrecv_is_mine,other,^ncclDevKernel_SendRecv\n"
        '2,my_fused_op,activation,"(?i)my_fused_(silu|gelu)"\n',
    )
    rules = load_category_rules(user)
    assert rules.column("rule_name").to_pylist()[:2] == ["user:sendrecv_is_mine", "user:my_fused_op"]
    assert rules.column("rule_order").to_pylist() == list(range(1, rules.num_rows + 1))
    digest = hashlib.sha256(user.read_bytes()).hexdigest()[:12]
    version = f"{RULES_VERSION}+user.{digest}"
    assert set(rules.column("rules_version").to_pylist()) == {version}
    names = [
        ("ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)", "kernel"),
        ("My_Fused_SiLU_kernel", "kernel"),
        ("ncclDevKernel_AllReduce_Sum_bf16_RING_LL", "kernel"),
        ("Memcpy HtoD (Pinned -> Device)", "memcpy"),
    ]
    got = classify(names, rules)
    assert got[names[0]] == ("other", "user:sendrecv_is_mine", version)
    assert got[names[1]] == ("activation", "user:my_fused_op", version)
    assert got[names[2]] == ("communication", "nccl", version)  # shipped rules still apply after
    assert got[names[3]][:2] == ("memory", "kind_memcpy")  # the kind still decides memory


@pytest.mark.parametrize(
    "body,needle",
    [
        (
            "rule_order,rule_name,category,pattern\n1,ok,gemm,foo\n2,bad,matmul,bar\n",
            ":3 (rule 'bad'): unknown category 'matmul'",
        ),
        ("rule_order,rule_name,category,pattern\n1,broken,gemm,(abc\n", ":2 (rule 'broken'): invalid"),
        (
            "rule_order,rule_name,category,pattern\n1,look,gemm,foo(?=bar)\n",
            ":2 (rule 'look'): pattern 'foo(?=bar)' is not portable",
        ),
        ("rule_order,rule_name,category,pattern\n1,back,gemm,(a)\\1\n", "is not portable: backreference"),
        (
            "rule_order,rule_name,category,pattern\nx,n,gemm,foo\n",
            ":2 (rule 'n'): rule_order 'x' is not an integer",
        ),
        (
            "rule_order,rule_name,category,pattern\n1,a,gemm,foo\n1,b,gemm,bar\n",
            ":3 (rule 'b'): rule_order 1 repeats the one on line 2",
        ),
        (
            "rule_order,rule_name,category,pattern\n1,a,gemm,foo\n2,a,gemm,bar\n",
            ":3 (rule 'a'): rule_name repeats",
        ),
        ("rule_order,rule_name,category,pattern\n1,empty,gemm,\n", ":2 (rule 'empty'): empty pattern"),
        ("rule_order,name,category,pattern\n1,a,gemm,foo\n", ":1: header lacks column(s) rule_name"),
        (
            "rule_order,rule_name,category,pattern\n1,a,gemm,foo|bar,baz\n",
            ":2: 5 fields but the header has 4",
        ),
        ("", "empty rule file"),
    ],
)
def test_bad_user_file_errors_clearly(tmp_path, body, needle):
    user = write(tmp_path / "bad.csv", body)
    with pytest.raises(ValueError) as info:
        load_category_rules(user)
    message = str(info.value)
    assert str(user) in message and needle in message, message


def test_missing_user_file_errors_clearly(tmp_path):
    with pytest.raises(ValueError, match="cannot read the category rule file"):
        load_category_rules(tmp_path / "nope.csv")


# --- coverage over the real traces ------------------------------------------------------------------


def _load_trace(path: Path):
    if path.name.endswith(".gz"):
        with gzip.open(path, "rb") as fh:
            data = fh.read()
    else:
        data = path.read_bytes()
    try:
        import orjson

        return orjson.loads(data)
    except ImportError:  # pragma: no cover
        return json.loads(data)


def _gpu_time_by_name(path: Path) -> dict[tuple[str, str], float]:
    """(name, kind) -> summed dur (µs, negatives as 0) of the trace's kernel/memcpy/memset events."""
    doc = _load_trace(path)
    events = doc.get("traceEvents", []) if isinstance(doc, dict) else doc
    out: dict[tuple[str, str], float] = {}
    for e in events if isinstance(events, list) else []:
        if not isinstance(e, dict) or e.get("ph") != "X":
            continue
        kind = GPU_KINDS.get(e.get("cat"))
        if kind is None:
            continue
        key = (str(e.get("name", "")), kind)
        out[key] = out.get(key, 0.0) + max(float(e.get("dur") or 0), 0.0)
    return out


def test_other_share_per_real_trace():
    if not TRACES.is_dir():
        pytest.skip(f"../shared/traces not found: {TRACES}")
    per_trace: dict[str, dict[tuple[str, str], float]] = {}
    for path in sorted(TRACES.rglob("*.json*")):
        if path.is_file() and path.name != "execution_details.json":
            times = _gpu_time_by_name(path)
            if times:
                per_trace[str(path.relative_to(TRACES))] = times
    assert per_trace, f"no trace with GPU activities under {TRACES}"
    got = classify(sorted({key for times in per_trace.values() for key in times}))

    width = max(len(rel) for rel in per_trace)
    lines = [
        f"{'trace':<{width}} {'GPU ms':>10} {'other %':>8} {'no-work %':>9}  largest other",
        "-" * (width + 72),
    ]
    over = []
    for rel, times in per_trace.items():
        total = sum(times.values())
        other = {k: d for k, d in times.items() if got[k][0] == "other"}
        no_work = sum(d for k, d in other.items() if got[k][1] in NO_WORK_RULES)
        other_pct = 100 * sum(other.values()) / total if total else 0.0
        no_work_pct = 100 * no_work / total if total else 0.0
        top = max(other, key=other.get)[0][:40] if other else ""
        lines.append(f"{rel:<{width}} {total / 1000:>10.3f} {other_pct:>8.2f} {no_work_pct:>9.2f}  {top}")
        if other_pct - no_work_pct > OTHER_LIMIT_PCT:
            over.append(rel)
    table = "\n".join(lines)
    print(
        f"\n`other` share of GPU time per trace (rules {RULES_VERSION}); no-work = {sorted(NO_WORK_RULES)}, "
        f"reported but not held to the {OTHER_LIMIT_PCT} % limit\n{table}"
    )
    assert not over, f"`other` above {OTHER_LIMIT_PCT} % of GPU time in {over}\n{table}"


@pytest.mark.parametrize(
    "pattern, literals",
    [
        ("(?i)(rms_?norm|layer_?norm)", ["layer", "norm"]),  # each branch: its longest sure run
        ("^(Cijk_|nvjet_)", ["cijk_", "nvjet_"]),
        ("(?i)((^|[^b])gemm|gemv)", ["gemm", "gemv"]),
        ("ab?c", ["a"]),  # an optional letter cuts the run
        ("(fooo)+bar", ["fooo"]),  # a repeat of at least one keeps its literal; the longest run wins
        ("(a|)x", ["x"]),
        ("(a|)", []),  # an empty branch: nothing is sure
        ("x{0,3}", []),
        (".*", []),
        ("", []),
        (r"ab\pNcd", []),  # RE2 syntax that Python's parser refuses: no prefilter, never a wrong one
    ],
)
def test_match_literals(pattern, literals):
    assert match_literals(pattern) == literals


def test_every_match_contains_a_literal():
    """The prefilter is a necessary condition: every name a shipped pattern matches (RE2, as the views)
    contains one of its literals, lowercased; on the reviewed fixture names, every rule's patterns."""
    rules = load_category_rules().to_pylist()
    names = sorted({row["name"] for row in csv.DictReader(FIXTURE.open())})
    con = duckdb.connect()
    con.execute("CREATE TABLE names AS SELECT unnest(?) AS name", [names])
    checked = 0
    for rule in rules:
        for column in ("pattern", "op_pattern", "module_pattern"):
            pattern, literals = rule[column], rule[f"{column}_literals"]
            if not pattern:
                continue
            assert literals == match_literals(pattern)
            matched = [
                r[0]
                for r in con.execute(
                    "SELECT name FROM names WHERE regexp_matches(name, ?)", [pattern]
                ).fetchall()
            ]
            for name in matched:
                assert not literals or any(lit in name.lower() for lit in literals), (rule["rule_name"], name)
            checked += len(matched)
    assert checked > len(names) / 2  # the fixture's names do meet the rules

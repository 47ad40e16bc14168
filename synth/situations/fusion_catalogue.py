"""Fusion catalogue situations: for each pattern of the catalogue's newer rows, a run where it must give a
row and runs where it must not (the other vendor's GPU, a model without the block).

One generic writer reads BLOCKS: per pattern, the engine, the GPU vendor of the run where it applies, the
kernels of the unfused block in launch order (launching op, its Input Dims, kernel name, duration) and
which of them the fused kernel makes unnecessary (its work folded into the one kernel that stays), plus
the kernels around the block (two GEMMs before and after; a MoE kernel where routing needs one) and the step
a model without the block lacks. The writer lays the block out eagerly, layer after layer, and returns as
ground truth what it wrote: the chains it put in, their GPU time, and what the fusion would remove (the
replaced kernels plus the idle time between the block's kernels, measured on the timeline it wrote).

Situations (one run each; every block on a stream of its own, so blocks never form each other's chains):
  fusion-cat-<engine>-<vendor>          the blocks of the engine's patterns that apply on that vendor's GPU
                                        (each row Confirmed, with its figures) and the blocks of the other
                                        vendor's patterns (no row: a CUDA-only kernel is not suggested on AMD,
                                        nor an AMD-only one on NVIDIA)
  fusion-cat-<engine>-<vendor>-<pattern> a block that holds another pattern's block too, alone
  fusion-cat-<engine>-<vendor>-without  the same blocks with their `without` steps left out (a model without
                                        the block: no QK norm, no softcapping, one GPU so no all-reduce ...):
                                        none of those rows
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path

from . import situation
from .fusion import ADD, GEMM, MUL, SILU, SOFTMAX, V_RMS, V_ROPE, Eager
from .timeline import Timeline

US = 1_000
T, H, V, E, NH, KV, D = 64, 4096, 32000, 64, 32, 8, 128

AR_NV = "void cross_device_reduce_1stage<__nv_bfloat16, 8>(RankData*, RankSignals, Signal*, __nv_bfloat16*, int, int)"
AR_AMD = "void aiter::cross_device_reduce_1stage<__hip_bfloat16, 8>(aiter::RankData*, aiter::RankSignals, int, int)"
FUSED_ADD_RMS = (
    "void flashinfer::norm::FusedAddRMSNormKernel<8u, __nv_bfloat16>(__nv_bfloat16*, __nv_bfloat16*, float)"
)
AITER_ADD_RMS = (
    "_ZN5aiter24add_rmsnorm_quant_kernelIDF16bDF16bLi256ELi16ELb1ELb0ELb1ELi1EEEvPT0_PT_PfS4_S4_S4_diiiiiiib"
)
RMS = "void flashinfer::norm::RMSNormKernel<8u, __nv_bfloat16>(__nv_bfloat16*, __nv_bfloat16*, unsigned int, float)"
RMS_AMD = (
    "void ck_tile::kentry<ck_tile::Rmsnorm2dFwd<ck_tile::Rmsnorm2dFwdPipelineOnePass<__hip_bfloat16> > >()"
)
ROPE = "void flashinfer::BatchQKApplyRotaryPosIdsCosSinCacheKernel<true, 128u, 8u, 16u, __nv_bfloat16, long>(long*)"
ROPE_AMD = (
    "void rotary_embedding_kernel<c10::BFloat16, true>(long const*, c10::BFloat16*, c10::BFloat16*, int)"
)
STORE = "void (anonymous namespace)::store_kvcache<2048l, 4, false, long>((anonymous namespace)::StoreKVCacheParams)"
DIV = (
    "void at::native::vectorized_elementwise_kernel<4, at::native::BinaryFunctor<float, float, float, "
    "at::native::binary_internal::DivFunctor<float> >, std::array<char*, 3ul> >(int, std::array<char*, 3ul>)"
)
TANH = (
    "void at::native::vectorized_elementwise_kernel<4, at::native::tanh_kernel_cuda(at::TensorIteratorBase&)::"
    "{lambda()#2}::operator()() const::{lambda(float)#1}, std::array<char*, 2ul> >(int, std::array<char*, 2ul>)"
)
TOPK = (
    "void at::native::sbtopk::gatherTopK<float, unsigned int, 2, false>(at::cuda::detail::TensorInfo<float "
    "const, unsigned int>, unsigned int, unsigned int, bool, unsigned int, unsigned int)"
)
CAT = (
    "void at::native::(anonymous namespace)::CatArrayBatchedCopy<at::native::(anonymous namespace)::OpaqueType"
    "<4u>, unsigned int, 2, 128, 1>(at::native::(anonymous namespace)::CatArrInputTensorMetadata)"
)
FUSED_MOE = "fused_moe_kernel"
QUANT_AMD = "void aiter::dynamic_per_token_scaled_quant_kernel<__hip_bfloat16, __hip_fp8_e4m3>(float*, int)"
QUANT_TRT = "void tensorrt_llm::kernels::scaledFP8QuantizeKernel<__nv_bfloat16>(__nv_fp8_e4m3*, float const*)"
TRT_MARK = "void tensorrt_llm::kernels::invokeBuildDecoderInfo(int const*, int*, int)"


@dataclass(frozen=True)
class Kern:
    op: str
    dims: list
    name: str
    dur: int
    replaced: bool = False  # the fused kernel makes this one unnecessary (its work moves into the fused one)


@dataclass(frozen=True)
class Block:
    engine: str  # sglang, vllm or tensorrt-llm
    vendor: str  # the GPU vendor whose runs have the fused kernel: nvidia, amd or any
    kernels: tuple[Kern, ...]
    without: tuple[int, ...] = (1,)  # the steps (1-based) a model without the block lacks
    moe: bool = False  # the layer also runs a MoE kernel (routing needs MoE work in the phase)
    amd_kernels: tuple[Kern, ...] = field(default=())  # the same block as an AMD GPU names it (other vendor)
    alone: bool = False  # its kernels hold another pattern's block too: written in a run of its own


def _k(op, dims, name, dur_us, replaced=False) -> Kern:
    return Kern(op, dims, name, dur_us * US, replaced)


def _qk(rms: str, rope: str, rms_op: str, rope_op: str) -> tuple[Kern, ...]:
    return (
        _k(rms_op, [[T, NH, D], [D], []], rms, 4, True),
        _k(rms_op, [[T, KV, D], [D], []], rms, 3, True),
        _k(rope_op, [[T], [T, NH * D], [T, KV * D], []], rope, 5),
    )


BLOCKS: dict[str, Block] = {
    "sgl_aiter_allreduce_rmsnorm": Block(
        "sglang",
        "amd",
        (
            _k("aiter::all_reduce", [[T, H]], AR_AMD, 30),
            _k("sgl_kernel::fused_add_rmsnorm", [[T, H], [T, H], [H], []], AITER_ADD_RMS, 4, True),
        ),
    ),
    "sgl_rope_reshape_cache_hip": Block(
        "sglang",
        "amd",
        (
            _k("sgl_kernel::rotary_embedding", [[T], [T, NH * D], [T, KV * D], []], ROPE_AMD, 5),
            _k("sgl_kernel::store_kvcache", [[T, KV, D], [T, KV, D]], STORE, 3, True),
        ),
    ),
    "sgl_qknorm_rope": Block(
        "sglang",
        "nvidia",
        _qk(RMS, ROPE, "sgl_kernel::rmsnorm", "sgl_kernel::apply_rope_pos_ids_cos_sin_cache"),
        without=(1, 2),
        amd_kernels=_qk(RMS_AMD, ROPE_AMD, "aiter::rms_norm", "sgl_kernel::rotary_embedding"),
    ),
    "sgl_temperature_softmax": Block(
        "sglang",
        "any",
        (
            _k("aten::div", [[T, V], [T, 1]], DIV, 6, True),
            _k("aten::_softmax", [[T, V], [], []], SOFTMAX, 9),
        ),
    ),
    "sgl_logit_softcap": Block(
        "sglang",
        "any",
        (
            _k("aten::div", [[T, V], []], DIV, 6, True),
            _k("aten::tanh", [[T, V]], TANH, 7),
            _k("aten::mul", [[T, V], []], MUL, 6, True),
        ),
        without=(2,),
    ),
    "sgl_dual_residual_rmsnorm": Block(
        "sglang",
        "any",
        (
            _k("sgl_kernel::rmsnorm", [[T, H], [H], []], RMS, 4, True),
            _k("aten::add", [[T, H], [T, H], []], ADD, 3, True),
            _k("sgl_kernel::rmsnorm", [[T, H], [H], []], RMS, 4),
        ),
    ),
    "sgl_moe_router_softcap": Block(
        "sglang",
        "any",
        (
            _k("aten::mm", [[T, H], [H, E]], GEMM, 6),
            _k("aten::tanh", [[T, E]], TANH, 3, True),
            _k("aten::topk", [[T, E], [], [], [], []], TOPK, 4, True),
        ),
        without=(2,),
        moe=True,
    ),
    "sgl_shared_expert_append": Block(
        "sglang",
        "any",
        (
            _k("aten::topk", [[T, E], [], [], [], []], TOPK, 4),
            _k("aten::cat", [[[T, 8], [T, 1]], []], CAT, 3, True),
        ),
        without=(2,),
        moe=True,
    ),
    "sgl_rmsnorm_quant_hip": Block(
        "sglang",
        "amd",
        (
            _k("aiter::rms_norm", [[T, H], [H], []], RMS_AMD, 4),
            _k("aiter::dynamic_per_token_scaled_quant", [[T, H], [T, H], [T, 1]], QUANT_AMD, 3, True),
        ),
        without=(2,),
    ),
    "vllm_qknorm_rope": Block(
        "vllm",
        "nvidia",
        _qk(V_RMS, V_ROPE, "_C::rms_norm", "_C::rotary_embedding"),
        without=(1, 2),
        amd_kernels=_qk(V_RMS, V_ROPE, "_C::rms_norm", "_C::rotary_embedding"),
    ),
    "trtllm_qknorm_rope": Block(
        "tensorrt-llm",
        "nvidia",
        _qk(
            RMS,
            ROPE,
            "trtllm::flashinfer_rmsnorm",
            "trtllm::flashinfer_apply_rope_with_cos_sin_cache_inplace",
        ),
        without=(1, 2),
        amd_kernels=_qk(RMS, ROPE, "trtllm::flashinfer_rmsnorm", "trtllm::flashinfer_apply_rope"),
    ),
    "trtllm_add_rmsnorm": Block(
        "tensorrt-llm",
        "nvidia",
        (
            _k("aten::add", [[T, H], [T, H], []], ADD, 3, True),
            _k("trtllm::flashinfer_rmsnorm", [[T, H], [H], []], RMS, 4),
        ),
    ),
    "trtllm_act_and_mul": Block(
        "tensorrt-llm",
        "nvidia",
        (
            _k("aten::silu", [[T, 14336]], SILU, 9, True),
            _k("aten::mul", [[T, 14336], [T, 14336]], MUL, 10),
        ),
        without=(2,),
    ),
    "trtllm_add_rmsnorm_fp8": Block(
        "tensorrt-llm",
        "nvidia",
        (
            _k("aten::add", [[T, H], [T, H], []], ADD, 3, True),
            _k("trtllm::flashinfer_rmsnorm", [[T, H], [H], []], RMS, 4),
            _k("trtllm::static_quantize_e4m3_per_tensor", [[T, H], []], QUANT_TRT, 3, True),
        ),
        alone=True,  # add -> RMSNorm is trtllm_add_rmsnorm's block
    ),
}

FRAMES = {  # a Python frame of the engine around each step (how the run's engine is recognised)
    "sglang": ("/sgl-workspace/sglang/python/sglang/srt/models/qwen3.py", 240),
    "vllm": ("/usr/local/lib/python3.12/site-packages/vllm/model_executor/models/qwen3.py", 180),
    "tensorrt-llm": ("/code/tensorrt_llm/_torch/models/modeling_qwen3.py", 120),
}
LAYERS, STEPS = 3, 2


def _layer(seq: Eager, engine: str, kernels: tuple[Kern, ...], moe: bool, truth: dict) -> None:
    """One layer on `seq`'s stream: the block between two GEMMs on each side (a layer's projections, so no
    chain runs from one layer's block into the next); adds to `truth` what it wrote."""
    if engine == "tensorrt-llm":
        seq.op("trtllm::build_decoder_info", [[T]], TRT_MARK, 2 * US)
    seq.op("aten::mm", [[T, H], [H, H]], GEMM, 20 * US)
    seq.op("aten::mm", [[T, H], [H, H]], GEMM, 20 * US)
    spans = []
    for k in kernels:
        seq.op(k.op, k.dims, k.name, k.dur)
        spans.append((seq.gpu - k.dur, seq.gpu))
        truth["gpu_ns"] += k.dur
        truth["removable_ns"] += k.dur if k.replaced else 0
    # one fused kernel has no idle time inside: the gaps between the block's kernels go too
    truth["removable_ns"] += sum(b[0] - a[1] for a, b in pairwise(spans))
    truth["chains"] += 1
    if moe:
        seq.op("sglang::fused_moe", [[T, H], [E, 2 * H, H]], FUSED_MOE, 30 * US)
    seq.op("aten::mm", [[T, H], [H, H]], GEMM, 20 * US)
    seq.op("aten::mm", [[T, H], [H, H]], GEMM, 20 * US)


def _write(out: Path, engine: str, vendor: str, blocks: list[tuple[str, tuple[Kern, ...], bool]]) -> dict:
    """One rank of a run of `engine` on a `vendor` GPU: each (pattern, kernels, moe) block on a stream of its
    own, LAYERS times per step (the host launches them one after the other). Returns per pattern the
    chains written, their GPU time and the time a fusion would remove (the replaced kernels plus the idle
    time between the block's kernels, as laid out)."""
    tl = Timeline(vendor)
    seqs = [Eager(tl, stream=7 + i) for i in range(len(blocks))]
    truth = {p: {"chains": 0, "gpu_ns": 0, "removable_ns": 0} for p, _, _ in blocks}
    file, line = FRAMES[engine]
    for n in range(STEPS):
        start = max(s.host for s in seqs)
        ann = tl.op(f"ProfilerStep#{n}", start - 2 * US, 0, cat="user_annotation")
        for _ in range(LAYERS):
            for seq, (pattern, kernels, moe) in zip(seqs, blocks, strict=True):
                seq.host = max(s.host for s in seqs)
                _layer(seq, engine, kernels, moe, truth[pattern])
        host_end = max(s.host for s in seqs)
        ann.end = max(max(s.gpu for s in seqs), host_end) + 20 * US
        tl.frame(file, line, "forward", start - 1 * US, host_end)
        for s in seqs:
            s.host = ann.end + 30 * US
    tl.write(out / "rank-0.pt.trace.json.gz")
    return truth


def _run_vendor(block: Block) -> str:
    """The GPU of the run where the block's pattern applies (a pattern of any vendor: AMD for SGLang, to
    show it is not held back there, NVIDIA for the others)."""
    if block.vendor == "any":
        return "amd" if block.engine == "sglang" else "nvidia"
    return block.vendor


def _group(engine: str, vendor: str, fire: list[str], foreign: list[str], without: list[str]):
    """A run of `engine` on a `vendor` GPU, each block on a stream of its own: the blocks of `fire` (each
    pattern's row: Confirmed, with the figures written), of `foreign` (patterns of the other vendor, their
    kernels as this vendor names them: no row) and of `without` (each with its `without` steps left out,
    a model without the block: no row)."""

    def write(out: Path) -> dict:
        blocks = [(p, BLOCKS[p].kernels, BLOCKS[p].moe) for p in fire]
        for p in foreign:
            b = BLOCKS[p]
            blocks.append((p, b.amd_kernels if (vendor == "amd" and b.amd_kernels) else b.kernels, b.moe))
        for p in without:
            b = BLOCKS[p]
            kept = tuple(k for i, k in enumerate(b.kernels, start=1) if i not in b.without)
            blocks.append((p, kept, b.moe))
        truth = _write(out, engine, vendor, blocks)
        present = {
            p: {
                "status": "Confirmed",
                "occurrences": truth[p]["chains"],
                "related_gpu_time_ns": truth[p]["gpu_ns"],
                "removable_gpu_time_ns": truth[p]["removable_ns"],
                "pattern_framework": engine,
            }
            for p in fire
        }
        absent = {p: "other vendor" for p in foreign} | {p: "without the block" for p in without}
        return {"fusion_catalogue": {"framework": engine, "present": present, "absent": absent}}

    return write


def _register() -> None:
    for engine in ("sglang", "vllm", "tensorrt-llm"):
        own = [p for p, b in BLOCKS.items() if b.engine == engine]
        for vendor, other in (("nvidia", "amd"), ("amd", "nvidia")):
            mine = [p for p in own if _run_vendor(BLOCKS[p]) == vendor]
            together = [p for p in mine if not BLOCKS[p].alone]
            foreign = [p for p in own if BLOCKS[p].vendor == other]
            gpu = f"an {'AMD' if vendor == 'amd' else 'NVIDIA'} GPU"
            if together or foreign:
                situation(
                    f"fusion-cat-{engine}-{vendor}",
                    f"{engine} on {gpu}: the unfused blocks of {', '.join(together) or 'no pattern'} (each row "
                    f"Confirmed, with what the fusion removes) and of the {other}-only "
                    f"{', '.join(foreign) or 'none'} (no row)",
                )(_group(engine, vendor, together, foreign, []))
            for p in mine:
                if BLOCKS[p].alone:
                    situation(
                        f"fusion-cat-{engine}-{vendor}-{p}",
                        f"{engine} on {gpu}: the unfused block of {p} (its row Confirmed)",
                    )(_group(engine, vendor, [p], [], []))
            if mine:
                situation(
                    f"fusion-cat-{engine}-{vendor}-without",
                    f"{engine} on {gpu}, a model without the blocks of {', '.join(mine)} (each with a step "
                    "left out): none of their rows",
                )(_group(engine, vendor, [], [], mine))


_register()

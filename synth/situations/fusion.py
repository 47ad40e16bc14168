"""Fusion situations: evidence for a fusion row is the pattern's own op sequence, on the run's framework.

Real traces showed fusion rows on weak evidence: an MLA-only fused kernel "Confirmed" on a GQA model,
adjacency counted across a piecewise-graph boundary, "SiLU/GELU + mul (gated MLP)" built from every
`aten::mul` of the run (attention scaling included) and printed once per framework on a plain PyTorch
run, "sampling" on a diffusion model. Each situation below is a small trace of one such shape; its
`expect["fusion"]` lists EVERY row fusion_match must give for the run (pattern_id -> status,
occurrences, related GPU time, framework column, evidence basis), so any extra row fails too.
"""

from __future__ import annotations

from pathlib import Path

from . import situation
from .timeline import Timeline

US = 1_000

# kernel names as PyTorch / vLLM print them (categories: sql/rules/kernel_categories.csv)
SILU = (
    "void at::native::vectorized_elementwise_kernel<4, at::native::(anonymous namespace)::silu_kernel("
    "at::TensorIteratorBase&)::{lambda()#1}::operator()() const::{lambda()#6}::operator()() const::"
    "{lambda(c10::BFloat16)#1}, std::array<char*, 2ul> >(int, std::array<char*, 2ul>)"
)
GELU = (
    "void at::native::vectorized_elementwise_kernel<4, at::native::GeluCUDAKernelImpl(at::TensorIteratorBase&, "
    "at::native::GeluType)::{lambda()#2}::operator()() const::{lambda()#4}::operator()() const::"
    "{lambda(c10::BFloat16)#1}, std::array<char*, 2ul> >(int, std::array<char*, 2ul>)"
)
MUL = (
    "void at::native::vectorized_elementwise_kernel<4, at::native::BinaryFunctor<c10::BFloat16, c10::BFloat16, "
    "c10::BFloat16, at::native::binary_internal::MulFunctor<float> >, std::array<char*, 3ul> >(int, "
    "at::native::BinaryFunctor<c10::BFloat16, c10::BFloat16, c10::BFloat16, "
    "at::native::binary_internal::MulFunctor<float> >, std::array<char*, 3ul>)"
)
ADD = (
    "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>, "
    "std::array<char*, 3ul> >(int, at::native::CUDAFunctor_add<c10::BFloat16>, std::array<char*, 3ul>)"
)
GEMM = "nvjet_tst_128x256_64x4_2x1_v_bz_TNN"
BMM = "ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_stages_64x3_nn"
SOFTMAX = (
    "void at::native::(anonymous namespace)::cunn_SoftMaxForward<8, c10::BFloat16, float, c10::BFloat16, "
    "at::native::(anonymous namespace)::SoftMaxForwardEpilogue>(c10::BFloat16*, c10::BFloat16 const*, int)"
)
LAYER_NORM = (
    "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<c10::BFloat16, float>(int, "
    "float, c10::BFloat16 const*, c10::BFloat16 const*, c10::BFloat16 const*, float*, float*, "
    "c10::BFloat16*)"
)
GATHER = (
    "void at::native::_scatter_gather_elementwise_kernel<128, 4, at::native::_cuda_scatter_gather_internal_"
    "kernel<false, c10::BFloat16>::operator()(at::TensorIterator&, long, long, long, "
    "at::native::ReduceMultiply const&)::{lambda(int)#1}>(int, {lambda(int)#1})"
)
SUM = (
    "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<c10::BFloat16, at::native::func_wrapper_t<"
    "c10::BFloat16, at::native::sum_functor<c10::BFloat16, float, c10::BFloat16>::operator()("
    "at::TensorIterator&)::{lambda(float, float)#1}>, unsigned int, c10::BFloat16, 4, 4> >(at::native::ReduceOp<"
    "c10::BFloat16, at::native::func_wrapper_t<c10::BFloat16, at::native::sum_functor<c10::BFloat16, float, "
    "c10::BFloat16>::operator()(at::TensorIterator&)::{lambda(float, float)#1}>, unsigned int, c10::BFloat16, "
    "4, 4>)"
)
TOPK = (
    "void at::native::sbtopk::gatherTopK<c10::BFloat16, unsigned int, 2, false>(at::cuda::detail::TensorInfo<"
    "c10::BFloat16 const, unsigned int>, unsigned int, unsigned int, bool, unsigned int, unsigned int)"
)
NOISE = (
    "void at::native::(anonymous namespace)::distribution_elementwise_grid_stride_kernel<float, 4, "
    "at::native::templates::cuda::normal_and_transform<c10::BFloat16, float>(at::TensorIteratorBase&, "
    "at::CUDAGeneratorImpl*, {lambda(float)#1})::{lambda(curandStatePhilox4_32_10*)#2}>(long, "
    "std::pair<unsigned long, unsigned long>, {lambda(curandStatePhilox4_32_10*)#2})"
)
GROUP_NORM = (
    "void at::native::(anonymous namespace)::RowwiseMomentsCUDAKernel<c10::BFloat16>(long, float, "
    "c10::BFloat16 const*, float*, float*)"
)
CONV = (
    "sm80_xmma_fprop_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nhwc_tilesize128x128x32_stage4_warpsize2x2x1_"
    "g1_tensor16x8x16_kernel"
)
V_ROPE = (
    "void vllm::rotary_embedding_kernel<c10::BFloat16, true>(long const*, c10::BFloat16*, c10::BFloat16*, "
    "c10::BFloat16 const*, int, long, long, long, int, int, int)"
)
V_CACHE = (
    "void vllm::reshape_and_cache_flash_kernel<__nv_bfloat16, __nv_bfloat16, (vllm::Fp8KVCacheDataType)0>("
    "__nv_bfloat16 const*, __nv_bfloat16 const*, __nv_bfloat16*, __nv_bfloat16*, long const*, long, long, "
    "long, long, int, int, int, float const*, float const*)"
)
V_FLASH = (
    "void flash::flash_fwd_splitkv_kernel<Flash_fwd_kernel_traits<128, 64, 128, 4, false, false, "
    "cutlass::bfloat16_t, Flash_kernel_traits<128, 64, 128, 4, cutlass::bfloat16_t> >, true, false, false, "
    "false, true, true, false, false>(flash::Flash_fwd_params)"
)
V_FUSED_ADD_RMS = (
    "std::enable_if<(((8)>(0)))&&vllm::_typeConvert<c10::BFloat16>::exists, void>::type "
    "vllm::fused_add_rms_norm_kernel<c10::BFloat16, 8>(c10::BFloat16*, long, c10::BFloat16*, "
    "c10::BFloat16 const*, float, int, int)"
)
V_RMS = (
    "void vllm::rms_norm_kernel<c10::BFloat16, 8, 2>(c10::BFloat16*, long, c10::BFloat16 const*, "
    "c10::BFloat16 const*, float, int, int)"
)
V_ACT_AND_MUL = (
    "void vllm::act_and_mul_kernel<c10::BFloat16, &(c10::BFloat16 vllm::silu_kernel<c10::BFloat16>("
    "c10::BFloat16 const&)), true>(c10::BFloat16*, c10::BFloat16 const*, int)"
)


class Eager:
    """Eager launches one after the other: each op a host range with one launch inside it (so the op is the
    kernel's launching op, with its Input Dims); the GPU runs them back to back on one stream."""

    def __init__(self, tl: Timeline, *, stream: int = 7):
        self.tl, self.stream = tl, stream
        self.host = 10 * US
        self.gpu = 0
        self.acts: list[tuple[str, int]] = []  # (kernel name, dur) in launch order

    def op(self, op: str, dims: list, kernel: str, dur: int) -> None:
        tl, h = self.tl, self.host
        tl.op(op, h, h + 6 * US, args={"Input Dims": dims})
        start = max(self.gpu, h + 5 * US)
        tl.launch(kernel, h + 1 * US, start, dur, stream=self.stream, call_dur=3 * US)
        self.gpu = start + dur
        self.acts.append((kernel, dur))
        self.host = h + 8 * US


def _step(tl: Timeline, seq: Eager, n: int, body) -> None:
    """ProfilerStep#n around what `body(seq)` launches (a python frame of the model's forward around it)."""
    s0 = seq.host
    ann = tl.op(f"ProfilerStep#{n}", s0 - 2 * US, 0, cat="user_annotation")
    frame_file, frame = getattr(body, "frame", ("model.py", 10))
    body(seq)
    ann.end = max(seq.host, seq.gpu) + 20 * US
    tl.frame(frame_file, frame, getattr(body, "func", "forward"), s0 - 1 * US, seq.host)
    seq.host = ann.end + 30 * US


@situation(
    "fusion-gelu-mlp",
    "plain PyTorch encoder (GELU MLP, no gate) whose script lives in a folder named vllm_experiments: "
    "GELU followed by a scalar mul, attention scaling muls, a gather followed by a sum, a 4-D softmax",
)
def gelu_mlp(out: Path) -> dict:
    tl = Timeline()
    B, S, H, NH, D, I = 8, 128, 768, 12, 64, 3072
    layers, steps = 2, 2

    def body(seq: Eager) -> None:
        for _ in range(layers):
            seq.op("aten::addmm", [[3 * H], [B * S, H], [H, 3 * H], [], []], GEMM, 30 * US)
            seq.op("aten::mul", [[B, NH, S, D], []], MUL, 4 * US)  # q * scale
            seq.op("aten::bmm", [[B * NH, S, D], [B * NH, D, S]], BMM, 12 * US)
            seq.op("aten::_softmax", [[B, NH, S, S], [], []], SOFTMAX, 9 * US)
            seq.op("aten::bmm", [[B * NH, S, S], [B * NH, S, D]], BMM, 12 * US)
            seq.op("aten::addmm", [[H], [B * S, H], [H, H], [], []], GEMM, 10 * US)
            seq.op("aten::add", [[B, S, H], [B, S, H], []], ADD, 3 * US)
            seq.op("aten::native_layer_norm", [[B, S, H], [], [H], [H], []], LAYER_NORM, 5 * US)
            seq.op("aten::addmm", [[I], [B * S, H], [H, I], [], []], GEMM, 40 * US)
            seq.op("aten::gelu", [[B, S, I], []], GELU, 8 * US)
            seq.op("aten::mul", [[B, S, I], []], MUL, 6 * US)  # a scalar scale, not a gate
            seq.op("aten::addmm", [[H], [B * S, I], [I, H], [], []], GEMM, 40 * US)
            seq.op("aten::add", [[B, S, H], [B, S, H], []], ADD, 3 * US)
            seq.op("aten::native_layer_norm", [[B, S, H], [], [H], [H], []], LAYER_NORM, 5 * US)
        # pooling by gather then sum: an index + sum of a dense model is not a MoE finalize
        seq.op("aten::gather", [[B, S, H], [], [B, 4, H]], GATHER, 3 * US)
        seq.op("aten::sum", [[B, 4, H], [], [], []], SUM, 3 * US)

    body.frame = ("/home/user/vllm_experiments/bert_train.py", 88)  # type: ignore[attr-defined]
    seq = Eager(tl)
    for n in range(steps):
        _step(tl, seq, n, body)
    tl.write(out / "rank-0.pt.trace.json.gz")
    return {"fusion": {"framework": "pytorch", "rows": {}}}


@situation(
    "fusion-gated-mlp",
    "plain PyTorch decoder with a merged gate/up projection: silu(gate) then the gate product mul, "
    "adjacent, in every layer; attention scaling muls elsewhere",
)
def gated_mlp(out: Path) -> dict:
    tl = Timeline()
    T, H, NH, D, I = 1024, 2048, 16, 128, 5632
    layers, steps = 3, 2
    silu_dur, mul_dur = 11 * US, 13 * US

    def body(seq: Eager) -> None:
        for _ in range(layers):
            seq.op("aten::mm", [[T, H], [H, 3 * H]], GEMM, 30 * US)
            seq.op("aten::mul", [[1, NH, T, D], []], MUL, 4 * US)  # attention scaling
            seq.op("aten::bmm", [[NH, T, D], [NH, D, T]], BMM, 12 * US)
            seq.op("aten::_softmax", [[1, NH, T, T], [], []], SOFTMAX, 9 * US)
            seq.op("aten::bmm", [[NH, T, T], [NH, T, D]], BMM, 12 * US)
            seq.op("aten::mm", [[T, H], [H, H]], GEMM, 10 * US)
            seq.op("aten::mm", [[T, H], [H, 2 * I]], GEMM, 50 * US)  # merged gate_up
            seq.op("aten::silu", [[T, I]], SILU, silu_dur)  # on the gate half
            seq.op("aten::mul", [[T, I], [T, I]], MUL, mul_dur)  # act(gate) * up
            seq.op("aten::mm", [[T, I], [I, H]], GEMM, 50 * US)

    seq = Eager(tl)
    for n in range(steps):
        _step(tl, seq, n, body)
    tl.write(out / "rank-0.pt.trace.json.gz")
    chains = layers * steps
    return {
        "fusion": {
            "framework": "pytorch",
            "rows": {
                "sgl_act_and_mul": {
                    "status": "Confirmed",
                    "occurrences": chains,
                    "chains_near": 0,
                    "related_gpu_time_ns": chains * (silu_dur + mul_dur),
                    "pattern_framework": "generic",
                    "evidence_basis": "ops",
                    "evidence_ops": f"aten::silu [[{T},{I}]] -> aten::mul [[{T},{I}],[{T},{I}]]",
                }
            },
        }
    }


@situation(
    "fusion-gqa-vllm",
    "vLLM eager decode of a GQA model: RoPE then reshape_and_cache_flash (a GQA cache store, not MLA), "
    "fused_add_rms_norm and act_and_mul already fused",
)
def gqa_vllm(out: Path) -> dict:
    tl = Timeline()
    T, H, KV, D, I = 64, 4096, 8, 128, 14336
    layers, steps = 3, 2
    fused_norm_dur, act_dur = 5 * US, 7 * US

    def body(seq: Eager) -> None:
        for _ in range(layers):
            seq.op("_C::fused_add_rms_norm", [[T, H], [T, H], [H], []], V_FUSED_ADD_RMS, fused_norm_dur)
            seq.op("aten::mm", [[T, H], [H, H + 2 * KV * D]], GEMM, 20 * US)
            seq.op("_C::rotary_embedding", [[T], [T, H], [T, KV * D], [], [4096, D], []], V_ROPE, 3 * US)
            seq.op(
                "_C_cache_ops::reshape_and_cache_flash",
                [[T, KV, D], [T, KV, D], [2048, 16, KV, D], [2048, 16, KV, D], [T], [], [], []],
                V_CACHE,
                2 * US,
            )
            seq.op("vllm::unified_attention", [[T, 32, D], [T, KV, D], [T, KV, D]], V_FLASH, 25 * US)
            seq.op("aten::mm", [[T, H], [H, H]], GEMM, 10 * US)
            seq.op("_C::fused_add_rms_norm", [[T, H], [T, H], [H], []], V_FUSED_ADD_RMS, fused_norm_dur)
            seq.op("aten::mm", [[T, H], [H, 2 * I]], GEMM, 40 * US)
            seq.op("_C::silu_and_mul", [[T, I], [T, 2 * I]], V_ACT_AND_MUL, act_dur)
            seq.op("aten::mm", [[T, I], [I, H]], GEMM, 40 * US)

    body.frame = ("vllm/model_executor/models/llama.py", 330)  # type: ignore[attr-defined]
    seq = Eager(tl)
    for n in range(steps):
        _step(tl, seq, n, body)
    tl.write(out / "rank-0.pt.trace.json.gz")
    n = layers * steps
    return {
        "fusion": {
            "framework": "vllm",
            "rows": {
                "vllm_fused_add_rms_norm": {
                    "status": "Fused",
                    "occurrences": 2 * n,
                    "chains_near": 0,
                    "related_gpu_time_ns": 2 * n * fused_norm_dur,
                    "pattern_framework": "vllm",
                    "evidence_basis": None,
                },
                "vllm_act_and_mul": {
                    "status": "Fused",
                    "occurrences": n,
                    "chains_near": 0,
                    "related_gpu_time_ns": n * act_dur,
                    "pattern_framework": "vllm",
                    "evidence_basis": None,
                },
            },
        }
    }


@situation(
    "fusion-piecewise-graph",
    "vLLM piecewise CUDA graphs: each piece ends with the residual add and the next piece starts with "
    "rms_norm (adjacent on the stream, but across a graph boundary); inside a piece silu then mul",
)
def piecewise_graph(out: Path) -> dict:
    tl = Timeline()
    pieces, steps = 3, 2
    silu_dur, mul_dur = 6 * US, 7 * US
    host = 10 * US
    gpu = 40 * US
    for n in range(steps):
        ann = tl.op(f"ProfilerStep#{n}", host - 2 * US, 0, cat="user_annotation")
        s0 = host
        for p in range(pieces):
            kernels = []
            for name, dur in (
                (V_RMS, 4 * US),
                (GEMM, 30 * US),
                (SILU, silu_dur),
                (MUL, mul_dur),
                (GEMM, 30 * US),
                (ADD, 3 * US),
            ):
                kernels.append((name, 7, gpu, dur))
                gpu += dur
            tl.graph(host, kernels)
            host += 20 * US
        tl.frame("vllm/v1/worker/gpu_model_runner.py", 2100, "execute_model", s0 - 1 * US, host)
        ann.end = max(host, gpu) + 20 * US
        host = ann.end + 30 * US
        gpu = host + 30 * US
    tl.write(out / "rank-0.pt.trace.json.gz")
    n = pieces * steps
    # the add -> rms_norm pairs straddle graph boundaries: no chain at all, so no add + RMSNorm row
    return {
        "fusion": {
            "framework": "vllm",
            "rows": {
                "vllm_act_and_mul": {
                    "status": "Confirmed",
                    "occurrences": n,
                    "chains_near": 0,
                    "related_gpu_time_ns": n * (silu_dur + mul_dur),
                    "pattern_framework": "vllm",
                    "evidence_basis": "kernel names",
                }
            },
        }
    }


@situation(
    "fusion-diffusion",
    "plain PyTorch diffusion UNet step: group norm, SiLU then conv, attention softmax over 4-D scores "
    "followed by top-k token merging, and the scheduler's Gaussian noise",
)
def diffusion(out: Path) -> dict:
    tl = Timeline()
    B, C, HW, NH, D = 2, 320, 4096, 8, 40
    blocks, steps = 2, 2

    def body(seq: Eager) -> None:
        for _ in range(blocks):
            seq.op(
                "aten::native_group_norm", [[B, C, 64, 64], [C], [C], [], [], [], [], []], GROUP_NORM, 6 * US
            )
            seq.op("aten::silu", [[B, C, 64, 64]], SILU, 5 * US)
            seq.op(
                "aten::cudnn_convolution", [[B, C, 64, 64], [C, C, 3, 3], [], [], [], [], []], CONV, 40 * US
            )
            seq.op("aten::add", [[B, C, 64, 64], [B, C, 64, 64], []], ADD, 3 * US)
            seq.op("aten::bmm", [[B * NH, HW, D], [B * NH, D, HW]], BMM, 30 * US)
            seq.op("aten::_softmax", [[B, NH, HW, HW], [], []], SOFTMAX, 20 * US)
            seq.op("aten::topk", [[B, HW, HW], [], [], [], []], TOPK, 8 * US)  # token merging
            seq.op("aten::normal_", [[B, C, 64, 64], [], [], []], NOISE, 4 * US)
            seq.op("aten::bmm", [[B * NH, HW, HW], [B * NH, HW, D]], BMM, 30 * US)
        seq.op("aten::normal_", [[B, 4, 64, 64], [], [], []], NOISE, 2 * US)  # scheduler noise

    seq = Eager(tl)
    for n in range(steps):
        _step(tl, seq, n, body)
    tl.write(out / "rank-0.pt.trace.json.gz")
    return {"fusion": {"framework": "pytorch", "rows": {}}}

"""Category situations: a kernel's category can depend on the op that launched it and that op's shapes.

Each situation lays out eager-mode ops (`cpu_op` ranges with `Input Dims`, nested as PyTorch records them:
aten::matmul around aten::bmm, aten::softmax around aten::_softmax ...) and the kernels they launch, and
returns as ground truth the category of every GPU activity (in GPU start order) and the GPU time per
category. The same kernel symbol (a cuBLAS GEMM, an elementwise copy, indexSelectLargeIndex) appears under
different ops on purpose: a correct analysis files it by the op (sql/kernels/activity_category.sql).
"""

from __future__ import annotations

from pathlib import Path

from . import situation
from .timeline import Timeline

US = 1_000
MS = 1_000_000

GEMM_SM90 = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas"
NVJET = "nvjet_tst_128x256_64x4_1x2_h_bz_TNT"
AMPERE_GEMM = "ampere_fp16_s16816gemm_fp16_128x128_ldg8_f2f_stages_32x5_nn"
SOFTMAX = "void (anonymous namespace)::cunn_SoftMaxForward<4, float, float, float, (anonymous namespace)::SoftMaxForwardEpilogue>(float*, float const*, int)"
MUL = (
    "void at::native::vectorized_elementwise_kernel<4, at::native::BinaryFunctor<c10::BFloat16, c10::BFloat16, "
    "c10::BFloat16, at::native::binary_internal::MulFunctor<float> >, std::array<char*, 3ul> >(int, "
    "at::native::BinaryFunctor<c10::BFloat16, c10::BFloat16, c10::BFloat16, at::native::binary_internal::"
    "MulFunctor<float> >, std::array<char*, 3ul>)"
)
ADD = (
    "void at::native::elementwise_kernel<128, 2, at::native::gpu_kernel_impl_nocast<at::native::"
    "CUDAFunctor_add<c10::BFloat16> >(at::TensorIteratorBase&, at::native::CUDAFunctor_add<c10::BFloat16> const&)"
    "::{lambda(int)#1}>(int, at::native::gpu_kernel_impl_nocast<at::native::CUDAFunctor_add<c10::BFloat16> >"
    "(at::TensorIteratorBase&, at::native::CUDAFunctor_add<c10::BFloat16> const&)::{lambda(int)#1})"
)
COPY = (
    "void at::native::elementwise_kernel<128, 4, at::native::gpu_kernel_impl_nocast<at::native::"
    "direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}::operator()() const::{lambda()#7}::"
    "operator()() const::{lambda(c10::BFloat16)#1}> >(int, at::native::gpu_kernel_impl_nocast<at::native::"
    "direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}::operator()() const::{lambda()#7}::"
    "operator()() const::{lambda(c10::BFloat16)#1}>)"
)
GELU = (
    "void at::native::vectorized_elementwise_kernel<4, at::native::GeluCUDAKernelImpl(at::TensorIteratorBase&, "
    "at::native::GeluType)::{lambda()#2}::operator()() const::{lambda()#4}::operator()() const::"
    "{lambda(c10::BFloat16)#1}, std::array<char*, 2ul> >(int, at::native::GeluCUDAKernelImpl("
    "at::TensorIteratorBase&, at::native::GeluType)::{lambda()#2}::operator()() const::{lambda()#4}::"
    "operator()() const::{lambda(c10::BFloat16)#1}, std::array<char*, 2ul>)"
)
LAYER_NORM = "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<c10::BFloat16, float>(int, float, c10::BFloat16 const*, c10::BFloat16 const*, c10::BFloat16 const*, float*, float*, c10::BFloat16*)"
FLASH = (
    "void pytorch_flash::flash_fwd_kernel<pytorch_flash::Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, "
    "cutlass::bfloat16_t, pytorch_flash::Flash_kernel_traits<128, 128, 64, 4, cutlass::bfloat16_t> >, false, "
    "true, false, false, false, true, false, false>(pytorch_flash::Flash_fwd_params)"
)
INDEX_SELECT = (
    "void at::native::(anonymous namespace)::indexSelectLargeIndex<c10::BFloat16, long, unsigned int, 2, 2, "
    "-2, true>(at::cuda::detail::TensorInfo<c10::BFloat16, unsigned int>, at::cuda::detail::TensorInfo<"
    "c10::BFloat16 const, unsigned int>, at::cuda::detail::TensorInfo<long const, unsigned int>, int, int, "
    "unsigned int, unsigned int, long)"
)


class Eager:
    """Eager ops laid out one after another on the main thread, each launching its kernels on stream 7.

    `run(chain, kernels)`: chain = [(op name, Input Dims or None), ...] from the outermost op to the innermost
    (nested as PyTorch records them); kernels = [(name, dur_ns, expected category[, kind]), ...] launched from
    inside the innermost op. The GPU runs them in launch order; `acts` keeps (name, category, dur) in GPU
    start order, the ground truth."""

    def __init__(self, tl: Timeline):
        self.tl = tl
        self.host = 20 * US
        self.gpu = 60 * US
        self.acts: list[tuple[str, str, int]] = []

    def run(self, chain: list[tuple[str, list | None]], kernels: list[tuple]) -> None:
        start = self.host
        depth = len(chain)
        host = start + depth * 500 + 1 * US
        for k in kernels:
            name, dur, category = k[:3]
            kind = k[3] if len(k) > 3 else "kernel"
            gpu = max(self.gpu, host + 5 * US)
            self.tl.launch(name, host, gpu, dur, stream=7, kind=kind, call_dur=3 * US)
            self.acts.append((name, category, dur))
            self.gpu = gpu + dur + 1 * US
            host += 6 * US
        end = host + 2 * US
        for level, (name, dims) in enumerate(chain):
            args = {"Input Dims": dims} if dims is not None else {}
            self.tl.op(name, start + level * 500, end + (depth - level) * 300, args=args)
        self.host = end + depth * 300 + 4 * US

    def expect(self) -> dict:
        per_cat: dict[str, int] = {}
        for _, category, dur in self.acts:
            per_cat[category] = per_cat.get(category, 0) + dur
        return {
            "activity_categories": [[i, name, category] for i, (name, category, _) in enumerate(self.acts)],
            "category_gpu_ns": per_cat,
        }


def write_eager(tl: Timeline, e: Eager, out: Path) -> dict:
    step = tl.op("ProfilerStep#1", 0, e.host + 10 * US, cat="user_annotation")
    step.end = max(e.host, e.gpu) + 10 * US
    tl.write(out / "rank-0.pt.trace.json.gz")
    return e.expect()


def linear(e: Eager, tokens: int, d_in: int, d_out: int, kernel: str = GEMM_SM90, dur: int = 40 * US) -> None:
    e.run(
        [
            ("aten::linear", [[tokens, d_in], [d_out, d_in], [d_out]]),
            ("aten::addmm", [[d_out], [tokens, d_in], [d_in, d_out], [], []]),
        ],
        [(kernel, dur, "gemm")],
    )


@situation(
    "eager-vit-attention",
    "a ViT block in eager mode (B=2, H=12, S=197, D=64): QK^T and PV as aten::matmul/bmm, scaling and "
    "softmax over the [B, H, S, S] scores; the same cuBLAS kernel also runs the linear layers",
)
def eager_vit_attention(out: Path) -> dict:
    tl = Timeline()
    e = Eager(tl)
    b, h, s, d = 2, 12, 197, 64
    e.run(
        [
            ("aten::layer_norm", [[b, s, h * d], [h * d], [h * d], [], []]),
            ("aten::native_layer_norm", [[b, s, h * d], [], [h * d], [h * d], []]),
        ],
        [(LAYER_NORM, 6 * US, "norm")],
    )
    linear(e, b * s, h * d, 3 * h * d, dur=60 * US)
    # scores = q @ k^T: a 4-D matmul that PyTorch runs as a bmm over B*H
    e.run(
        [("aten::matmul", [[b, h, s, d], [b, h, d, s]]), ("aten::bmm", [[b * h, s, d], [b * h, d, s]])],
        [(GEMM_SM90, 30 * US, "attention")],
    )
    e.run([("aten::mul", [[b, h, s, s], []])], [(MUL, 9 * US, "attention")])
    e.run(
        [("aten::softmax", [[b, h, s, s], [], []]), ("aten::_softmax", [[b, h, s, s], [], []])],
        [(SOFTMAX, 25 * US, "attention")],
    )
    e.run(
        [("aten::matmul", [[b, h, s, s], [b, h, s, d]]), ("aten::bmm", [[b * h, s, s], [b * h, s, d]])],
        [(GEMM_SM90, 28 * US, "attention")],
    )
    linear(e, b * s, h * d, h * d, dur=20 * US)
    # a bmm over the same batch count that is no attention: nothing of its shape was a softmax's scores
    e.run([("aten::bmm", [[b * h, 50, 8], [b * h, 8, 50]])], [(GEMM_SM90, 5 * US, "gemm")])
    linear(e, b * s, h * d, 4 * h * d, dur=80 * US)
    e.run([("aten::gelu", [[b, s, 4 * h * d], []])], [(GELU, 12 * US, "activation")])
    linear(e, b * s, 4 * h * d, h * d, dur=80 * US)
    # the classifier's softmax is 2-D: an activation, not attention
    e.run(
        [("aten::softmax", [[b, 1000], [], []]), ("aten::_softmax", [[b, 1000], [], []])],
        [(SOFTMAX, 3 * US, "activation")],
    )
    return write_eager(tl, e, out)


@situation(
    "gqa-attention",
    "a GQA decoder layer (Hq=32, Hkv=8, S=512, D=128) twice: eager (repeat_kv, matmul, mask add, softmax, "
    "cast, matmul) and through F.scaled_dot_product_attention (flash, with a contiguous copy inside)",
)
def gqa_attention(out: Path) -> dict:
    tl = Timeline()
    e = Eager(tl)
    b, hq, hkv, s, d = 1, 32, 8, 512, 128
    for _ in range(2):
        e.run(
            [
                ("aten::linear", [[b, s, hq * d], [hq * d, hq * d], []]),
                ("aten::mm", [[s, hq * d], [hq * d, hq * d]]),
            ],
            [(NVJET, 50 * US, "gemm")],
        )
        e.run(
            [
                ("aten::linear", [[b, s, hq * d], [hkv * d, hq * d], []]),
                ("aten::mm", [[s, hq * d], [hq * d, hkv * d]]),
            ],
            [(NVJET, 14 * US, "gemm")],
        )
    # layer 1, eager: K/V repeated to 32 heads (a copy: elementwise), then the score tensor [1, 32, 512, 512]
    e.run(
        [
            ("aten::reshape", [[b, hkv, 4, s, d], []]),
            ("aten::clone", [[b, hkv, 4, s, d], []]),
            ("aten::copy_", [[b, hkv, 4, s, d], [b, hkv, 4, s, d], []]),
        ],
        [(COPY, 8 * US, "elementwise")],
    )
    e.run(
        [("aten::matmul", [[b, hq, s, d], [b, hq, d, s]]), ("aten::bmm", [[b * hq, s, d], [b * hq, d, s]])],
        [(NVJET, 35 * US, "attention")],
    )
    e.run([("aten::add", [[b, hq, s, s], [b, 1, s, s], []])], [(ADD, 12 * US, "attention")])
    e.run(
        [("aten::softmax", [[b, hq, s, s], [], []]), ("aten::_softmax", [[b, hq, s, s], [], []])],
        [(SOFTMAX, 30 * US, "attention")],
    )
    e.run(
        [
            ("aten::to", [[b, hq, s, s], [], [], [], [], [], [], []]),
            ("aten::_to_copy", [[b, hq, s, s], [], [], [], [], [], []]),
            ("aten::copy_", [[b, hq, s, s], [b, hq, s, s], []]),
        ],
        [(COPY, 10 * US, "attention")],
    )
    e.run(
        [("aten::matmul", [[b, hq, s, s], [b, hq, s, d]]), ("aten::bmm", [[b * hq, s, s], [b * hq, s, d]])],
        [(NVJET, 35 * US, "attention")],
    )
    e.run(
        [
            ("aten::linear", [[b, s, hq * d], [hq * d, hq * d], []]),
            ("aten::mm", [[s, hq * d], [hq * d, hq * d]]),
        ],
        [(NVJET, 50 * US, "gemm")],
    )
    # layer 2, SDPA with enable_gqa: everything inside it is the attention op
    e.run(
        [
            (
                "aten::scaled_dot_product_attention",
                [[b, hq, s, d], [b, hkv, s, d], [b, hkv, s, d], [], [], [], [], []],
            ),
            (
                "aten::_scaled_dot_product_flash_attention",
                [[b, hq, s, d], [b, hkv, s, d], [b, hkv, s, d], [], [], [], []],
            ),
        ],
        [(COPY, 4 * US, "attention")],
    )
    e.run(
        [
            (
                "aten::scaled_dot_product_attention",
                [[b, hq, s, d], [b, hkv, s, d], [b, hkv, s, d], [], [], [], [], []],
            ),
            (
                "aten::_scaled_dot_product_flash_attention",
                [[b, hq, s, d], [b, hkv, s, d], [b, hkv, s, d], [], [], [], []],
            ),
            (
                "aten::_flash_attention_forward",
                [[s, hq, d], [s, hkv, d], [s, hkv, d], [], [], [], [], [], [], [], []],
            ),
        ],
        [(FLASH, 45 * US, "attention")],
    )
    e.run(
        [
            ("aten::linear", [[b, s, hq * d], [hq * d, hq * d], []]),
            ("aten::mm", [[s, hq * d], [hq * d, hq * d]]),
        ],
        [(NVJET, 50 * US, "gemm")],
    )
    return write_eager(tl, e, out)


@situation(
    "diffusion-attention",
    "a diffusion UNet transformer block: conv, group norm, self-attention through SDPA (memory-efficient "
    "kernel) and cross-attention (4096 image tokens x 77 text tokens) through SDPA's math fallback "
    "(bmm, softmax over [2, 8, 4096, 77]), GEGLU feed-forward",
)
def diffusion_attention(out: Path) -> dict:
    tl = Timeline()
    e = Eager(tl)
    b, h, sq, sk, d = 2, 8, 4096, 77, 40
    e.run(
        [
            ("aten::conv2d", [[b, 320, 64, 64], [320, 320, 3, 3], [320], [], [], [], []]),
            ("aten::convolution", [[b, 320, 64, 64], [320, 320, 3, 3], [320], [], [], [], [], [], []]),
            ("aten::cudnn_convolution", [[b, 320, 64, 64], [320, 320, 3, 3], [], [], [], [], [], [], []]),
        ],
        [
            (
                "sm80_xmma_fprop_implicit_gemm_f16f16_f16f32_f32_nhwckrsc_nhwc_tilesize128x128x32_stage4_warpsize2x2x1_g1_tensor16x8x16_kernel",
                90 * US,
                "convolution",
            )
        ],
    )
    e.run(
        [
            ("aten::group_norm", [[b, 320, 64, 64], [], [320], [320], [], []]),
            ("aten::native_group_norm", [[b, 320, 64, 64], [320], [320], [], [], [], [], []]),
        ],
        [
            (
                "void at::native::(anonymous namespace)::RowwiseMomentsCUDAKernel<c10::Half, float>(long, float, c10::Half const*, float*, float*)",
                8 * US,
                "norm",
            )
        ],
    )
    e.run(
        [
            (
                "aten::scaled_dot_product_attention",
                [[b, h, sq, d], [b, h, sq, d], [b, h, sq, d], [], [], [], [], []],
            ),
            (
                "aten::_scaled_dot_product_efficient_attention",
                [[b, h, sq, d], [b, h, sq, d], [b, h, sq, d], [], [], [], [], []],
            ),
            (
                "aten::_efficient_attention_forward",
                [[b, sq, h, d], [b, sq, h, d], [b, sq, h, d], [], [], [], [], [], [], [], [], [], []],
            ),
        ],
        [
            (
                "fmha_cutlassF_f16_aligned_64x64_rf_sm80(PyTorchMemEffAttention::AttentionKernel<cutlass::half_t, cutlass::arch::Sm80, true, 64, 64, 64, true, true>::Params)",
                160 * US,
                "attention",
            )
        ],
    )
    # cross-attention through the math fallback: its bmm and softmax kernels are the attention
    sdpa = (
        "aten::scaled_dot_product_attention",
        [[b, h, sq, d], [b, h, sk, d], [b, h, sk, d], [], [], [], [], []],
    )
    math = (
        "aten::_scaled_dot_product_attention_math",
        [[b, h, sq, d], [b, h, sk, d], [b, h, sk, d], [], [], [], [], []],
    )
    e.run([sdpa, math, ("aten::mul", [[b, h, sq, d], []])], [(MUL, 6 * US, "attention")])
    e.run(
        [
            sdpa,
            math,
            ("aten::matmul", [[b, h, sq, d], [b, h, d, sk]]),
            ("aten::bmm", [[b * h, sq, d], [b * h, d, sk]]),
        ],
        [(AMPERE_GEMM, 20 * US, "attention")],
    )
    e.run([sdpa, math, ("aten::_softmax", [[b, h, sq, sk], [], []])], [(SOFTMAX, 14 * US, "attention")])
    e.run(
        [
            sdpa,
            math,
            ("aten::matmul", [[b, h, sq, sk], [b, h, sk, d]]),
            ("aten::bmm", [[b * h, sq, sk], [b * h, sk, d]]),
        ],
        [(AMPERE_GEMM, 18 * US, "attention")],
    )
    e.run(
        [
            ("aten::linear", [[b, sq, 320], [2560, 320], [2560]]),
            ("aten::addmm", [[2560], [b * sq, 320], [320, 2560], [], []]),
        ],
        [(AMPERE_GEMM, 70 * US, "gemm")],
    )
    e.run([("aten::gelu", [[b, sq, 1280], []])], [(GELU, 15 * US, "activation")])
    e.run([("aten::mul", [[b, sq, 1280], [b, sq, 1280]])], [(MUL, 10 * US, "elementwise")])
    return write_eager(tl, e, out)


@situation(
    "sage-attention",
    "SageAttention: Q/K per-block INT8 quantization inside the sageattn op, the sage_fwd attention kernel, "
    "a SageAttention2 qk_int8_sv_f8 kernel, and a quantization kernel of the same name outside it",
)
def sage_attention(out: Path) -> dict:
    tl = Timeline()
    e = Eager(tl)
    quant = "quant_per_block_int8_kernel"
    e.run(
        [("sageattention::sageattn", [[1, 24, 4096, 64], [1, 24, 4096, 64], [1, 24, 4096, 64]])],
        [
            (quant, 6 * US, "attention"),
            (quant, 6 * US, "attention"),
            ("sage_fwd_kernel", 120 * US, "attention"),
        ],
    )
    e.run(
        [
            (
                "sageattention::qk_int8_sv_f8_accum_f32_attn_inst_buf",
                [[1, 24, 4096, 64], [1, 24, 4096, 64], [1, 24, 4096, 64]],
            )
        ],
        [
            (
                "void qk_int8_sv_f8_accum_f32_attn_inst_buf_kernel<128, 64, 128, 64>(int8_t*, int8_t*, __nv_fp8_e4m3*)",
                100 * US,
                "attention",
            )
        ],
    )
    # the same quantization kernel quantizing a linear layer's activations is quantize
    e.run([("fp8_linear::quantize", [[4096, 1536]])], [(quant, 5 * US, "quantize")])
    e.run(
        [("aten::linear", [[4096, 1536], [1536, 1536], []]), ("aten::mm", [[4096, 1536], [1536, 1536]])],
        [(GEMM_SM90, 40 * US, "gemm")],
    )
    return write_eager(tl, e, out)


@situation(
    "inductor-sdpa-pointwise",
    "a torch.compile'd attention block: pointwise Triton kernels whose fused names list "
    "_scaled_dot_product_flash_attention (views, transposes, casts: elementwise), the flash kernel of the "
    "SDPA extern call, an RMSNorm reduction and Inductor's max-autotune GEMM templates",
)
def inductor_sdpa_pointwise(out: Path) -> dict:
    tl = Timeline()
    e = Eager(tl)
    e.run(
        [("Torch-Compiled Region: 0/0", None)],
        [
            ("triton_red_fused__to_copy_add_mean_mul_pow_rsqrt_0", 7 * US, "norm"),
            ("triton_tem_fused_mm_1", 40 * US, "gemm"),
            ("triton_poi_fused__scaled_dot_product_flash_attention_transpose_view_2", 5 * US, "elementwise"),
            ("triton_poi_fused__scaled_dot_product_efficient_attention_add_clone_3", 4 * US, "elementwise"),
        ],
    )
    e.run(
        [
            ("Torch-Compiled Region: 0/0", None),
            (
                "aten::_scaled_dot_product_flash_attention",
                [[1, 16, 1024, 64], [1, 16, 1024, 64], [1, 16, 1024, 64], [], [], [], []],
            ),
        ],
        [(FLASH, 60 * US, "attention")],
    )
    e.run(
        [("Torch-Compiled Region: 0/0", None)],
        [
            ("triton_tem_fused_addmm_4", 30 * US, "gemm"),
            ("triton_poi_fused_add_mul_silu_5", 6 * US, "activation"),
            ("triton_tem_fused_convolution_6", 25 * US, "convolution"),
        ],
    )
    return write_eager(tl, e, out)


@situation(
    "embedding-index-select",
    "a token embedding (F.embedding: indexSelectLargeIndex) and its backward (radix sort + "
    "embedding_backward kernels), beside a plain index_select of the same kernel that is no embedding",
)
def embedding_index_select(out: Path) -> dict:
    tl = Timeline()
    e = Eager(tl)
    e.run(
        [
            ("aten::embedding", [[32000, 4096], [1, 512], [], [], []]),
            ("aten::index_select", [[32000, 4096], [], [512]]),
        ],
        [(INDEX_SELECT, 9 * US, "embedding")],
    )
    linear(e, 512, 4096, 4096)
    # an index_select of hidden states (e.g. MoE token gather): the same kernel, elementwise
    e.run([("aten::index_select", [[512, 4096], [], [256]])], [(INDEX_SELECT, 5 * US, "elementwise")])
    e.run(
        [
            ("autograd::engine::evaluate_function: EmbeddingBackward0", None),
            ("EmbeddingBackward0", None),
            ("aten::embedding_backward", [[1, 512, 4096], [1, 512], [], [], [], []]),
            ("aten::embedding_dense_backward", [[1, 512, 4096], [1, 512], [], [], []]),
        ],
        [
            (
                "void cub::CUB_200200_800_NS::DeviceRadixSortOnesweepKernel<cub::CUB_200200_800_NS::DeviceRadixSortPolicy<long, long, int>::Policy900, false, long, long, int, int, cub::CUB_200200_800_NS::detail::identity_decomposer_t>(int*, int*, long*, long*, long const*, long const*, int, int, int, cub::CUB_200200_800_NS::detail::identity_decomposer_t)",
                4 * US,
                "embedding",
            ),
            ("Memset (Device)", 2 * US, "memory", "memset"),
            (
                "void at::native::(anonymous namespace)::embedding_backward_feature_kernel<c10::BFloat16, float, long>(long const*, c10::BFloat16 const*, c10::BFloat16*, int, long, int, int)",
                20 * US,
                "embedding",
            ),
        ],
    )
    return write_eager(tl, e, out)


def _in_frames(e: Eager, frames: list[tuple[str, str]], body) -> None:
    """Run body() inside nested Python frames, outermost first: ("module", "LlamaRMSNorm_0") is an
    `nn.Module: LlamaRMSNorm_0` frame, ("frame", "file.py(12): forward") a python_function frame."""
    n = len(frames)
    s0 = e.host
    e.host += (n + 1) * 300
    body()
    end = e.host - 2 * US
    for level, (kind, label) in enumerate(frames):
        start, stop = s0 + level * 300, end + (n - level) * 200
        if kind == "module":
            e.tl.module(label, start, stop)
        else:
            file, rest = label.split("(", 1)
            line, func = rest.split("): ", 1)
            e.tl.frame(file, int(line), func, start, stop)
    e.host = end + n * 200 + 4 * US


@situation(
    "eager-rmsnorm-module",
    "a with_stack eager decoder: LlamaRMSNorm modules running as to/pow/mean/rsqrt/mul kernels (norm), an "
    "AdaLayerNorm whose nn.Linear is still a GEMM, and the same elementwise kernels outside a norm module",
)
def eager_rmsnorm_module(out: Path) -> dict:
    tl = Timeline()
    e = Eager(tl)
    x = [[1, 512, 4096]]
    pow_k = (
        "void at::native::vectorized_elementwise_kernel<4, at::native::(anonymous namespace)::pow_tensor_scalar_kernel_impl"
        "<float, float>(at::TensorIteratorBase&, float)::{lambda(float)#1}, std::array<char*, 2ul> >()"
    )
    mean_k = "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::MeanOps<float, float, float, float>, unsigned int, float, 4, 4> >()"
    rsqrt_k = "void at::native::vectorized_elementwise_kernel<4, at::native::rsqrt_kernel_cuda(at::TensorIteratorBase&)::{lambda()#2}::operator()() const::{lambda(float)#1}, std::array<char*, 2ul> >()"

    def rmsnorm() -> None:
        e.run(
            [("aten::to", x + [[]] * 4), ("aten::_to_copy", x + [[]] * 6), ("aten::copy_", [x[0], x[0], []])],
            [(COPY, 6 * US, "norm")],
        )
        e.run([("aten::pow", [x[0], []])], [(pow_k, 5 * US, "norm")])
        e.run([("aten::mean", [x[0], [], [], []])], [(mean_k, 7 * US, "norm")])
        e.run([("aten::add", [[1, 512, 1], [], []])], [(ADD, 2 * US, "norm")])
        e.run([("aten::rsqrt", [[1, 512, 1]])], [(rsqrt_k, 2 * US, "norm")])
        e.run([("aten::mul", [x[0], [1, 512, 1]])], [(MUL, 5 * US, "norm")])
        e.run([("aten::mul", [[4096], x[0]])], [(MUL, 5 * US, "norm")])

    norm_frames = [
        ("module", "LlamaRMSNorm_0"),
        ("frame", "transformers/models/llama/modeling_llama.py(70): forward"),
    ]
    _in_frames(e, norm_frames, rmsnorm)
    _in_frames(
        e,
        [("module", "Linear_0"), ("frame", "torch/nn/modules/linear.py(125): forward")],
        lambda: linear(e, 512, 4096, 4096),
    )
    # the same mul and add kernels in the MLP (no norm module around them): elementwise
    _in_frames(
        e,
        [("module", "LlamaMLP_0"), ("frame", "transformers/models/llama/modeling_llama.py(160): forward")],
        lambda: (
            e.run([("aten::mul", [[1, 512, 11008], [1, 512, 11008]])], [(MUL, 9 * US, "elementwise")]),
            e.run([("aten::add", [x[0], x[0], []])], [(ADD, 4 * US, "elementwise")]),
        ),
    )
    # an adaptive layer norm: its Linear (the innermost module of the GEMM) is a GEMM, its scale-shift the norm
    _in_frames(
        e,
        [("module", "AdaLayerNormZero_0"), ("frame", "diffusers/models/normalization.py(160): forward")],
        lambda: (
            _in_frames(
                e,
                [("module", "Linear_3"), ("frame", "torch/nn/modules/linear.py(125): forward")],
                lambda: linear(e, 2, 1536, 9216, dur=6 * US),
            ),
            e.run([("aten::mul", [[2, 4096, 1536], [2, 1, 1536]])], [(MUL, 8 * US, "norm")]),
        ),
    )
    _in_frames(e, norm_frames, rmsnorm)
    return write_eager(tl, e, out)

"""The training model's kernels (a dense decoder, data parallel): its launch sites, the NVIDIA kernels and
their AMD flavour (synth.catalog says what a catalogue entry is)."""

from __future__ import annotations

from .kernel import CIJK, TORCH, Kernel, kernel

# ---- training model (dense decoder, data parallel) ---------------------------------------------
TR = "/workspace/train/model.py"
T = {
    "norm": (TR, 88, "forward"),
    "qkv": (TR, 131, "forward"),
    "rope": (TR, 140, "apply_rotary"),
    "attn": (TR, 152, "forward"),
    "o": (TR, 161, "forward"),
    "add": (TR, 214, "forward"),
    "gu": (TR, 178, "forward"),
    "act": (TR, 180, "forward"),
    "down": (TR, 181, "forward"),
    "loss": ("/workspace/train/train.py", 77, "compute_loss"),
    "bwd": (f"{TORCH}/autograd/graph.py", 825, "_engine_run_backward"),
    "opt": (f"{TORCH}/optim/adamw.py", 542, "_multi_tensor_adamw"),
    "ar": (f"{TORCH}/distributed/distributed_c10d.py", 2806, "all_reduce"),
    "zero": (f"{TORCH}/optim/optimizer.py", 1013, "zero_grad"),
}

_SM90 = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_{l}_n_tilesize{t}_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas"
NV_TRAIN = {
    "norm": kernel(
        "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<c10::BFloat16, float>(int, float, "
        "c10::BFloat16 const*, c10::BFloat16 const*, c10::BFloat16 const*, float*, float*, c10::BFloat16*)",
        "norm",
        18_437,
        (4096, 1, 1),
        (128, 1, 1),
        40,
        0,
        T["norm"],
        "aten::native_layer_norm",
    ),
    "qkv": kernel(
        _SM90.format(l="tn", t="128x256x64"),
        "gemm",
        97_614,
        (132, 1, 1),
        (384, 1, 1),
        168,
        213_000,
        T["qkv"],
        "aten::mm",
    ),
    "rope": kernel(
        "void at::native::vectorized_elementwise_kernel<4, at::native::mul_kernel_cuda(at::TensorIteratorBase&)"
        "::{lambda()#1}::operator()() const::{lambda()#8}::operator()() const::{lambda(c10::BFloat16, "
        "c10::BFloat16)#1}, std::array<char*, 3ul> >(int, at::native::mul_kernel_cuda(at::TensorIteratorBase&)::"
        "{lambda()#1}::operator()() const::{lambda()#8}::operator()() const::{lambda(c10::BFloat16, "
        "c10::BFloat16)#1}, std::array<char*, 3ul>)",
        "elementwise",
        9_052,
        (4096, 1, 1),
        (128, 1, 1),
        24,
        0,
        T["rope"],
        "aten::mul",
    ),
    "attn": kernel(
        "void flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, cutlass::bfloat16_t, "
        "Flash_kernel_traits<128, 128, 64, 4, cutlass::bfloat16_t> >, false, true, false, false, true, true, "
        "false, false>(flash::Flash_fwd_params)",
        "attention",
        151_833,
        (16, 32, 4),
        (128, 1, 1),
        255,
        49_152,
        T["attn"],
        "aten::_flash_attention_forward",
    ),
    "o": kernel(
        _SM90.format(l="tn", t="128x128x64"),
        "gemm",
        36_274,
        (132, 1, 1),
        (384, 1, 1),
        168,
        213_000,
        T["o"],
        "aten::mm",
    ),
    "add": kernel(
        "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>, "
        "std::array<char*, 3ul> >(int, at::native::CUDAFunctor_add<c10::BFloat16>, std::array<char*, 3ul>)",
        "elementwise",
        11_407,
        (4096, 1, 1),
        (128, 1, 1),
        22,
        0,
        T["add"],
        "aten::add",
    ),
    "gu": kernel(
        _SM90.format(l="tn", t="256x128x64"),
        "gemm",
        174_918,
        (132, 1, 1),
        (384, 1, 1),
        168,
        213_000,
        T["gu"],
        "aten::mm",
    ),
    "act": kernel(
        "void at::native::vectorized_elementwise_kernel<4, at::native::(anonymous namespace)::silu_kernel("
        "at::TensorIteratorBase&)::{lambda()#1}::operator()() const::{lambda()#4}::operator()() const::{lambda("
        "c10::BFloat16)#1}, std::array<char*, 2ul> >(int, at::native::(anonymous namespace)::silu_kernel("
        "at::TensorIteratorBase&)::{lambda()#1}::operator()() const::{lambda()#4}::operator()() const::{lambda("
        "c10::BFloat16)#1}, std::array<char*, 2ul>)",
        "activation",
        21_606,
        (4096, 1, 1),
        (128, 1, 1),
        26,
        0,
        T["act"],
        "aten::silu",
    ),
    "down": kernel(
        _SM90.format(l="tn", t="128x256x64"),
        "gemm",
        88_215,
        (132, 1, 1),
        (384, 1, 1),
        168,
        213_000,
        T["down"],
        "aten::mm",
    ),
    "loss": kernel(
        "void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float, float, float, at::native::"
        "(anonymous namespace)::LogSoftMaxForwardEpilogue>(float*, float const*, int)",
        "activation",
        64_109,
        (4096, 1, 1),
        (512, 1, 1),
        32,
        0,
        T["loss"],
        "aten::_log_softmax",
    ),
    # backward kernels (launched from the autograd thread's engine; site = the backward call)
    "b_gemm_dgrad": kernel(
        _SM90.format(l="nn", t="128x256x64"),
        "gemm",
        101_482,
        (132, 1, 1),
        (384, 1, 1),
        168,
        213_000,
        T["bwd"],
        "aten::mm",
    ),
    "b_gemm_wgrad": kernel(
        _SM90.format(l="nt", t="256x128x64"),
        "gemm",
        118_390,
        (132, 1, 1),
        (384, 1, 1),
        168,
        213_000,
        T["bwd"],
        "aten::mm",
    ),
    "b_attn": kernel(
        "void flash::flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel<Flash_bwd_kernel_traits<128, 64, 128, 8, 2, "
        "4, 2, false, false, cutlass::bfloat16_t, Flash_kernel_traits<128, 64, 128, 8, cutlass::bfloat16_t> >, "
        "true, false, false, false, false, true, false, false>(flash::Flash_bwd_params)",
        "attention",
        389_507,
        (16, 32, 4),
        (256, 1, 1),
        255,
        98_304,
        T["bwd"],
        "aten::_flash_attention_backward",
    ),
    "b_norm": kernel(
        "void at::native::(anonymous namespace)::layer_norm_grad_input_kernel_vectorized<c10::BFloat16, float>("
        "c10::BFloat16 const*, c10::BFloat16 const*, float const*, float const*, c10::BFloat16 const*, "
        "c10::BFloat16*, int)",
        "norm",
        27_719,
        (4096, 1, 1),
        (256, 1, 1),
        48,
        0,
        T["bwd"],
        "aten::native_layer_norm_backward",
    ),
    "b_act": kernel(
        "void at::native::vectorized_elementwise_kernel<4, at::native::(anonymous namespace)::silu_backward_kernel("
        "at::TensorIteratorBase&)::{lambda()#1}::operator()() const::{lambda()#4}::operator()() const::{lambda("
        "c10::BFloat16, c10::BFloat16)#1}, std::array<char*, 3ul> >(int, at::native::(anonymous namespace)::"
        "silu_backward_kernel(at::TensorIteratorBase&)::{lambda()#1}::operator()() const::{lambda()#4}::"
        "operator()() const::{lambda(c10::BFloat16, c10::BFloat16)#1}, std::array<char*, 3ul>)",
        "activation",
        31_255,
        (4096, 1, 1),
        (128, 1, 1),
        28,
        0,
        T["bwd"],
        "aten::silu_backward",
    ),
    "ar": kernel(
        "ncclDevKernel_AllReduce_Sum_bf16_RING_LL128(ncclDevKernelArgsStorage<4096ul>)",
        "communication",
        412_930,
        (8, 1, 1),
        (640, 1, 1),
        96,
        103_808,
        T["ar"],
        "nccl:all_reduce",
        api="drv",
        collective="allreduce",
    ),
    "opt": kernel(
        "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::"
        "TensorListMetadata<4>, at::native::(anonymous namespace)::FusedAdamMathFunctor<c10::BFloat16, 4, "
        "(at::native::ADAM_MODE)1, false>, double*, double, double, double, double, double, bool, double*, "
        "double*>(int, at::native::(anonymous namespace)::TensorListMetadata<4>, at::native::(anonymous "
        "namespace)::FusedAdamMathFunctor<c10::BFloat16, 4, (at::native::ADAM_MODE)1, false>, double*, double, "
        "double, double, double, double, bool, double*, double*)",
        "elementwise",
        143_591,
        (320, 1, 1),
        (512, 1, 1),
        64,
        0,
        T["opt"],
        "aten::_fused_adamw_",
    ),
}


def _amd_train(nv: dict[str, Kernel]) -> dict[str, Kernel]:
    names = {
        "qkv": CIJK.format(t="256x256x64"),
        "o": CIJK.format(t="256x128x64"),
        "gu": CIJK.format(t="256x224x64"),
        "down": CIJK.format(t="256x256x64"),
        "b_gemm_dgrad": CIJK.format(t="256x256x64").replace("Alik_Bljk", "Ailk_Bljk"),
        "b_gemm_wgrad": CIJK.format(t="256x256x64").replace("Alik_Bljk", "Alik_Bjlk"),
        "attn": "_ZN7ck_tile6kentryILi2ENS_13FmhaFwdKernelINS_27BlockFmhaPipelineQRKSVSAsyncEEEEEvNT_5KargsE",
        "b_attn": "_ZN7ck_tile6kentryILi2ENS_24FmhaBwdDQDKDVKernelINS_28BlockFmhaBwdDQDKDVPipelineKRKTRVREEEEEvNT_5KargsE",
        "ar": "ncclDevKernel_Generic(ncclDevKernelArgsStorage<4096ul>)",
    }
    out = {}
    for op, k in nv.items():
        name = names.get(op, k.name)
        api = "drv" if name.startswith(("Cijk_", "_ZN7ck_tile")) else "rt"
        out[op] = Kernel(
            name,
            k.category,
            int(k.base_ns * 1.09),
            k.grid,
            (min(k.block[0], 1024), 1, 1),
            0,
            min(k.smem, 65536),
            k.file,
            k.line,
            k.func,
            k.cpu_op,
            api,
            k.collective,
            k.scales,
        )
    return out


AMD_TRAIN = _amd_train(NV_TRAIN)

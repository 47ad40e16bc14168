"""The serving model's kernels (a DeepSeek-style MoE decoder): its launch sites, the NVIDIA kernels and their
AMD flavour (synth.catalog says what a catalogue entry is)."""

from __future__ import annotations

from .kernel import CIJK, SGL, Kernel, kernel

# Launch sites (file, line, function): one per logical op, shared by both vendors.
S = {
    "norm_fused": (f"{SGL}/layers/layernorm.py", 94, "forward_cuda"),
    "add": (f"{SGL}/models/deepseek_v2.py", 1893, "forward"),
    "norm": (f"{SGL}/layers/layernorm.py", 101, "forward_cuda"),
    "q_a_norm": (f"{SGL}/models/deepseek_v2.py", 1172, "forward_absorb_prepare"),
    "qkv_a": (f"{SGL}/layers/linear.py", 1310, "forward"),
    "q_b": (f"{SGL}/layers/linear.py", 405, "forward"),
    "rope": (f"{SGL}/layers/rotary_embedding.py", 233, "forward_cuda"),
    "attn": (f"{SGL}/layers/attention/flashinfer_mla_backend.py", 521, "forward_decode"),
    "attn_prefill": (f"{SGL}/layers/attention/flashinfer_mla_backend.py", 455, "forward_extend"),
    "o_proj": (f"{SGL}/layers/linear.py", 1310, "forward"),
    "custom_ar": (f"{SGL}/distributed/device_communicators/custom_all_reduce.py", 385, "custom_all_reduce"),
    "router": (f"{SGL}/models/deepseek_v2.py", 262, "forward"),
    "topk": (f"{SGL}/layers/moe/topk.py", 417, "biased_grouped_topk_gpu"),
    "moe_permute": (f"{SGL}/layers/moe/cutlass_moe.py", 141, "cutlass_fused_experts_fp8"),
    "moe_gemm1": (f"{SGL}/layers/moe/cutlass_moe.py", 178, "cutlass_fused_experts_fp8"),
    "moe_act": (f"{SGL}/layers/moe/cutlass_moe.py", 196, "cutlass_fused_experts_fp8"),
    "moe_gemm2": (f"{SGL}/layers/moe/cutlass_moe.py", 214, "cutlass_fused_experts_fp8"),
    "shared_gu": (f"{SGL}/layers/linear.py", 405, "forward"),
    "shared_act": (f"{SGL}/layers/activation.py", 71, "forward_cuda"),
    "shared_down": (f"{SGL}/layers/linear.py", 1310, "forward"),
    "finalize": (f"{SGL}/layers/moe/cutlass_moe.py", 239, "cutlass_fused_experts_fp8"),
    "nccl_ar": (f"{SGL}/distributed/parallel_state.py", 489, "_all_reduce_in_place"),
    "final_norm": (f"{SGL}/layers/layernorm.py", 94, "forward_cuda"),
    "lm_head": (f"{SGL}/layers/logits_processor.py", 618, "_get_logits"),
    "gather": (f"{SGL}/model_executor/forward_batch_info.py", 412, "init_new"),
    "copy": (f"{SGL}/model_executor/cuda_graph_runner.py", 702, "replay_prepare"),
    "sample": (f"{SGL}/layers/sampler.py", 115, "forward"),
}

# ---- serving model (DeepSeek-style MoE decoder) -------------------------------------------------
NV_SERVING = {
    "norm_fused": kernel(
        "void flashinfer::norm::FusedAddRMSNormKernel<8u, __nv_bfloat16>(__nv_bfloat16*, __nv_bfloat16*, "
        "__nv_bfloat16*, unsigned int, unsigned int, unsigned int, float, float)",
        "norm",
        2_310,
        (32, 1, 1),
        (896, 1, 1),
        32,
        2048,
        S["norm_fused"],
        "sgl_kernel::fused_add_rmsnorm",
    ),
    "add": kernel(
        "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>, "
        "std::array<char*, 3ul> >(int, at::native::CUDAFunctor_add<c10::BFloat16>, std::array<char*, 3ul>)",
        "elementwise",
        1_870,
        (224, 1, 1),
        (128, 1, 1),
        22,
        0,
        S["add"],
        "aten::add",
    ),
    "norm": kernel(
        "void flashinfer::norm::RMSNormKernel<8u, __nv_bfloat16>(__nv_bfloat16*, __nv_bfloat16*, "
        "__nv_bfloat16*, unsigned int, unsigned int, unsigned int, float, float)",
        "norm",
        1_950,
        (32, 1, 1),
        (896, 1, 1),
        30,
        2048,
        S["norm"],
        "sgl_kernel::rmsnorm",
    ),
    "qkv_a": kernel(
        "nvjet_tst_64x8_64x16_4x1_v_bz_splitK_TNT",
        "gemm",
        6_412,
        (2, 33, 4),
        (128, 1, 1),
        168,
        213_000,
        S["qkv_a"],
        "aten::mm",
        api="drv",
    ),
    "q_a_norm": kernel(
        "void flashinfer::norm::RMSNormKernel<8u, __nv_bfloat16>(__nv_bfloat16*, __nv_bfloat16*, "
        "__nv_bfloat16*, unsigned int, unsigned int, unsigned int, float, float)",
        "norm",
        1_433,
        (32, 1, 1),
        (192, 1, 1),
        30,
        2048,
        S["q_a_norm"],
        "sgl_kernel::rmsnorm",
    ),
    "q_b": kernel(
        "nvjet_tst_128x256_64x4_1x2_h_bz_coopA_NTN",
        "gemm",
        7_841,
        (1, 24, 1),
        (384, 1, 1),
        168,
        225_280,
        S["q_b"],
        "aten::mm",
        api="drv",
    ),
    "rope": kernel(
        "void flashinfer::BatchQKApplyRotaryPosIdsCosSinCacheKernel<true, 64u, 8u, 16u, __nv_bfloat16, "
        "long>(__nv_bfloat16*, __nv_bfloat16*, __nv_bfloat16*, __nv_bfloat16*, float*, long*, unsigned int, "
        "unsigned int, unsigned int, unsigned int, unsigned int, unsigned int, unsigned int, unsigned int, "
        "unsigned int, unsigned int)",
        "rope",
        913,
        (32, 1, 1),
        (8, 16, 1),
        40,
        0,
        S["rope"],
        "sgl_kernel::apply_rope_pos_ids_cos_sin_cache",
    ),
    "attn": kernel(
        "void flashinfer::mla::BatchMLAPagedAttentionKernel<flashinfer::mla::KernelTraits<true, 2u, 64u, "
        "64u, 512u, 64u, __nv_bfloat16, __nv_bfloat16, __nv_bfloat16, int>, flashinfer::mla::MLAParams<"
        "__nv_bfloat16, __nv_bfloat16, __nv_bfloat16, int> >(flashinfer::mla::MLAParams<__nv_bfloat16, "
        "__nv_bfloat16, __nv_bfloat16, int>)",
        "attention",
        14_736,
        (132, 2, 1),
        (128, 2, 1),
        168,
        194_560,
        S["attn"],
        "sgl_kernel::batch_mla_paged_attention_run",
    ),
    "attn_prefill": kernel(
        "void flashinfer::BatchPrefillWithRaggedKVCacheKernel<flashinfer::KernelTraits<"
        "(flashinfer::MaskMode)1, 128u, 1u, 4u, 16u, 8u, 1u, 1u, (flashinfer::PosEncodingMode)0, "
        "__nv_bfloat16, __nv_bfloat16, __nv_bfloat16, float, int, flashinfer::DefaultAttention<false, "
        "false, false, false> >, flashinfer::RaggedParams<__nv_bfloat16, __nv_bfloat16, __nv_bfloat16, "
        "int> >(flashinfer::RaggedParams<__nv_bfloat16, __nv_bfloat16, __nv_bfloat16, int>)",
        "attention",
        61_207,
        (64, 16, 1),
        (32, 1, 4),
        255,
        73_728,
        S["attn_prefill"],
        "sgl_kernel::batch_prefill_with_ragged_kv_cache_run",
    ),
    "o_proj": kernel(
        "nvjet_tst_128x64_64x8_2x1_v_bz_splitK_TNT",
        "gemm",
        8_264,
        (1, 56, 1),
        (384, 1, 1),
        168,
        213_000,
        S["o_proj"],
        "aten::mm",
        api="drv",
    ),
    "custom_ar": kernel(
        "void vllm::cross_device_reduce_1stage<__nv_bfloat16, 4>(vllm::RankData*, vllm::RankSignals, "
        "vllm::Signal*, __nv_bfloat16*, int, int)",
        "communication",
        5_118,
        (36, 1, 1),
        (512, 1, 1),
        48,
        0,
        S["custom_ar"],
        "sgl_kernel::all_reduce",
        collective="allreduce",
    ),
    "router": kernel(
        "void sglang::router_gemm_kernel<__nv_bfloat16, 128, 8, 256, 7168>(float*, __nv_bfloat16 const*, "
        "__nv_bfloat16 const*)",
        "moe",
        3_377,
        (256, 1, 1),
        (128, 1, 1),
        64,
        0,
        S["router"],
        "sgl_kernel::dsv3_router_gemm",
    ),
    "topk": kernel(
        "void moe_fused_gate_kernel<float, 256, 8, 8, 32>(void*, void*, float*, int*, long, long, long, "
        "long, double)",
        "moe",
        847,
        (4, 1, 1),
        (32, 8, 1),
        56,
        0,
        S["topk"],
        "sgl_kernel::moe_fused_gate",
    ),
    "moe_permute": kernel(
        "void tensorrt_llm::kernels::cutlass_kernels::expandInputRowsKernel<__nv_fp8_e4m3, "
        "__nv_fp8_e4m3, __nv_bfloat16, (tensorrt_llm::kernels::cutlass_kernels::TmaWarpSpecializedGrouped"
        "GemmInput::FpXBlockScalingType)0, false>(__nv_fp8_e4m3 const*, __nv_fp8_e4m3*, float const*, "
        "float*, int const*, int*, long, long, long, int, int, long const*)",
        "moe",
        1_683,
        (132, 1, 1),
        (256, 1, 1),
        40,
        0,
        S["moe_permute"],
        "sgl_kernel::prepare_moe_input",
    ),
    "moe_gemm1": kernel(
        "void cutlass::device_kernel<cutlass::gemm::kernel::GemmUniversal<cutlass::gemm::GroupProblemShape"
        "<cute::tuple<int, int, int> >, cutlass::gemm::collective::CollectiveMma<cutlass::gemm::"
        "MainloopSm90TmaGmmaWarpSpecializedFP8<4, cute::tuple<cute::C<2>, cute::C<1>, cute::C<1> >, "
        "cutlass::gemm::KernelPtrArrayTmaWarpSpecializedPingpongFP8FastAccum>, cute::tuple<cute::C<64>, "
        "cute::C<128>, cute::C<128> > >, cutlass::epilogue::collective::CollectiveEpilogue<cutlass::"
        "epilogue::Sm90PtrArrayTmaWarpSpecialized<4, 2, 64, false, false> >, void> > >(cutlass::gemm::"
        "kernel::GemmUniversal<cutlass::gemm::GroupProblemShape<cute::tuple<int, int, int> > >::Params)",
        "moe",
        18_392,
        (132, 1, 1),
        (384, 1, 1),
        168,
        232_448,
        S["moe_gemm1"],
        "sgl_kernel::fp8_blockwise_scaled_grouped_mm",
        api="drv",
    ),
    "moe_act": kernel(
        "void flashinfer::activation::act_and_mul_kernel<__nv_bfloat16, &silu<float> >(__nv_bfloat16*, "
        "__nv_bfloat16 const*, int)",
        "activation",
        1_206,
        (256, 1, 1),
        (1024, 1, 1),
        26,
        0,
        S["moe_act"],
        "sgl_kernel::silu_and_mul",
    ),
    "moe_gemm2": kernel(
        "void cutlass::device_kernel<cutlass::gemm::kernel::GemmUniversal<cutlass::gemm::GroupProblemShape"
        "<cute::tuple<int, int, int> >, cutlass::gemm::collective::CollectiveMma<cutlass::gemm::"
        "MainloopSm90TmaGmmaWarpSpecializedFP8<5, cute::tuple<cute::C<1>, cute::C<1>, cute::C<1> >, "
        "cutlass::gemm::KernelPtrArrayTmaWarpSpecializedCooperativeFP8FastAccum>, cute::tuple<cute::C<128>, "
        "cute::C<128>, cute::C<128> > >, cutlass::epilogue::collective::CollectiveEpilogue<cutlass::"
        "epilogue::Sm90PtrArrayTmaWarpSpecialized<4, 2, 128, false, false> >, void> > >(cutlass::gemm::"
        "kernel::GemmUniversal<cutlass::gemm::GroupProblemShape<cute::tuple<int, int, int> > >::Params)",
        "moe",
        11_754,
        (132, 1, 1),
        (384, 1, 1),
        168,
        232_448,
        S["moe_gemm2"],
        "sgl_kernel::fp8_blockwise_scaled_grouped_mm",
        api="drv",
    ),
    "shared_gu": kernel(
        "nvjet_tst_64x8_64x16_4x1_v_bz_TNT",
        "gemm",
        4_517,
        (1, 64, 1),
        (128, 1, 1),
        168,
        213_000,
        S["shared_gu"],
        "aten::mm",
        api="drv",
    ),
    "shared_act": kernel(
        "void flashinfer::activation::act_and_mul_kernel<__nv_bfloat16, &silu<float> >(__nv_bfloat16*, "
        "__nv_bfloat16 const*, int)",
        "activation",
        788,
        (32, 1, 1),
        (1024, 1, 1),
        26,
        0,
        S["shared_act"],
        "sgl_kernel::silu_and_mul",
    ),
    "shared_down": kernel(
        "nvjet_tst_64x8_64x16_4x1_v_bz_splitK_TNT",
        "gemm",
        3_985,
        (1, 56, 2),
        (128, 1, 1),
        168,
        213_000,
        S["shared_down"],
        "aten::mm",
        api="drv",
    ),
    "finalize": kernel(
        "void tensorrt_llm::kernels::cutlass_kernels::finalizeMoeRoutingKernel<__nv_bfloat16, "
        "__nv_bfloat16, __nv_bfloat16, (tensorrt_llm::kernels::cutlass_kernels::ScaleMode)1, false>"
        "(__nv_bfloat16 const*, __nv_bfloat16*, __nv_bfloat16 const*, float const*, int const*, int const*, "
        "long, long, long, long const*)",
        "moe",
        2_129,
        (32, 1, 1),
        (256, 1, 1),
        38,
        0,
        S["finalize"],
        "sgl_kernel::apply_shuffle_mul_sum",
    ),
    "nccl_ar": kernel(
        "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
        "communication",
        11_563,
        (2, 1, 1),
        (512, 1, 1),
        96,
        103_808,
        S["nccl_ar"],
        "nccl:all_reduce",
        api="drv",
        collective="allreduce",
    ),
    "final_norm": kernel(
        "void flashinfer::norm::FusedAddRMSNormKernel<8u, __nv_bfloat16>(__nv_bfloat16*, "
        "__nv_bfloat16*, __nv_bfloat16*, unsigned int, unsigned int, unsigned int, float, float)",
        "norm",
        2_291,
        (32, 1, 1),
        (896, 1, 1),
        32,
        2048,
        S["final_norm"],
        "sgl_kernel::fused_add_rmsnorm",
    ),
    "lm_head": kernel(
        "nvjet_tst_256x128_64x4_2x1_v_bz_coopB_TNT",
        "gemm",
        21_377,
        (1, 132, 1),
        (384, 1, 1),
        168,
        225_280,
        S["lm_head"],
        "aten::mm",
        api="drv",
    ),
    "gather": kernel(
        "void at::native::vectorized_gather_kernel<16, long>(char*, char*, long*, int, long, long, long, "
        "long, bool)",
        "elementwise",
        1_314,
        (1, 1, 1),
        (128, 1, 1),
        26,
        0,
        S["gather"],
        "aten::index",
        scales=False,
    ),
    "copy": kernel(
        "void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)"
        "::{lambda()#3}::operator()() const::{lambda()#7}::operator()() const::{lambda(long)#1}, std::array<char*, "
        "2ul>, 4, TrivialOffsetCalculator<1, unsigned int>, TrivialOffsetCalculator<1, unsigned int>, at::native::"
        "memory::LoadWithCast<1>, at::native::memory::StoreWithCast<1> >(int, at::native::direct_copy_kernel_cuda"
        "(at::TensorIteratorBase&)::{lambda()#3}::operator()() const::{lambda()#7}::operator()() const::{lambda"
        "(long)#1}, std::array<char*, 2ul>, TrivialOffsetCalculator<1, unsigned int>, TrivialOffsetCalculator<1, "
        "unsigned int>, at::native::memory::LoadWithCast<1>, at::native::memory::StoreWithCast<1>)",
        "elementwise",
        742,
        (1, 1, 1),
        (128, 1, 1),
        24,
        0,
        S["copy"],
        "aten::copy_",
        scales=False,
    ),
    "sample": kernel(
        "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::ArgMaxOps<float>, "
        "unsigned int, long, 4, 4> >(at::native::ReduceOp<float, at::native::ArgMaxOps<float>, unsigned int, "
        "long, 4, 4>)",
        "reduction",
        3_641,
        (32, 1, 1),
        (32, 16, 1),
        40,
        4096,
        S["sample"],
        "aten::argmax",
    ),
}


def _amd_from(nv: dict[str, Kernel]) -> dict[str, Kernel]:
    """AMD flavour: same ops, sites and timings, MI300X kernel names and HIP launch APIs."""
    names = {
        "norm_fused": (
            "_ZN5aiter24add_rmsnorm_quant_kernelIDF16bDF16bLi256ELi16ELb0ELb0ELb1ELi1EEEvPT0_PT_PfS4_S4_S4_"
            "diiiiiiib"
        ),
        "norm": "_ZN5aiter14rmsnorm_kernelIDF16bLi256ELi8EEEvPT_PKS1_S4_fii",
        "q_a_norm": "_ZN5aiter14rmsnorm_kernelIDF16bLi64ELi4EEEvPT_PKS1_S4_fii",
        "qkv_a": CIJK.format(t="64x32x256"),
        "q_b": CIJK.format(t="256x32x64"),
        "rope": (
            "void rotary_embedding_kernel<c10::BFloat16, true>(long const*, c10::BFloat16*, c10::BFloat16*, "
            "c10::BFloat16 const*, int, long, long, long, int, int, int)"
        ),
        "attn": "_ZN5aiter30mla_dec_stage1_bf16_a16w16_subQ16_mqa16E",
        "attn_prefill": (
            "_ZN7ck_tile6kentryILi2ENS_38FmhaBatchPrefillWithPagedKVCacheKernelINS_40BlockFmhaBatchPrefill"
            "PipelineQRKSVSAsyncEEEEEvNT_5KargsE"
        ),
        "o_proj": CIJK.format(t="32x32x256"),
        "custom_ar": (
            "void aiter::cross_device_reduce_1stage<__hip_bfloat16, 8>(aiter::RankData*, aiter::RankSignals, "
            "aiter::Signal*, __hip_bfloat16*, int, int)"
        ),
        "router": CIJK.format(t="16x32x512"),
        "topk": "_ZN5aiter30biased_grouped_topk_kernel_implIDF16bLi256ELi8EEEvPKT_S3_PfPiiiiib",
        "moe_permute": "_ZN5aiter24moe_sorting_kernel_implIiEEvNS_10MoeSortingE",
        "moe_gemm1": "_ZN7ck_tile6kentryILi1ENS_11MoeGemmKernelINS_22MoeFlatmmPipelineStage1EEEEEvNT_5KargsE",
        "moe_act": (
            "_ZN7sgl_hip10activation18act_and_mul_kernelI14__hip_bfloat16TnPFT_RKS3_EXadL_Z4siluIS2_ES3_S5_"
            "EEEEvPS3_PS4_i"
        ),
        "moe_gemm2": "_ZN7ck_tile6kentryILi1ENS_11MoeGemmKernelINS_22MoeFlatmmPipelineStage2EEEEEvNT_5KargsE",
        "shared_gu": CIJK.format(t="256x48x64"),
        "shared_act": (
            "_ZN7sgl_hip10activation18act_and_mul_kernelI14__hip_bfloat16TnPFT_RKS3_EXadL_Z4siluIS2_ES3_"
            "S5_EEEEvPS3_PS4_i"
        ),
        "shared_down": CIJK.format(t="256x16x64"),
        "finalize": "_ZN5aiter21moe_sum_kernel_implIDF16bLi8EEEvPT_PKS1_i",
        "nccl_ar": "ncclDevKernel_Generic(ncclDevKernelArgsStorage<4096ul>)",
        "final_norm": (
            "_ZN5aiter24add_rmsnorm_quant_kernelIDF16bDF16bLi64ELi8ELb0ELb0ELb1ELi1EEEvPT0_PT_PfS4_S4_S4_"
            "diiiiiiib"
        ),
        "lm_head": CIJK.format(t="256x192x64"),
        "add": nv["add"].name.replace("std::array<char*, 3ul>", "std::array<char*, 3ul>"),
    }
    out = {}
    for op, k in nv.items():
        name = names.get(op, k.name)
        # AMD GEMMs and ck/aiter kernels go through hipExtModuleLaunchKernel, the rest hipLaunchKernel.
        api = (
            "drv" if (name.startswith(("Cijk_", "_ZN5aiter", "_ZN7ck_tile")) and op != "norm_fused") else "rt"
        )
        # a hipBLASLt GEMM name cannot say it is the MoE router: by its name it is a GEMM
        category = "gemm" if name.startswith("Cijk_") else k.category
        out[op] = Kernel(
            name,
            category,
            int(k.base_ns * 1.13),
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


AMD_SERVING = _amd_from(NV_SERVING)

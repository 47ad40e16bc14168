"""Serving situations: batch composition per step, roofline figures of shaped ops, collective bandwidth.

A serving engineer asks how the step time grows with the batch, how close each GEMM and attention call
came to the hardware's limit and whether an all-reduce reached the link's bandwidth. These situations
write SGLang / vLLM / ATOM step annotations, ops with Input Dims and Input type, and NCCL kernels with
their message sizes, at exact ns, with the figures a correct analysis gives (`expect`).
"""

from __future__ import annotations

from pathlib import Path

from . import situation
from .timeline import Timeline

US = 1_000

GEMM = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel"
FLASH = "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, cutlass::bfloat16_t> >"
ADD = (
    "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>, "
    "at::detail::Array<char*, 3> >(int, at::native::CUDAFunctor_add<c10::BFloat16>, at::detail::Array<char*, 3>)"
)
MUL = (
    "void at::native::vectorized_elementwise_kernel<4, at::native::AUnaryFunctor<float, float, float, "
    "at::native::binary_internal::MulFunctor<float> >, at::detail::Array<char*, 2> >"
)
ALLREDUCE = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"
ALLGATHER = "ncclDevKernel_AllGather_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"
REDUCESCATTER = "ncclDevKernel_ReduceScatter_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"
BROADCAST = "ncclDevKernel_Broadcast_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"
BF16 = "c10::BFloat16"


def _shaped(
    tl: Timeline, op: str, dims: list, types: list, kernel: str, host: int, gpu: int, dur: int
) -> None:
    """An op with Input Dims / Input type around the launch of one kernel."""
    tl.op(op, host, host + 10 * US, args={"Input Dims": dims, "Input type": types})
    tl.launch(kernel, host + 2 * US, gpu, dur)


def _nccl(
    tl: Timeline,
    kernel: str,
    coll: str,
    n_in: int,
    n_out: int,
    group: int,
    dtype: str,
    host: int,
    gpu: int,
    dur: int,
) -> None:
    tl.op(
        "record_param_comms",
        host,
        host + 8 * US,
        args={
            "Collective name": coll,
            "In msg nelems": n_in,
            "Out msg nelems": n_out,
            "Group size": group,
            "dtype": dtype,
        },
    )
    tl.launch(
        kernel,
        host + 2 * US,
        gpu,
        dur,
        stream=20,
        args={
            "Collective name": coll,
            "In msg nelems": n_in,
            "Out msg nelems": n_out,
            "Group size": group,
            "dtype": dtype,
        },
    )


@situation(
    "serving-batches",
    "SGLang on an H100: three decode steps (bs=4, 4, 8) and one EXTEND step inside its detailed "
    "(roofline) execute_ annotation; a BF16 aten::mm, a flash attention, an aten::add and four NCCL "
    "collectives with recorded sizes",
)
def serving_batches(out: Path) -> dict:
    tl = Timeline(device_name="NVIDIA H100 80GB HBM3")
    # decode steps: one GEMM each, GPU spans 100, 130 and 150 us
    spans = []
    for i, (bs, dur) in enumerate(((4, 100 * US), (4, 130 * US), (8, 150 * US))):
        t0 = i * 1_000 * US
        tl.op(f"step[DECODE bs={bs}]", t0, t0 + 900 * US, cat="user_annotation")
        _shaped(
            tl, "aten::mm", [[bs, 4096], [4096, 4096]], [BF16, BF16], GEMM, t0 + 10 * US, t0 + 50 * US, dur
        )
        spans.append(dur)
    # the EXTEND step inside SGLang's roofline annotation (the annotation starts before and ends after it)
    t0 = 3_000 * US
    tl.op(
        "execute_300_context_2(sq300sk500sqsq50000sqsk90000)_generation_0(sq0sk0sqsq0sqsk0)",
        t0 - 100 * US,
        t0 + 1_000 * US,
        cat="user_annotation",
    )
    tl.op("step[EXTEND bs=2 toks=300]", t0, t0 + 900 * US, cat="user_annotation")
    _shaped(
        tl, "aten::mm", [[300, 4096], [4096, 12288]], [BF16, BF16], GEMM, t0 + 10 * US, t0 + 50 * US, 200 * US
    )
    _shaped(
        tl,
        "aten::_flash_attention_forward",
        [[1, 300, 32, 128], [1, 300, 8, 128], [1, 300, 8, 128], [], []],
        [BF16, BF16, BF16, "", "Scalar"],
        FLASH,
        t0 + 30 * US,
        t0 + 250 * US,
        40 * US,
    )
    _shaped(
        tl,
        "aten::add",
        [[300, 4096], [300, 4096], []],
        [BF16, BF16, "Scalar"],
        ADD,
        t0 + 50 * US,
        t0 + 290 * US,
        10 * US,
    )
    # an out= variant: mul.out(self, scalar other, out) reads self and writes out, nothing more
    _shaped(
        tl,
        "aten::mul",
        [[300, 4096], [], [300, 4096]],
        ["float", "float", "float"],
        MUL,
        t0 + 60 * US,
        t0 + 295 * US,
        4 * US,
    )
    _nccl(
        tl, ALLREDUCE, "allreduce", 1_048_576, 1_048_576, 4, "BFloat16", t0 + 70 * US, t0 + 300 * US, 50 * US
    )
    _nccl(
        tl,
        ALLGATHER,
        "_allgather_base",
        262_144,
        1_048_576,
        4,
        "BFloat16",
        t0 + 90 * US,
        t0 + 360 * US,
        20 * US,
    )
    _nccl(
        tl,
        REDUCESCATTER,
        "_reduce_scatter_base",
        1_048_576,
        262_144,
        4,
        "Float",
        t0 + 110 * US,
        t0 + 390 * US,
        40 * US,
    )
    _nccl(tl, BROADCAST, "broadcast", 1_000, 1_000, 4, "Float", t0 + 130 * US, t0 + 440 * US, 10 * US)
    tl.write(out / "sglang-TP-0-DECODE.trace.json.gz")

    def mm(m: int, k: int, n: int) -> dict:
        return {"flops": 2 * m * n * k, "bytes": (m * k + k * n + m * n) * 2}

    decode_truth = {
        "batch_size": None,
        "prefill_requests": 0,
        "decode_requests": None,
        "prefill_tokens": 0,
        "decode_tokens": None,
        "tokens": None,
        "kv_tokens": None,
        "sum_q_sq": None,
        "sum_q_kv": None,
        "batch_source": "sglang",
    }
    steps = []
    for bs in (4, 4, 8):
        steps.append(
            {**decode_truth, "batch_size": bs, "decode_requests": bs, "decode_tokens": bs, "tokens": bs}
        )
    steps.append(
        {
            "batch_size": 2,
            "prefill_requests": 2,
            "decode_requests": 0,
            "prefill_tokens": 300,
            "decode_tokens": 0,
            "tokens": 300,
            "kv_tokens": 500,
            "sum_q_sq": 50_000,
            "sum_q_kv": 90_000,
            "batch_source": "vllm_detailed",
        }
    )
    return {
        "steps": steps,  # by step number 0..3
        "step_latency": [
            {
                "phase": "decode",
                "batch_size": 4,
                "steps": 2,
                "median_step_ns": spans[0],
                "p90_step_ns": spans[1],
            },
            {
                "phase": "decode",
                "batch_size": 8,
                "steps": 1,
                "median_step_ns": spans[2],
                "p90_step_ns": spans[2],
            },
        ],
        "ops": [  # (op, dims as ingested, flops, bytes, kernel GPU ns)
            {"op": "aten::mm", "dims": "[[4,4096],[4096,4096]]", **mm(4, 4096, 4096), "dur_ns": 100 * US},
            {
                "op": "aten::mm",
                "dims": "[[300,4096],[4096,12288]]",
                **mm(300, 4096, 12288),
                "dur_ns": 200 * US,
            },
            {
                "op": "aten::_flash_attention_forward",
                "flops": 4 * 1 * 32 * 300 * 300 * 128,
                "bytes": (2 * 32 * 300 * 128 + 2 * 8 * 300 * 128) * 2,
                "dur_ns": 40 * US,
            },
            {"op": "aten::add", "flops": None, "bytes": 3 * 300 * 4096 * 2, "dur_ns": 10 * US},
            {"op": "aten::mul", "flops": None, "bytes": 2 * 300 * 4096 * 4, "dur_ns": 4 * US},
        ],
        "device": {"device": "NVIDIA H100 SXM", "bf16_tflops": 989.4, "hbm_tbps": 3.35, "link_gbps": 450.0},
        "collectives": [  # bytes, GPU ns, nccl-tests bus factor for n = 4
            {"collective": "allreduce", "bytes": 1_048_576 * 2, "dur_ns": 50 * US, "bus_factor": 1.5},
            {"collective": "allgather", "bytes": 1_048_576 * 2, "dur_ns": 20 * US, "bus_factor": 0.75},
            {"collective": "reducescatter", "bytes": 1_048_576 * 4, "dur_ns": 40 * US, "bus_factor": 0.75},
            {"collective": "broadcast", "bytes": 1_000 * 4, "dur_ns": 10 * US, "bus_factor": 1.0},
        ],
    }


@situation(
    "atom-batches",
    "ATOM on an MI300X: a prefill[bs=2 tok=14721 ctx=[..]] step and a CUDA-graph-padded detailed decode "
    "step decode[bs=117/128 tok=117 d=117 sqsq=.. sqsk=.. sk=..]",
)
def atom_batches(out: Path) -> dict:
    tl = Timeline("amd", device_name="AMD Instinct MI300X")
    tl.op("prefill[bs=2 tok=14721 ctx=[7803, 6918]]", 0, 900 * US, cat="user_annotation")
    tl.launch(GEMM, 10 * US, 50 * US, 300 * US)
    tl.op(
        "decode[bs=117/128 tok=117 d=117 sqsq=117 sqsk=239616 sk=239616]",
        1_000 * US,
        1_900 * US,
        cat="user_annotation",
    )
    tl.launch(GEMM, 1_010 * US, 1_050 * US, 80 * US)
    tl.write(out / "atom_rank_0.pt.trace.json.gz")
    return {
        "steps": [
            {
                "phase": "prefill",
                "batch_size": 2,
                "prefill_requests": 2,
                "decode_requests": 0,
                "prefill_tokens": 14721,
                "decode_tokens": 0,
                "tokens": 14721,
                "kv_tokens": None,
                "sum_q_sq": None,
                "sum_q_kv": None,
                "batch_source": "atom",
            },
            {
                "phase": "decode",
                "batch_size": 117,
                "prefill_requests": 0,
                "decode_requests": 117,
                "prefill_tokens": 0,
                "decode_tokens": 117,
                "tokens": 117,
                "kv_tokens": 239616,
                "sum_q_sq": 117,
                "sum_q_kv": 239616,
                "batch_source": "atom_detailed",
            },
        ]
    }

"""Work filed by what it does, not by its name: communication launched by a collective op, and eager attention
written as 3-D batched matmuls.

- `collective-ops-any-name`: kernels launched inside the ops PyTorch and the serving engines record for a
  collective (c10d::*, record_param_comms, nccl:*, functional collectives, a custom all-reduce op) are
  communication whatever their symbol: the copies out of an all-gather's flat buffer, a home-made all-reduce
  kernel. Library kernels that run a collective without any op around them (DeepEP dispatch/combine,
  NVSHMEM) are communication by their library's name. The same copy kernel outside a collective stays
  elementwise.
- `multihead-attention-3d`: CLIP-style attention (`torch.bmm` of [B*H, S, d] x [B*H, d, S], a softmax over
  the 3-D [B*H, S, S] scores, `torch.bmm` with V) and `nn.MultiheadAttention` (`torch.baddbmm` with the
  mask, softmax, bmm) are attention; a 3-D softmax over logits that no batched matmul produced, and a
  batched matmul of another shape, are not.

The ground truth is what each op of the generated program is: the category of every activity in GPU start
order (synth/situations/categories.py: Eager).
"""

from __future__ import annotations

from pathlib import Path

from . import situation
from .categories import COPY, GEMM_SM90, MUL, NVJET, SOFTMAX, US, Eager, linear, write_eager
from .timeline import Timeline

NCCL_ALL_GATHER = "ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
NCCL_ALL_REDUCE = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
# a custom all-reduce kernel whose symbol says nothing of communication
HOME_MADE_ALL_REDUCE = "void tp_kernels::oneline_sum_kernel<__nv_bfloat16, 8>(tp_kernels::RankData*, int)"
DEEPEP_DISPATCH = "void deep_ep::intranode::dispatch<8, 768, 8192>(int4*, float*, int*, long*, float*, int*)"
DEEPEP_COMBINE = "void deep_ep::intranode::combine<__nv_bfloat16, 8, 768, 4096>(__nv_bfloat16*, float*, int*)"
NVSHMEM_BARRIER = "nvshmemi_barrier_all_kernel_on_stream(int)"


@situation(
    "collective-ops-any-name",
    "communication by what launched it: an all-gather's buffer copies and a custom all-reduce kernel inside "
    "collective ops (c10d, record_param_comms, nccl:*, functional collectives, a custom-AR op), DeepEP and "
    "NVSHMEM kernels with no op around them; the same copy outside a collective stays elementwise",
)
def collective_ops_any_name(out: Path) -> dict:
    tl = Timeline()
    e = Eager(tl)
    tokens, hidden, world = 256, 4096, 8
    linear(e, tokens, hidden, hidden)
    # all-gather into a tensor list: the NCCL kernel, then the copies out of the flat output buffer
    e.run(
        [
            ("c10d::allgather_", [[[tokens, hidden]] * world, [[tokens, hidden]], [], []]),
            ("record_param_comms", [[[tokens, hidden]] * world, [[tokens, hidden]]]),
            ("nccl:all_gather", [[[tokens, hidden]] * world, [[tokens, hidden]]]),
        ],
        [(NCCL_ALL_GATHER, 30 * US, "communication")],
    )
    e.run(
        [("c10d::allgather_", [[[tokens, hidden]] * world, [[tokens, hidden]], [], []])],
        [(COPY, 4 * US, "communication"), (COPY, 4 * US, "communication")],
    )
    # a functional all-reduce (torch.compile / SGLang's tensor_model_parallel_all_reduce)
    e.run(
        [("_c10d_functional::all_reduce", [[tokens, hidden], [], []])],
        [(NCCL_ALL_REDUCE, 25 * US, "communication")],
    )
    # a custom all-reduce op whose kernel no name rule knows
    e.run(
        [("_C_custom_ar::all_reduce", [[], [tokens, hidden], [tokens, hidden], [], []])],
        [(HOME_MADE_ALL_REDUCE, 12 * US, "communication")],
    )
    # expert-parallel dispatch and combine, NVSHMEM: launched by a C++ library with no op around them
    e.run([], [(DEEPEP_DISPATCH, 40 * US, "communication")])
    linear(e, tokens, hidden, 4 * hidden, kernel=NVJET)
    e.run([], [(DEEPEP_COMBINE, 35 * US, "communication"), (NVSHMEM_BARRIER, 3 * US, "communication")])
    # the same copy kernel outside any collective is what its name says
    e.run(
        [("aten::copy_", [[tokens, hidden], [tokens, hidden], []])],
        [(COPY, 4 * US, "elementwise")],
    )
    return write_eager(tl, e, out)


@situation(
    "multihead-attention-3d",
    "attention as 3-D batched matmuls: CLIP-style (bmm, a softmax over [B*H, S, S], bmm with V, the causal "
    "mask added on a 4-D view) and nn.MultiheadAttention (baddbmm with the mask); a 3-D softmax over logits "
    "and a bmm of another shape are not attention",
)
def multihead_attention_3d(out: Path) -> dict:
    tl = Timeline()
    e = Eager(tl)
    b, h, s, d = 2, 8, 77, 64
    n = b * h
    for _ in range(2):  # CLIP's text encoder, two layers
        linear(e, b * s, h * d, 3 * h * d, dur=30 * US)
        e.run([("aten::bmm", [[n, s, d], [n, d, s]])], [(GEMM_SM90, 14 * US, "attention")])
        e.run([("aten::add", [[b, h, s, s], [b, 1, s, s]])], [(MUL, 5 * US, "attention")])
        e.run(
            [("aten::softmax", [[n, s, s], [], []]), ("aten::_softmax", [[n, s, s], [], []])],
            [(SOFTMAX, 9 * US, "attention")],
        )
        e.run([("aten::bmm", [[n, s, s], [n, s, d]])], [(GEMM_SM90, 13 * US, "attention")])
        linear(e, b * s, h * d, h * d, dur=15 * US)
    # nn.MultiheadAttention's path with an attention mask: baddbmm(mask, q, k^T), softmax, bmm(weights, v)
    e.run([("aten::baddbmm", [[n, s, s], [n, s, d], [n, d, s], [], []])], [(GEMM_SM90, 15 * US, "attention")])
    e.run(
        [("aten::softmax", [[n, s, s], [], []]), ("aten::_softmax", [[n, s, s], [], []])],
        [(SOFTMAX, 9 * US, "attention")],
    )
    e.run([("aten::bmm", [[n, s, s], [n, s, d]])], [(GEMM_SM90, 13 * US, "attention")])
    # not attention: a batched matmul of another shape, and the softmax over the vocabulary's logits
    e.run([("aten::bmm", [[n, 50, 8], [n, 8, 50]])], [(GEMM_SM90, 4 * US, "gemm")])
    vocab = 49408
    e.run(
        [("aten::softmax", [[b, s, vocab], [], []]), ("aten::_softmax", [[b, s, vocab], [], []])],
        [(SOFTMAX, 20 * US, "activation")],
    )
    return write_eager(tl, e, out)

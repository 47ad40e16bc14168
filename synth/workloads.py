"""The three workloads as per-rank step programs (generators driven by sim.run_lockstep)."""

from __future__ import annotations

from collections.abc import Generator

from .catalog import serving_kernels, training_kernels
from .kernel import SGL
from .sim import RankSim

SCHED = f"{SGL}/managers/scheduler.py"
WORKER = f"{SGL}/managers/tp_worker.py"
RUNNER = f"{SGL}/model_executor/model_runner.py"
CGR = f"{SGL}/model_executor/cuda_graph_runner.py"
DSV2 = f"{SGL}/models/deepseek_v2.py"

STREAMS = {"nvidia": {"main": 7, "side": 24, "comm": 28}, "amd": {"main": 3, "side": 4, "comm": 5}}

DECODE_SCALE = 1.0
PREFILL_SCALE = 23.7  # an EXTEND batch of a few thousand tokens: GEMM-bound kernels grow


def serving_layer(sim: RankSim, i: int, prefill: bool) -> Generator:
    """One MoE decoder layer: attention, a custom/NCCL all-reduce, routed experts on the side stream
    overlapping the shared expert on the main stream, then the MoE all-reduce."""
    K = serving_kernels(sim.vendor)
    m, s = sim.S["main"], sim.S["side"]
    host = sim.replay is None
    sim.fqn = f"model.layers.{i}"
    if host:
        sim.module("DeepseekV2DecoderLayer", i)
        sim.py(DSV2, 1872, "forward")
    if prefill:
        yield from sim.op(K["add"], m)  # unfused residual add + RMSNorm: the fusion pattern
        yield from sim.op(K["norm"], m)
    else:
        yield from sim.op(K["norm_fused"], m)
    for name in ("qkv_a", "q_a_norm", "q_b", "rope"):
        yield from sim.op(K[name], m)
    yield from sim.op(K["attn_prefill" if prefill else "attn"], m)
    yield from sim.op(K["o_proj"], m)
    sim.straggle(m)
    yield from sim.op(K["nccl_ar" if prefill else "custom_ar"], m)
    if prefill:
        yield from sim.op(K["add"], m)
        yield from sim.op(K["norm"], m)
    else:
        yield from sim.op(K["norm_fused"], m)
    yield from sim.op(K["router"], m)
    yield from sim.op(K["topk"], m)
    ev = sim.record(m)
    sim.wait(s, ev, m)
    for name in ("moe_permute", "moe_gemm1", "moe_act", "moe_gemm2"):
        yield from sim.op(K[name], s)
    for name in ("shared_gu", "shared_act", "shared_down"):
        yield from sim.op(K[name], m)
    ev2 = sim.record(s)
    sim.wait(m, ev2, s)
    yield from sim.op(K["finalize"], m)
    sim.straggle(m)
    yield from sim.op(K["nccl_ar"], m)
    sim.fqn = None
    if host:
        sim.exit()
        sim.exit()


def serving_body(sim: RankSim, layers: int, prefill: bool) -> Generator:
    K = serving_kernels(sim.vendor)
    m = sim.S["main"]
    for i in range(layers):
        yield from serving_layer(sim, i, prefill)
    sim.fqn = "model.norm"
    yield from sim.op(K["final_norm"], m)
    sim.fqn = "lm_head"
    yield from sim.op(K["lm_head"], m)
    sim.fqn = None


def serving_step(sim: RankSim, step: int, layers: int, prefill: bool, stall_ns: int) -> Generator:
    """One SGLang scheduler iteration: eager batch setup, the forward (graph replay for decode), sampling
    on the GPU, a small DtoH copy of the next tokens and the host sync that `.tolist()` implies."""
    K = serving_kernels(sim.vendor)
    m = sim.S["main"]
    bs = sim.cfg.batch_size
    sim.scale = PREFILL_SCALE if prefill else DECODE_SCALE * (0.75 + 0.25 * bs / 32)
    stage = "EXTEND" if prefill else "DECODE"
    sim.py(SCHED, 1049, "event_loop_normal")
    sim.enter("user_annotation", f"step[{stage} bs={bs}]")
    sim.py(SCHED, 1871, "run_batch")
    sim.py(WORKER, 244, "forward_batch_generation")
    yield from sim.op(K["gather"], m)
    yield from sim.op(K["copy"], m)
    if stall_ns and step % 2 == 1:
        sim.host_stall(SCHED, 1203, "recv_requests", stall_ns)
    sim.py(RUNNER, 1642, "forward")
    if prefill:
        sim.py(RUNNER, 1561, "forward_extend")
        sim.module("DeepseekV2ForCausalLM", 0)
        yield from serving_body(sim, layers, True)
        sim.exit()
        sim.exit()
    else:
        sim.py(CGR, 760, "replay")
        sim.py("/usr/local/lib/python3.12/dist-packages/torch/cuda/graphs.py", 123, "replay")
        yield from sim.graph_launch(lambda: serving_body(sim, layers, False))
        sim.exit()
        sim.exit()
    sim.exit()
    sim.py(f"{SGL}/layers/sampler.py", 88, "forward")
    yield from sim.op(K["sample"], m)
    sim.exit()
    sim.memcpy("DtoH", 8 * bs, m, cpu_op="aten::_to_copy")
    sim.enter("cpu_op", "aten::item")
    sim.stream_sync(m)
    sim.exit()
    sim.exit()
    sim.exit()
    sim.exit()
    sim.exit()


def capture_program(sim: RankSim, layers: int, mode: str = "DECODE") -> Generator:
    """The capture of the decode graph: the same launches, issued eagerly between Begin/EndCapture, inside
    the capture annotation `capture_{batch size}_{mode}`."""
    sim.py(CGR, 421, "capture")
    sim.py(CGR, 566, "capture_one_batch_size")
    sim.enter("user_annotation", f"capture_{sim.cfg.batch_size}_{mode}")
    sim.runtime(sim.api["begin"], sim.jit(2_000, 4_000))
    sim.py(CGR, 540, "run_once")
    sim.py(RUNNER, 1642, "forward")
    yield from serving_body(sim, layers, False)
    sim.exit()
    sim.exit()
    sim.runtime(sim.api["end"], sim.jit(40_000, 90_000))
    sim.runtime(sim.api["inst"], sim.jit(900_000, 1_500_000))
    sim.exit()
    sim.exit()
    sim.exit()


TRAIN = "/workspace/train/train.py"


def training_step(sim: RankSim, step: int, layers: int, stall_ns: int) -> Generator:
    """Data-parallel training step: forward, backward with per-layer gradient buckets all-reduced on a
    communication stream (event record/wait between streams), optimizer after the join, stream sync."""
    K = training_kernels(sim.vendor)
    c, comm = sim.S["main"], sim.S["comm"]
    sim.scale = 0.9 + 0.1 * sim.cfg.batch_size / 32
    sim.py(TRAIN, 140, "main")
    ann = sim.enter("user_annotation", f"ProfilerStep#{step + 1}")
    sim.py(TRAIN, 61, "train_step")
    if stall_ns and step % 2 == 1:
        sim.host_stall("/workspace/train/data.py", 42, "__next__", stall_ns)
    sim.memcpy("HtoD", 8 * sim.cfg.batch_size * 4096, c, cpu_op="aten::copy_")
    sim.module("Transformer", 0)
    for i in range(layers):
        sim.module("TransformerBlock", i)
        for name in ("norm", "qkv", "rope", "attn", "o", "add", "norm", "gu", "act", "down", "add"):
            yield from sim.op(K[name], c)
        sim.exit()
    sim.exit()
    yield from sim.op(K["loss"], c)
    sim.py(f"{K['b_attn'].file.rsplit('/autograd', 1)[0]}/_tensor.py", 648, "backward")
    for i in reversed(range(layers)):
        for name in (
            "b_gemm_dgrad",
            "b_gemm_wgrad",
            "b_act",
            "b_gemm_dgrad",
            "b_gemm_wgrad",
            "b_norm",
            "b_gemm_dgrad",
            "b_gemm_wgrad",
            "b_attn",
            "b_gemm_dgrad",
            "b_gemm_wgrad",
            "b_norm",
        ):
            yield from sim.op(K[name], c)
        # DDP bucket ready: hand the gradients to the communication stream
        sim.straggle(c)
        ev = sim.record(c)
        sim.wait(comm, ev, c)
        yield from sim.op(K["ar"], comm)
    sim.exit()
    ev = sim.record(comm)
    sim.wait(c, ev, comm)
    yield from sim.op(K["opt"], c)
    sim.py(K["opt"].file.replace("adamw.py", "optimizer.py"), 1013, "zero_grad")
    sim.memset(2 * 4096 * 4096, c)
    sim.exit()
    sim.stream_sync(c)
    sim.exit()
    sim.exit()
    # Kineto mirrors ProfilerStep on the GPU timeline of the stream that ran the step's kernels
    acts = [a for a in sim.gpu if a.stream == c]
    if acts:
        first = min(a.start for a in acts)
        last = max(a.end for a in acts)
        sim.gpu_annotations.append((f"ProfilerStep#{step + 1}", c, first, last - first, ann["External id"]))
    sim.exit()

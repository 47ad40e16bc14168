"""write_scenario: one synthetic run (trace files per rank, capture traces, ground_truth.json)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tracehouse.errors import InvalidArgument

from .catalog import device_properties
from .graph_nodes import node_id
from .kineto import TraceWriter
from .sim import Cfg, RankSim, run_lockstep
from .truth import Truth
from .workloads import STREAMS, capture_program, serving_step, training_step

SCENARIOS = ("serving-decode", "serving-prefill", "training")
PHASE = {"serving-decode": "decode", "serving-prefill": "prefill", "training": "unknown"}


def _file_name(cfg: Cfg, rank: int, naming: str = "default", start_ns: int | None = None) -> str:
    """The rank's file name as its profiler writes it. naming 'default': SGLang's for serving (the session's
    id, its start time when start_ns is given, before `-TP-<rank>`), the training script's `rank-N...` for
    training; 'tensorboard': torch.profiler.tensorboard_trace_handler's default, as vLLM's workers write
    it: `<host>_<pid>.<write time ns>.pt.trace.json.gz` (each rank's own write time, seconds apart);
    'megatron': the rank's place in a TP × PP grid, `TP-<t>-PP-<p>.pt.trace.json.gz` (megatron_grid)."""
    if naming == "megatron":
        tp, _ = megatron_grid(cfg.ranks)
        return f"TP-{rank % tp}-PP-{rank // tp}.pt.trace.json.gz"
    if naming == "tensorboard":
        written = (start_ns or cfg.t0_ns) + 5_000_000_000 + rank * 1_300_000_000 + cfg.seed % 97 * 1_000
        return f"node{cfg.seed % 8:02d}_{20_000 + (cfg.seed * 37 + rank * 101) % 40_000}.{written}.pt.trace.json.gz"
    if start_ns is not None and cfg.scenario != "training":  # SGLang's id: str(time.time()) at the start
        stage = "DECODE" if cfg.scenario == "serving-decode" else "EXTEND"
        return f"{start_ns / 1e9:.6f}-TP-{rank}-{stage}.trace.json.gz"
    run_id = 1_765_000_000 + (cfg.seed * 7_919) % 900_000  # SGLang uses int(time.time())
    if cfg.scenario == "serving-decode":
        return f"{run_id}-TP-{rank}-DECODE.trace.json.gz"
    if cfg.scenario == "serving-prefill":
        return f"{run_id}-TP-{rank}-EXTEND.trace.json.gz"
    host = f"node{cfg.seed % 8:02d}"
    return f"rank-{rank}.{host}_{20_000 + (cfg.seed * 37 + rank * 101) % 40_000}.{run_id}123.pt.trace.json.gz"


def megatron_grid(ranks: int) -> tuple[int, int]:
    """(TP, PP) of the 'megatron' naming: tensor parallel over 4 ranks where the world divides by 4, else over
    all of them; pipeline stages over the rest (rank r: TP index r % TP, PP index r // TP)."""
    tp = 4 if ranks % 4 == 0 else ranks
    return tp, ranks // tp


def _megatron_groups(ranks: int, rank: int) -> list[dict[str, Any]]:
    """The rank's tensor- and pipeline-parallel process groups as Megatron-core describes them (pg_desc)."""
    tp, pp = megatron_grid(ranks)
    stage, index = rank // tp, rank % tp
    return [
        {
            "pg_name": "1",
            "pg_desc": "TENSOR_MODEL_PARALLEL_GROUP",
            "backend_config": "cuda:nccl",
            "pg_size": tp,
            "ranks": [stage * tp + i for i in range(tp)],
        },
        {
            "pg_name": "2",
            "pg_desc": "PIPELINE_MODEL_PARALLEL_GROUP",
            "backend_config": "cuda:nccl",
            "pg_size": pp,
            "ranks": [s * tp + index for s in range(pp)],
        },
    ]


def _head(cfg: Cfg, rank: int, naming: str = "default") -> dict[str, Any]:
    n = cfg.ranks
    head: dict[str, Any] = {"schemaVersion": 1, "deviceProperties": device_properties(cfg.vendor, n)}
    if cfg.vendor == "amd":
        head.update(
            {"roctracer_version": 4.1, "hip_runtime_version": 60443483, "hip_driver_version": 60443483}
        )
    else:
        head.update({"cupti_version": 26, "cuda_runtime_version": 12080, "cuda_driver_version": 12080})
    head["distributedInfo"] = {
        "backend": "nccl",
        "rank": rank,
        "world_size": n,
        "pg_count": 1,
        "pg_config": [
            {
                "pg_name": "0",
                "pg_desc": "default_pg",
                "backend_config": "cuda:nccl",
                "pg_size": n,
                "ranks": list(range(n)),
            }
        ],
        "nccl_version": "2.27.3" if cfg.vendor == "nvidia" else "2.22.3",
    }
    if naming == "megatron":
        head["distributedInfo"]["pg_config"] += _megatron_groups(n, rank)
        head["distributedInfo"]["pg_count"] = 3
    head.update(
        {
            "record_shapes": 1,
            "with_stack": 1,
            "trace_id": f"{(cfg.seed * 1_000_003 + rank * 65_537 + 0xC3AB6FAA) & (2**64 - 1):032X}",
        }
    )
    return head


def _close(w: TraceWriter, sim: RankSim, t_start: int, t_end: int, thread_name: str) -> None:
    """Kineto's trailer: process/thread metadata, the profiler span and the two global instants."""
    pid, dev = sim.pid, sim.device
    w.meta("process_name", pid, 0, t_start, {"name": "python3"})
    w.meta("process_labels", pid, 0, t_start, {"labels": "CPU"})
    w.meta("process_sort_index", pid, 0, t_start, {"sort_index": pid})
    for d in range(sim.cfg.ranks):
        w.meta("process_name", d, 0, t_start, {"name": "python3"})
        w.meta("process_labels", d, 0, t_start, {"labels": f"GPU {d}"})
        w.meta(
            "process_sort_index",
            d,
            0,
            t_start,
            {"sort_index": 5_000_000 + d if sim.vendor == "amd" else 16_777_216 + d},
        )
    # a thread_name per stream that ran work (capture traces ran none and name no stream)
    for s in sorted(sim.used_streams):
        w.meta("thread_name", dev, s, t_start, {"name": f"stream {s} "})
        w.meta("thread_sort_index", dev, s, t_start, {"sort_index": s})
    w.meta("thread_name", pid, sim.tid, t_start, {"name": f"thread {sim.tid} ({thread_name})"})
    w.meta("thread_sort_index", pid, sim.tid, t_start, {"sort_index": sim.tid})
    w.x(
        "Trace",
        "PyTorch Profiler (0)",
        "Spans",
        "PyTorch Profiler",
        t_start,
        t_end - t_start,
        {"Op count": 0},
    )
    w.instant("Iteration Start: PyTorch Profiler", "Traces", "Trace PyTorch Profiler", t_start)
    w.instant("Record Window End", "", "", t_end)
    w.close(
        {
            "traceName": f"/tmp/tracehouse_synth_rank{sim.rank}.json",
            "displayTimeUnit": "ms",
            "baseTimeNanoseconds": 0,
        }
    )


def _annotation_window(sim: RankSim) -> tuple[int, int]:
    for e in sim.host:
        if (
            e[0] == "X"
            and e[1] == "user_annotation"
            and (e[2].startswith("step[") or e[2].startswith("ProfilerStep#"))
        ):
            return e[3], e[3] + e[4]
    return 0, 0


def _check(scenario: str, vendor: str, ranks: int, layers: int, steps: int, target_size, straggler) -> None:
    if scenario not in SCENARIOS:
        raise InvalidArgument(f"unknown scenario {scenario!r}; choose one of {', '.join(SCENARIOS)}")
    if vendor not in ("nvidia", "amd"):
        raise InvalidArgument(f"unknown vendor {vendor!r}; choose nvidia or amd")
    if ranks < 1 or layers < 1 or (steps < 1 and not target_size):
        raise InvalidArgument("ranks, layers and steps must be >= 1")
    if straggler is not None and not 0 <= straggler[0] < ranks:
        raise InvalidArgument(f"straggler rank {straggler[0]} is not in 0..{ranks - 1}")


def _simulate_step(sims: list[RankSim], step: int, layers: int, stall_ns: int, truth: Truth, writers: list):
    """One step of every rank, in lockstep: its truth added, its events flushed to the rank's trace; on step
    0, the layer shape of rank 0 (_layer_shape), else None."""
    scenario = sims[0].cfg.scenario
    shape = None
    for s in sims:
        s.new_step(step)
    if scenario == "training":
        gens = [training_step(s, step, layers, stall_ns) for s in sims]
    else:
        gens = [serving_step(s, step, layers, scenario == "serving-prefill", stall_ns) for s in sims]
    run_lockstep(sims, gens, truth.on_collective)
    if any(s.stack for s in sims):
        raise AssertionError("unbalanced host frames in the step program")
    for r, s in enumerate(sims):
        graphs = sum(1 for e in s.host if e[0] == "X" and e[2].endswith("GraphLaunch"))
        truth.add_step(r, step, s, PHASE[scenario], graphs, _annotation_window(s))
        s.used_streams.update(a.stream for a in s.gpu)
        if step == 0 and r == 0:
            shape = _layer_shape(s, layers)
        s.flush(writers[r])
        s.h += s.jit(25_000, 60_000)  # scheduler / dataloader work between steps
    return shape


def write_scenario(
    scenario: str,
    out_dir: str | Path,
    *,
    ranks: int = 2,
    steps: int = 4,
    layers: int = 4,
    vendor: str = "nvidia",
    seed: int = 0,
    target_size: int | None = None,
    straggler: tuple[int, float] | None = None,
    host_stall_us: float = 0.0,
    slow_kernel: tuple[str, float] | None = None,
    run_label: str = "",
    batch_size: int = 32,
    progress: Callable[[int, int], None] | None = None,
    spelling: str = "modern",
    start_ns: int | None = None,
    naming: str = "default",
    graph_nodes: bool = False,
    capture_layout: str = "default",
    slow_node: tuple[int, float] | None = None,
    fuse: tuple[str, ...] | None = None,
    write_ranks: tuple[int, ...] | None = None,
) -> Path:
    """Write the trace files of one synthetic run (plus ground_truth.json) into out_dir; return out_dir.

    target_size (bytes, uncompressed, summed over the run's rank traces) keeps adding steps until the
    traces reach it, streaming each step to the gzip files; `steps` is then ignored. progress, if given, is
    called after each step with (bytes written so far, target_size or 0) (the CLI draws it on a terminal).
    spelling: the profiler version the traces are written as (synth/kineto.py SPELLINGS); the simulation,
    and so the ground truth, is the same whatever the spelling. start_ns: the session's start (UTC ns; its
    host clocks start there, and SGLang's names carry it); naming: the file names' style (_file_name).
    graph_nodes: replayed kernels carry Kineto's graph node ids and their nodes' mark_kernels annotations
    (synth/graph_nodes.py), and each step's truth lists them (`graph_nodes`). capture_layout: where the
    capture traces of a serving-decode run go (CAPTURE_LAYOUTS). slow_node (index, factor): the index-th node of
    the replayed decode graph's body (its graph node id: graph_nodes.node_id(index)) runs `factor` times
    longer; the truth's anomalies name it by its node id. fuse (a fusion pattern's step regexes): its
    chains run fused, as the what-if model states a fusion (synth/fused_chains.py); the same seed gives the
    same run otherwise, so its steps are the truth of `tracehouse whatif --fusion`. write_ranks: the trace
    files of these ranks only (all ranks are simulated, and the truth is the simulation's: a run that holds
    part of its world, as when one rank's trace is shared; the header's `files` names those written).
    """
    _check(scenario, vendor, ranks, layers, steps, target_size, straggler)
    written = sorted(set(range(ranks) if write_ranks is None else write_ranks))
    if not written or not all(0 <= r < ranks for r in written):
        raise InvalidArgument(f"ranks to write {list(write_ranks or [])} must be some of 0..{ranks - 1}")
    if capture_layout not in CAPTURE_LAYOUTS:
        raise ValueError(f"capture_layout must be one of {', '.join(CAPTURE_LAYOUTS)}")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    start = Cfg.t0_ns if start_ns is None else start_ns  # the hosts' clocks at the session's start
    cfg = Cfg(scenario, vendor, ranks, layers, batch_size, seed, straggler, host_stall_us, slow_kernel, start)
    cfg.graph_nodes = graph_nodes
    cfg.slow_node = slow_node
    cfg.fuse = tuple(fuse) if fuse else None
    cfg.fuse_re = tuple(re.compile(x) for x in cfg.fuse or ())
    streams = STREAMS[vendor]
    sims = [RankSim(cfg, r, streams) for r in range(ranks)]
    names = [_file_name(cfg, r, naming, start_ns) for r in range(ranks)]
    writers = [TraceWriter(out / names[r], _head(cfg, r, naming), spelling) for r in range(ranks)]
    header = {
        "schema": "tracehouse-synth-truth/1",
        "scenario": scenario,
        "vendor": vendor,
        "seed": seed,
        "ranks": ranks,
        "layers": layers,
        "batch_size": batch_size,
        "run_label": run_label,
        "phase": PHASE[scenario],
        "anomalies": {
            "straggler": list(straggler) if straggler else None,
            "host_stall_us": host_stall_us,
            "slow_kernel": list(slow_kernel) if slow_kernel else None,
            "slow_node": [node_id(slow_node[0]), slow_node[1]] if slow_node else None,
            "fuse": list(fuse) if fuse else None,
        },
        "time_unit": "ns",
        "files": {str(r): names[r] for r in written},
        "ranks_written": written,
        "parallel": dict(zip(("tp", "pp"), megatron_grid(ranks))) if naming == "megatron" else None,
        "streams": streams,
        "device": {str(r): r for r in range(ranks)},
    }
    truth = Truth(out, header)
    stall_ns = int(host_stall_us * 1000)
    t_start = [s.h for s in sims]
    step = 0
    per_layer: dict[int, int] = {}
    layer_seq: list[str] = []
    while True:
        shape = _simulate_step(sims, step, layers, stall_ns, truth, writers)
        per_layer, layer_seq = shape if step == 0 else (per_layer, layer_seq)
        step += 1
        if progress is not None:
            progress(sum(w.bytes for w in writers), target_size or 0)
        if target_size:
            if sum(w.bytes for w in writers) >= target_size:
                break
        elif step >= steps:
            break
    for r, s in enumerate(sims):
        _close(
            writers[r],
            s,
            t_start[r],
            s.h,
            "sglang::scheduler" if scenario != "training" else "pt_main_thread",
        )
    if progress is not None and hasattr(progress, "note"):  # the ground truth of a large run takes seconds
        progress.note("writing the ground truth")
    for r in range(ranks):
        if r not in written:  # simulated with the others (its collectives coupled them), not written
            (out / names[r]).unlink()
    capture_files: list[str] = []
    if scenario == "serving-decode":
        capture_files = _write_captures(cfg, out, layers, capture_layout)
    truth.write(
        {
            "capture_files": capture_files,
            "n_steps": step,
            "layer_period": sum(per_layer.values()),
            "layer_period_by_stream": {str(k): v for k, v in sorted(per_layer.items())},
            "layer_sequence": layer_seq,
        }
    )
    return out


def _layer_shape(sim: RankSim, layers: int) -> tuple[dict[int, int], list[str]]:
    """Activities per layer, from the first step: the repeating block's kernels (by launch order)."""
    if sim.cfg.scenario == "training":
        fwd = 11  # forward kernels per block; backward adds 12 on the compute stream + 1 bucket all-reduce
        return {sim.S["main"]: fwd + 12, sim.S["comm"]: 1}, [
            a.name for a in sorted(sim.gpu, key=lambda a: a.seq)
        ][1 : 1 + fwd]
    acts = sorted(sim.gpu, key=lambda a: a.seq)
    # serving: the layer starts at the first norm kernel after the eager setup (gather, copy)
    body = acts[2 : 2 + 20 if sim.cfg.scenario == "serving-decode" else 2 + 22]
    per: dict[int, int] = {}
    for a in body:
        per[a.stream] = per.get(a.stream, 0) + 1
    return per, [a.name for a in body]


# Where capture traces go: (folder, file name of a batch size's capture on a rank, execution_details.json).
# default: ours; sglang: what `--enable-profile-cuda-graph` with SGLANG_GRAPH_BATCH_CAPTURE writes beside
# the profile, <SGLANG_TORCH_PROFILER_DIR>/graph_capture_profile/{runner_name}_bs_{bs}_rank{rank}.json.gz,
# without a details file (the batch size is in the capture annotation).
# vllm: what `--profiler-config.capture_torch_profiler` writes (vllm/profiler/graph_capture.py,
# vllm/config/profiler.py): one trace of local rank 0 for the whole capture, every shape in turn inside a
# `capture_{num_tokens}_{mode}` annotation, through torch's tensorboard_trace_handler into
# <torch_profiler_dir>/capture_traces/ as graph_capture_rank_0.<ms>.pt.trace.json.gz (VLLM_CAPTURE_FILE).
CAPTURE_LAYOUTS = {
    "default": ("capture_traces", "bs_{bs}_rank{rank}.json.gz", True),
    "sglang": ("graph_capture_profile", "DecodeCudaGraphRunner_bs_{bs}_rank{rank}.json.gz", False),
    "vllm": ("capture_traces", "graph_capture_rank_0.1765428500000.pt.trace.json.gz", False),
}
VLLM_CAPTURE_FILE = CAPTURE_LAYOUTS["vllm"][1]


def _write_vllm_capture(cfg: Cfg, cap: Path, layers: int, sizes: list[int]) -> list[str]:
    """vLLM's capture trace: rank 0 only, one file, each batch size's capture in turn (mode FULL)."""
    sim = RankSim(
        Cfg(cfg.scenario, cfg.vendor, cfg.ranks, layers, sizes[0], cfg.seed), 0, STREAMS[cfg.vendor]
    )
    sim.capture = True
    sim.h -= 3_600_000_000_000  # captured an hour before the profiled replay
    t0 = sim.h
    w = TraceWriter(cap / VLLM_CAPTURE_FILE, _head(sim.cfg, 0))
    for bs in sizes:
        sim.cfg = Cfg(cfg.scenario, cfg.vendor, cfg.ranks, layers, bs, cfg.seed)
        for _ in capture_program(sim, layers, mode="FULL"):
            pass
    sim.flush(w)
    _close(w, sim, t0, sim.h, "VllmWorker")
    return [f"{cap.name}/{VLLM_CAPTURE_FILE}"]


def _write_captures(cfg: Cfg, out: Path, layers: int, layout: str = "default") -> list[str]:
    """One capture trace per (batch size, rank), and execution_details.json, laid out as `layout` says."""
    folder, pattern, with_details = CAPTURE_LAYOUTS[layout]
    cap = out / folder
    cap.mkdir(exist_ok=True)
    if layout == "vllm":
        return _write_vllm_capture(cfg, cap, layers, sorted({max(1, cfg.batch_size // 2), cfg.batch_size}))
    details = []
    files = []
    for bs in sorted({max(1, cfg.batch_size // 2), cfg.batch_size}):
        for r in range(cfg.ranks):
            c2 = Cfg(cfg.scenario, cfg.vendor, cfg.ranks, layers, bs, cfg.seed)
            sim = RankSim(c2, r, STREAMS[cfg.vendor])
            sim.capture = True
            sim.h -= 3_600_000_000_000  # captured an hour before the profiled replay
            t0 = sim.h
            name = pattern.format(bs=bs, rank=r)
            w = TraceWriter(cap / name, _head(c2, r))
            for _ in capture_program(sim, layers):
                pass
            sim.flush(w)
            _close(w, sim, t0, sim.h, "sglang::scheduler")
            details.append({"file": name, "batch_size": bs, "mode": "FULL"})
            files.append(f"{folder}/{name}")
    if with_details:
        (cap / "execution_details.json").write_text(json.dumps(details, indent=2) + "\n")
    return files

"""Data-quality situations: traces whose figures cannot all be trusted, and the flags that must say so.

Each `expect` names the flags sql/data_quality must raise (flag -> its rank, step, severity and exact
evidence), the flags it must not raise, and the takeaway figures that must be withheld (not drawn) in the
run report because a flag covers them (reports/takeaways.py).
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

from . import situation
from .timeline import T0_NS, Timeline

US = 1_000
MS = 1_000_000


def _eager_steps(tl: Timeline, steps: int, *, host_setup: int = 20 * US, kernels: int = 6) -> dict:
    """`steps` ProfilerStep#N, each: host setup, then `kernels` eager launches of 40 us back to back,
    inside aten ops with Python frames (when the timeline records stacks). Returns the GPU totals."""
    t = 0
    n = ns = 0
    for step in range(steps):
        s0 = t
        tl.frame("train.py", 10, "train_step", s0, s0 + host_setup + kernels * 50 * US + 40 * US)
        host = s0 + host_setup
        gpu = host + 10 * US
        for i in range(kernels):
            op = tl.op("aten::mm", host, host + 6 * US)
            tl.frame("model.py", 20 + i, "forward", host, host + 6 * US)
            tl.launch("void gemm_kernel<128>()", op.start + 1 * US, gpu, 40 * US, stream=7)
            host += 8 * US
            gpu += 40 * US
            n += 1
            ns += 40 * US
        end = gpu + 20 * US
        tl.op(f"ProfilerStep#{step}", s0, end, cat="user_annotation")
        t = end + 10 * US
    return {"activities": n, "gpu_ns": ns}


@situation(
    "eager-no-stacks",
    "an eager training loop of 3 steps recorded without with_stack: no Python frame, so no launch site; "
    "the fix is with_stack=True, not capture traces",
)
def eager_no_stacks(out: Path) -> dict:
    tl = Timeline(with_stack=False)
    gpu = _eager_steps(tl, 3)
    tl.write(out / "rank-0.pt.trace.json.gz")
    return {
        "flags": {
            "no_python_stacks": {
                "rank": 0,
                "step": None,
                "severity": "warning",
                "evidence": {
                    "eager_activities": gpu["activities"],
                    "eager_gpu_ns": gpu["gpu_ns"],
                    "eager_share": 1.0,
                    "python_frames": 0,
                },
                "message_has": "with_stack=True",
                "message_lacks": "--capture",
            }
        },
        "flags_absent": [
            "graph_replays_without_captures",
            "few_steps",
            "no_gpu_activity",
            "uncounted_device_activity",
        ],
        "withheld": ["launch_sites"],
    }


@situation(
    "graph-replay-no-capture",
    "decode steps that replay one CUDA graph each, with Python stacks but without the capture traces: "
    "the only launch site of the replayed kernels is the replay call; the fix is --capture",
)
def graph_replay_no_capture(out: Path) -> dict:
    tl = Timeline()
    t = 0
    replayed = 0
    for step in range(3):
        s0 = t
        tl.frame("sglang/srt/model_executor/cuda_graph_runner.py", 300, "replay", s0 + 5 * US, s0 + 30 * US)
        kernels = [
            (f"void layer_kernel_{i}<bf16>()", 7, s0 + 40 * US + i * 30 * US, 30 * US) for i in range(8)
        ]
        tl.graph(s0 + 10 * US, kernels)
        replayed += len(kernels)
        end = s0 + 40 * US + 8 * 30 * US + 10 * US
        tl.op(f"ProfilerStep#{step}", s0, end, cat="user_annotation")
        t = end + 10 * US
    tl.write(out / "rank-0.pt.trace.json.gz")
    return {
        "flags": {
            "graph_replays_without_captures": {
                "rank": 0,
                "step": None,
                "severity": "warning",
                "evidence": {
                    "replayed_activities": replayed,
                    "without_site": replayed,
                    "without_site_gpu_ns": replayed * 30 * US,
                    "without_site_share": 1.0,
                },
                "message_has": "--capture",
            }
        },
        "flags_absent": ["no_python_stacks", "few_steps", "no_gpu_activity"],
        "flagged_figures": ["launch_sites", "kernel_summary.python_site"],
    }


@situation(
    "cpu-only",
    "a trace with host ops only (profiled without ProfilerActivity.CUDA): no GPU figure exists, and the "
    "report says so in one line",
)
def cpu_only(out: Path) -> dict:
    tl = Timeline()
    for step in range(3):
        s0 = step * 1 * MS
        tl.op(f"ProfilerStep#{step}", s0, s0 + 900 * US, cat="user_annotation")
        tl.op("aten::mm", s0 + 100 * US, s0 + 500 * US)
        tl.op("aten::relu", s0 + 600 * US, s0 + 700 * US)
    tl.write(out / "rank-0.pt.trace.json.gz")
    return {
        "flags": {
            "no_gpu_activity": {
                "rank": None,
                "step": None,
                "severity": "error",
                "evidence": {"gpu_activities": 0, "host_ops": 9},
                "message_has": "No GPU activity",
            }
        },
        "flags_absent": ["uncounted_device_activity", "no_python_stacks", "few_steps"],
        "gpu_time_ns": 0,
        "takeaways": 0,
        "no_gpu_activity": True,
    }


def _append_device_events(path: Path, events: list[dict]) -> None:
    """Add raw events to a written trace (the Timeline writes only GPU kernels, copies and fills)."""
    with gzip.open(path, "rt", encoding="utf-8") as f:
        doc = json.load(f)
    doc["traceEvents"].extend(events)
    with open(path, "wb") as raw, gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as f:
        f.write(json.dumps(doc).encode("utf-8"))  # mtime 0: the same situation gives the same bytes


def _mtia_event(name: str, start: int, dur: int, stream: int) -> dict:
    return {
        "ph": "X",
        "cat": "mtia_ccp_events",
        "name": name,
        "pid": 17,
        "tid": 3000 + stream,
        "ts": (T0_NS + start) / 1000,
        "dur": dur / 1000,
        "args": {"stream": stream},
    }


@situation(
    "unknown-device-activity",
    "an MTIA inference trace: the device's work is `mtia_ccp_events`, not GPU kernels; GPU time is 0 ns "
    "and must not be shown without a word",
)
def unknown_device_activity(out: Path) -> dict:
    tl = Timeline()
    events = []
    device_ns = 0
    for step in range(3):
        s0 = step * 1 * MS
        tl.op(f"ProfilerStep#{step}", s0, s0 + 800 * US, cat="user_annotation")
        tl.op("aten::linear", s0 + 50 * US, s0 + 150 * US)
        for i in range(4):
            dur = (100 + 10 * i) * US
            events.append(_mtia_event("pe_exe", s0 + 200 * US + i * 130 * US, dur, 108))
            device_ns += dur
    path = tl.write(out / "rank-0.pt.trace.json.gz")
    _append_device_events(path, events)
    return {
        "flags": {
            "uncounted_device_activity": {
                "rank": None,
                "step": None,
                "severity": "error",
                "evidence": {
                    "uncounted_activities": len(events),
                    "uncounted_device_ns": device_ns,
                    "counted_activities": 0,
                    "counted_gpu_ns": 0,
                },
                "message_has": "mtia_ccp_events",
            }
        },
        "flags_absent": ["no_gpu_activity"],
        "gpu_time_ns": 0,
        "takeaways": 0,
        "no_gpu_activity": True,
        "warnings": {
            "device activities of an uncounted kind (mtia_ccp_events)": len(events),
            "device time of an uncounted kind, ns (mtia_ccp_events)": device_ns,
        },
    }


@situation(
    "unknown-device-kind-beside-gpu",
    "GPU kernels and, on the same device process, activity of a category tracehouse does not know: the "
    "kernels are analysed, the rest is counted (runs.warnings) and flagged as a warning",
)
def unknown_device_kind_beside_gpu(out: Path) -> dict:
    tl = Timeline()
    gpu = _eager_steps(tl, 3)
    path = tl.write(out / "rank-0.pt.trace.json.gz")
    events = []
    device_ns = 0
    for i in range(5):
        start, dur = 2 * MS + i * 100 * US, 50 * US
        call = 900_000 + i
        events.append(
            {
                "ph": "X",
                "cat": "cuda_runtime",
                "name": "cudaLaunchCooperativeXpu",
                "pid": 4242,
                "tid": 4242,
                "ts": (T0_NS + start - 20 * US) / 1000,
                "dur": 5,
                "args": {"correlation": call},
            }
        )
        events.append(
            {
                "ph": "X",
                "cat": "xpu_task",
                "name": f"task_{i}",
                "pid": 0,
                "tid": 9,
                "ts": (T0_NS + start) / 1000,
                "dur": dur / 1000,
                "args": {"correlation": call},
            }
        )
        device_ns += dur
    _append_device_events(path, events)
    return {
        "flags": {
            "uncounted_device_activity": {
                "rank": None,
                "step": None,
                "severity": "warning",
                "evidence": {
                    "uncounted_activities": 5,
                    "uncounted_device_ns": device_ns,
                    "counted_activities": gpu["activities"],
                    "counted_gpu_ns": gpu["gpu_ns"],
                },
                "message_has": "xpu_task",
            }
        },
        "flags_absent": ["no_gpu_activity", "no_python_stacks"],
        "withheld": ["category_summary"],
        "warnings": {
            "events of unknown category": 5,
            "device activities of an uncounted kind (xpu_task)": 5,
            "device time of an uncounted kind, ns (xpu_task)": device_ns,
        },
    }


@situation(
    "single-step",
    "one profiled step whose host setup is long: the step shown is the only one, so it is no median "
    "(flagged), while its own figures are exact and its host-setup takeaway is drawn, naming the step",
)
def single_step(out: Path) -> dict:
    tl = Timeline()
    _eager_steps(tl, 1, host_setup=2 * MS)
    tl.write(out / "rank-0.pt.trace.json.gz")
    return {
        "flags": {
            "few_steps": {
                "rank": 0,
                "step": None,
                "severity": "warning",
                "evidence": {"min_steps": 1, "phases": 1},
                "message_has": "Only 1 step with GPU work",
            }
        },
        "flags_absent": ["no_python_stacks", "no_gpu_activity", "graph_replays_without_captures"],
        "withheld": [],
        "flagged_figures": ["step_breakdown.median"],
        "drawn": ["step_breakdown.host_setup"],
    }


@situation(
    "host-stall-in-step",
    "3 steps in which the host spends 3 ms in one op between two launches (no sync): the GPU waits for "
    "the host, and one host segment is most of the critical path",
)
def host_stall_in_step(out: Path) -> dict:
    tl = Timeline()
    t = 0
    for step in range(3):
        s0 = t
        tl.frame("train.py", 30, "train_step", s0 + 5 * US, s0 + 3 * MS + 50 * US)
        op = tl.op("aten::mm", s0 + 10 * US, s0 + 16 * US)
        tl.launch("void gemm_kernel<128>()", op.start + 1 * US, s0 + 20 * US, 40 * US, stream=7)
        tl.op("DataLoader.__next__", s0 + 20 * US, s0 + 20 * US + 3 * MS)
        op2 = tl.op("aten::mm", s0 + 3 * MS + 30 * US, s0 + 3 * MS + 36 * US)
        tl.launch("void gemm_kernel<128>()", op2.start + 1 * US, s0 + 3 * MS + 40 * US, 40 * US, stream=7)
        end = s0 + 3 * MS + 100 * US
        tl.op(f"ProfilerStep#{step}", s0, end, cat="user_annotation")
        t = end + 10 * US
    tl.write(out / "rank-0.pt.trace.json.gz")
    return {
        "flags": {
            "critical_path_one_host_call": {
                "rank": 0,
                "steps": [0, 1, 2],
                "severity": "warning",
                "min_share": 0.5,
            }
        },
        "flags_absent": ["no_python_stacks", "few_steps", "no_gpu_activity"],
        "withheld": [],
    }

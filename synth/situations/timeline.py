"""Timeline: a Kineto trace placed event by event at exact nanoseconds, for the situations.

The simulator (synth/sim.py) writes whole realistic runs; a situation needs one precise shape (a blocking
copy at the end of a step, a DataLoader stall, a backward thread) whose right interpretation is known
exactly. A Timeline holds host ranges, Python frames, runtime calls, GPU activities and CUDA sync records
with explicit times, and writes them in Kineto's layout (TraceWriter): External ids come from the
innermost enclosing `cpu_op` on the same thread, Python ids and parents from containment, every launch
gets its correlation and `ac2g` flow pair.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..catalog import device_properties
from ..kineto import TraceWriter

T0_NS = 1_765_000_000_000_000_000 // 1000 * 1000  # epoch-scale ns, as real traces carry
MAIN_TID = 4242
PID = 4242

NV_CALLS = {
    "kernel": "cudaLaunchKernel",
    "memcpy": "cudaMemcpyAsync",
    "memset": "cudaMemsetAsync",
    "graph": "cudaGraphLaunch",
    "record": "cudaEventRecord",
    "wait": "cudaStreamWaitEvent",
    "stream_sync": "cudaStreamSynchronize",
    "device_sync": "cudaDeviceSynchronize",
}
AMD_CALLS = {
    "kernel": "hipLaunchKernel",
    "memcpy": "hipMemcpyAsync",
    "memset": "hipMemsetAsync",
    "graph": "hipGraphLaunch",
    "record": "hipEventRecord",
    "wait": "hipStreamWaitEvent",
    "stream_sync": "hipStreamSynchronize",
    "device_sync": "hipDeviceSynchronize",
}
GPU_CAT = {"kernel": "kernel", "memcpy": "gpu_memcpy", "memset": "gpu_memset"}


@dataclass
class Range:
    cat: str
    name: str
    tid: int
    start: int
    end: int
    args: dict[str, Any] = field(default_factory=dict)
    pid: int | None = None  # None: the process's (PID); Kineto writes its overhead records on pid -1


@dataclass
class Gpu:
    kind: str  # kernel / memcpy / memset
    name: str
    stream: int
    start: int
    end: int
    corr: int | None  # None: no launch call in the trace
    call: Range | None
    args: dict[str, Any] = field(default_factory=dict)


class Timeline:
    """One rank's trace. Times are ns from the trace's start (T0_NS is added when written)."""

    def __init__(
        self,
        vendor: str = "nvidia",
        *,
        with_stack: bool = True,
        rank: int = 0,
        world_size: int = 1,
        device_name: str | None = None,
    ):
        self.vendor = vendor
        self.calls = AMD_CALLS if vendor == "amd" else NV_CALLS
        self.with_stack = with_stack
        self.rank, self.world_size = rank, world_size
        self.device_name = device_name
        self.ranges: list[Range] = []
        self.gpu: list[Gpu] = []
        self.syncs: list[tuple[str, int, int, int, int, dict]] = []  # (kind, stream, start, end, corr, extra)
        self._corr = 100

    # ---- host -----------------------------------------------------------------------------------
    def op(
        self,
        name: str,
        start: int,
        end: int,
        *,
        tid: int = MAIN_TID,
        cat: str = "cpu_op",
        args: dict | None = None,
    ) -> Range:
        """A host range: a `cpu_op` (aten op), `user_annotation` (ProfilerStep#N, a serving stage) ..."""
        r = Range(cat, name, tid, start, end, dict(args or {}))
        self.ranges.append(r)
        return r

    def frame(
        self, file: str, line: int, func: str, start: int, end: int, *, tid: int = MAIN_TID
    ) -> Range | None:
        """A `python_function` frame `file(line): func` (left out of traces recorded without stacks)."""
        if not self.with_stack:
            return None
        return self.op(f"{file}({line}): {func}", start, end, tid=tid, cat="python_function")

    def module(self, name: str, start: int, end: int, *, tid: int = MAIN_TID) -> Range | None:
        """An `nn.Module: Name_0` frame, as PyTorch records it with with_stack=True."""
        if not self.with_stack:
            return None
        return self.op(
            f"nn.Module: {name}", start, end, tid=tid, cat="python_function", args={"Python module id": 0}
        )

    def call(self, name: str, start: int, end: int, *, tid: int = MAIN_TID) -> Range:
        """A runtime call with a correlation of its own (cudaEventRecord, a sync, cudaGetDevice ...)."""
        self._corr += 1
        cat = "cuda_driver" if name.startswith("cu") and not name.startswith("cuda") else "cuda_runtime"
        return self.op(name, start, end, tid=tid, cat=cat, args={"correlation": self._corr})

    # ---- GPU ------------------------------------------------------------------------------------
    def launch(
        self,
        name: str,
        host_start: int,
        gpu_start: int,
        gpu_dur: int,
        *,
        stream: int = 7,
        kind: str = "kernel",
        call: str | None = None,
        call_dur: int = 4_000,
        tid: int = MAIN_TID,
        args: dict | None = None,
    ) -> Gpu:
        """A launch call on the host and the GPU activity it launched (correlation + ac2g flow)."""
        c = self.call(call or self.calls[kind], host_start, host_start + call_dur, tid=tid)
        g = Gpu(
            kind, name, stream, gpu_start, gpu_start + gpu_dur, c.args["correlation"], c, dict(args or {})
        )
        self.gpu.append(g)
        return g

    def graph(
        self,
        host_start: int,
        kernels: list[tuple[str, int, int, int]],
        *,
        call_dur: int = 12_000,
        tid: int = MAIN_TID,
    ) -> list[Gpu]:
        """One graph launch replaying (name, stream, gpu_start, gpu_dur) activities, all on its correlation."""
        c = self.call(self.calls["graph"], host_start, host_start + call_dur, tid=tid)
        out = []
        for name, stream, start, dur in kernels:
            g = Gpu("kernel", name, stream, start, start + dur, c.args["correlation"], c)
            self.gpu.append(g)
            out.append(g)
        return out

    def stream_sync(self, start: int, end: int, stream: int, *, tid: int = MAIN_TID) -> Range:
        """cudaStreamSynchronize from start to end, with CUPTI's "Stream Sync" record on the stream."""
        c = self.call(self.calls["stream_sync"], start, end, tid=tid)
        if self.vendor == "nvidia":
            self.syncs.append(("Stream Sync", stream, start + 500, end, c.args["correlation"], {}))
        return c

    def record_and_wait(
        self, record_at: int, wait_at: int, src_stream: int, dst_stream: int, *, tid: int = MAIN_TID
    ) -> None:
        """cudaEventRecord on src_stream, then cudaStreamWaitEvent on dst_stream (with its sync record)."""
        rec = self.call(self.calls["record"], record_at, record_at + 2_000, tid=tid)
        w = self.call(self.calls["wait"], wait_at, wait_at + 2_000, tid=tid)
        self.syncs.append(
            (
                "Stream Wait Event",
                dst_stream,
                wait_at + 800,
                wait_at + 2_000,
                w.args["correlation"],
                {"wait_on_stream": src_stream, "wait_on_cuda_event_record_corr_id": rec.args["correlation"]},
            )
        )

    # ---- writing --------------------------------------------------------------------------------
    def _ids(self) -> None:
        """External ids (innermost enclosing cpu_op / user_annotation) and Python ids (containment)."""
        ext = 0
        by_tid: dict[int, list[Range]] = {}
        for r in sorted(self.ranges, key=lambda r: (r.start, -r.end)):
            by_tid.setdefault(r.tid, []).append(r)
        py_id = 1_000
        for tid, rs in by_tid.items():
            ops: list[Range] = []  # open cpu_op stack
            frames: list[Range] = []  # open python frame stack
            for r in rs:
                while ops and ops[-1].end <= r.start:
                    ops.pop()
                while frames and frames[-1].end <= r.start:
                    frames.pop()
                if r.cat in ("cpu_op", "user_annotation"):
                    ext += 1
                    r.args.setdefault("External id", ext)
                    ops.append(r)
                elif r.cat == "python_function":
                    py_id += 1
                    r.args.update(
                        {
                            "Python id": py_id,
                            "Python parent id": frames[-1].args["Python id"] if frames else tid,
                        }
                    )
                    frames.append(r)
                elif ops:
                    r.args.setdefault("External id", ops[-1].args["External id"])

    def write(self, path: Path, *, distributed: bool | None = None) -> Path:
        self._ids()
        head: dict[str, Any] = {"schemaVersion": 1}
        props = device_properties(self.vendor, 1)
        if self.device_name:
            props[0]["name"] = self.device_name
        head["deviceProperties"] = props
        if distributed or (distributed is None and self.world_size > 1):
            head["distributedInfo"] = {"backend": "nccl", "rank": self.rank, "world_size": self.world_size}
        head.update({"record_shapes": 1, "with_stack": int(self.with_stack)})
        path.parent.mkdir(parents=True, exist_ok=True)
        w = TraceWriter(path, head)
        events: list[tuple[int, int, Any]] = []
        for r in self.ranges:
            events.append((r.start, 0, r))
        for g in self.gpu:
            events.append((g.start, 1, g))
        events.sort(key=lambda e: (e[0], e[1], -(e[2].end if hasattr(e[2], "end") else 0)))
        dev = self.rank
        sync_corrs = {
            corr for _, _, _, _, corr, _ in self.syncs
        }  # Kineto links a sync record to its call too
        for _, _, e in events:
            if isinstance(e, Range):
                w.x(
                    e.cat,
                    e.name,
                    PID if e.pid is None else e.pid,
                    e.tid,
                    T0_NS + e.start,
                    e.end - e.start,
                    e.args,
                )
                if e.cat.startswith("cuda_") and (
                    any(g.call is e for g in self.gpu if g.call is not None)
                    or e.args.get("correlation") in sync_corrs
                ):
                    w.flow("s", e.args["correlation"], PID, e.tid, T0_NS + e.start)
            else:
                args: dict[str, Any] = {"device": dev, "stream": e.stream}
                if e.corr is not None:
                    args["correlation"] = e.corr
                    ext = e.call.args.get("External id") if e.call else None
                    if ext is not None:
                        args["External id"] = ext
                if e.kind == "kernel":
                    args.update({"grid": [132, 1, 1], "block": [256, 1, 1]})
                args.update(e.args)
                w.x(GPU_CAT[e.kind], e.name, dev, e.stream, T0_NS + e.start, e.end - e.start, args)
                if e.corr is not None:
                    w.flow("f", e.corr, dev, e.stream, T0_NS + e.start)
        for kind, stream, start, end, corr, extra in self.syncs:
            w.x(
                "cuda_sync",
                kind,
                dev,
                stream,
                T0_NS + start,
                end - start,
                {"cuda_sync_kind": kind, **extra, "stream": stream, "correlation": corr, "device": dev},
            )
            w.flow("f", corr, dev, stream, T0_NS + start)
        end = max([r.end for r in self.ranges] + [g.end for g in self.gpu] + [0])
        w.meta("process_name", PID, 0, T0_NS, {"name": "python3"})
        w.meta("process_name", dev, 0, T0_NS, {"name": "python3"})
        w.meta("process_labels", dev, 0, T0_NS, {"labels": f"GPU {dev}"})
        for s in sorted({g.stream for g in self.gpu}):
            w.meta("thread_name", dev, s, T0_NS, {"name": f"stream {s} "})
        for tid in sorted({r.tid for r in self.ranges if r.pid is None}):
            w.meta("thread_name", PID, tid, T0_NS, {"name": f"thread {tid}"})
        w.x("Trace", "PyTorch Profiler (0)", "Spans", "PyTorch Profiler", T0_NS, end, {"Op count": 0})
        w.close({"traceName": path.name, "displayTimeUnit": "ms", "baseTimeNanoseconds": 0})
        return path

"""Streaming writer of Kineto (PyTorch profiler) JSON traces.

Events are formatted one at a time and written straight into a gzip stream, so a multi-GB trace never
exists in memory. Timestamps come in as integer nanoseconds and are printed exactly as Kineto does at
ns resolution (`1765432100123456.789`): the integer and the three decimals are formatted separately, so
the text carries the exact schedule even where a float64 could not (epoch µs × 1000 > 2**53).
The layout (one object per event, metadata events at the end, top-level keys after `traceEvents`)
follows the Kineto traces in ../shared/traces.

`spelling` renders the same events as an older profiler wrote them (docs/tables.md, "Kineto traces"):
- "modern": Kineto since 2022 (cpu_op, cuda_runtime, kernel, gpu_memcpy, `ac2g` flows ...);
- "kineto-2021": the 2021 Kineto of PyTorch 1.8/1.9 (libkineto output_json.cpp of that year): host
  ranges `Operator` (ops and annotations alike), `Runtime` (`Driver` for driver calls), `Kernel` /
  `Memcpy` / `Memset` on tid "stream N", GPU-side annotations `User` on "stream N user", `external id`
  in lower case on runtime and GPU events, CPU->GPU flows `async`/`launch` written only for launches and
  copies; no Python frames and no CUDA sync records (that version had neither);
- "autograd": torch.autograd.profiler.profile(use_cuda=True).export_chrome_trace of PyTorch <= 1.7: a
  bare JSON array; ops without a category on pid "CPU functions" (tid = the thread), GPU work without a
  category on pid "CUDA functions" (tid = the device), a `cpu_to_cuda` flow from the op's start (the
  profiler recorded no runtime call) to the activity; nothing else (no metadata, frames, runtime calls).
"""

from __future__ import annotations

import gzip
import re
from pathlib import Path
from typing import Any

import orjson


def us(ns: int) -> str:
    """Integer ns → Kineto µs text with exactly three decimals (never through a float)."""
    if ns < 0:
        return "-" + us(-ns)
    return f"{ns // 1000}.{ns % 1000:03d}"


def _j(v: Any) -> str:
    return orjson.dumps(v).decode()


SPELLINGS = ("modern", "kineto-2021", "autograd")

# modern category -> the 2021 Kineto's (categories not listed are written as they are)
KINETO_2021 = {
    "cpu_op": "Operator",
    "user_annotation": "Operator",
    "cuda_runtime": "Runtime",
    "cuda_driver": "Driver",
    "kernel": "Kernel",
    "gpu_memcpy": "Memcpy",
    "gpu_memset": "Memset",
    "gpu_user_annotation": "User",
}
GPU_SIDE = {"kernel", "gpu_memcpy", "gpu_memset", "gpu_user_annotation", "cuda_sync"}
RUNTIME = {"cuda_runtime", "cuda_driver"}
NOT_IN = {  # what each older spelling never wrote
    "kineto-2021": {"python_function", "cuda_sync"},
    "autograd": {
        "python_function",
        "cuda_sync",
        "cuda_runtime",
        "cuda_driver",
        "gpu_user_annotation",
        "Trace",
    },
}
# runtime calls the old profilers drew a CPU->GPU flow from (launches and copies, not syncs or waits)
LINKED_CALL = re.compile(r"Launch|Memcpy|Memset")


class TraceWriter:
    """One Kineto trace file. `head` keys go before `traceEvents`, `tail` keys after it; `spelling`: the
    profiler version whose spelling the events are written in (SPELLINGS, module docstring)."""

    def __init__(self, path: Path, head: dict[str, Any], spelling: str = "modern"):
        if spelling not in SPELLINGS:
            raise ValueError(f"unknown spelling {spelling!r}; choose one of {', '.join(SPELLINGS)}")
        self.path = path
        self.spelling = spelling
        # mtime=0 and a fixed level keep the gzip bytes identical for identical content (determinism test).
        self._raw = open(path, "wb")  # noqa: SIM115 - lives until close(), across many steps
        self._gz = gzip.GzipFile(filename="", mode="wb", fileobj=self._raw, compresslevel=1, mtime=0)
        self.bytes = 0
        self._first = True
        # older spellings: the last runtime call and GPU activity written, the flows started, open ops
        self._last_call = ""
        self._last_gpu = ""
        self._started: set[int] = set()
        self._ops: dict[Any, list[tuple[int, int, str]]] = {}  # host thread -> open ops (start, end, name)
        if spelling == "autograd":
            self._put("[\n")
            return
        parts = ["{\n"] + [f"  {_j(k)}: {_j(v)},\n" for k, v in head.items()] + ['  "traceEvents": [\n']
        self._put("".join(parts))

    def _put(self, s: str) -> None:
        b = s.encode()
        self.bytes += len(b)
        self._gz.write(b)

    def _event(self, body: str) -> None:
        self._put(("  {" if self._first else ",\n  {") + body + "}")
        self._first = False

    def x(self, cat: str, name: str, pid: Any, tid: Any, ts: int, dur: int, args: dict | None) -> None:
        if self.spelling != "modern":
            if cat in RUNTIME:
                self._last_call = name
            if cat in NOT_IN[self.spelling]:
                return
            if self.spelling == "autograd":
                self._autograd_x(cat, name, pid, tid, ts, dur)
                return
            if cat in GPU_SIDE:
                self._last_gpu = name
                tid = f"stream {tid} user" if cat == "gpu_user_annotation" else f"stream {tid}"
            if (
                args
                and "External id" in args
                and (cat in RUNTIME or cat in GPU_SIDE)
                and cat != "gpu_user_annotation"
            ):
                args = {("external id" if k == "External id" else k): v for k, v in args.items()}
            cat = KINETO_2021.get(cat, cat)
        body = (
            f'"ph": "X", "cat": {_j(cat)}, "name": {_j(name)}, "pid": {_j(pid)}, "tid": {_j(tid)}, '
            f'"ts": {us(ts)}, "dur": {us(dur)}'
        )
        if args is not None:
            body += f', "args": {_j(args)}'
        self._event(body)

    def _autograd_x(self, cat: str, name: str, pid: Any, tid: Any, ts: int, dur: int) -> None:
        """An op (pid "CPU functions") or a GPU activity (pid "CUDA functions", tid = the device: `pid`)."""
        if cat in GPU_SIDE:
            self._last_gpu = name
            pid, tid = "CUDA functions", pid
        else:
            ops = self._ops.setdefault(tid, [])
            while ops and ops[-1][1] <= ts:
                ops.pop()
            ops.append((ts, ts + dur, name))
            pid = "CPU functions"
        self._event(
            f'"name": {_j(name)}, "ph": "X", "ts": {us(ts)}, "dur": {us(dur)}, "tid": {_j(tid)}, '
            f'"pid": {_j(pid)}, "args": {{}}'
        )

    def flow(self, ph: str, fid: int, pid: Any, tid: Any, ts: int, cat: str = "ac2g") -> None:
        if self.spelling != "modern":
            self._old_flow(ph, fid, pid, tid, ts)
            return
        body = f'"ph": "{ph}", "id": {fid}, "pid": {_j(pid)}, "tid": {_j(tid)}, "ts": {us(ts)}, "cat": "{cat}", "name": "{cat}"'
        if ph == "f":
            body += ', "bp": "e"'
        self._event(body)

    def _old_flow(self, ph: str, fid: int, pid: Any, tid: Any, ts: int) -> None:
        """A CPU->GPU flow as the 2021 Kineto or the autograd profiler drew it: only from a launch or a
        copy (its start follows the call, its end the activity)."""
        if ph == "s":
            if not LINKED_CALL.search(self._last_call):
                return
            self._started.add(fid)
        elif fid not in self._started:
            return
        if self.spelling == "kineto-2021":
            tid = f"stream {tid}" if ph == "f" else tid
            end = ', "bp": "e"' if ph == "f" else ""
            self._event(
                f'"ph": "{ph}", "id": {fid}, "pid": {_j(pid)}, "tid": {_j(tid)}, "ts": {us(ts)}, '
                f'"cat": "async", "name": "launch"{end}'
            )
            return
        if ph == "s":  # from the start of the innermost op around the call
            ops = [op for op in self._ops.get(tid, []) if op[0] <= ts < op[1]]
            if not ops:
                self._started.discard(fid)
                return
            ts, name, pid = ops[-1][0], ops[-1][2], "CPU functions"
        else:
            name, pid, tid = self._last_gpu, "CUDA functions", pid
        self._event(
            f'"name": {_j(name)}, "ph": "{ph}", "ts": {us(ts)}, "tid": {_j(tid)}, "pid": {_j(pid)}, '
            f'"id": {fid}, "cat": "cpu_to_cuda", "args": {{}}'
        )

    def meta(self, name: str, pid: Any, tid: Any, ts: int, args: dict) -> None:
        if self.spelling == "autograd":
            return
        self._event(
            f'"name": "{name}", "ph": "M", "ts": {us(ts)}, "pid": {_j(pid)}, "tid": {_j(tid)}, "args": {_j(args)}'
        )

    def instant(self, name: str, pid: Any, tid: Any, ts: int) -> None:
        if self.spelling == "autograd":
            return
        self._event(
            f'"name": {_j(name)}, "ph": "i", "s": "g", "pid": {_j(pid)}, "tid": {_j(tid)}, "ts": {us(ts)}'
        )

    def close(self, tail: dict[str, Any]) -> None:
        if self.spelling == "autograd":
            tail = {}
        closing = "\n" if self.spelling == "autograd" else "\n}\n"
        parts = ["\n  ]"] + [f",\n  {_j(k)}: {_j(v)}" for k, v in tail.items()] + [closing]
        self._put("".join(parts))
        self._gz.close()
        self._raw.close()

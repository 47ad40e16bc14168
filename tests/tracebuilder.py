"""Tiny hand-written Kineto traces for behaviour tests (the synthesizer makes the realistic ones)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

BASE_US = 1_700_000_000_000_000  # epoch µs, like real traces


def launch_pair(
    corr: int,
    host_us: float,
    gpu_us: float,
    dur_us: float,
    name: str = "void gemm_kernel<1>()",
    stream: int = 7,
    tid: int = 100,
) -> list[dict]:
    """A cudaLaunchKernel on the host and the kernel it launched, linked by correlation and a flow."""
    return [
        {
            "ph": "X",
            "cat": "cuda_runtime",
            "name": "cudaLaunchKernel",
            "pid": 1,
            "tid": tid,
            "ts": BASE_US + host_us,
            "dur": 2.5,
            "args": {"correlation": corr, "External id": corr},
        },
        {
            "ph": "X",
            "cat": "kernel",
            "name": name,
            "pid": 0,
            "tid": stream,
            "ts": BASE_US + gpu_us,
            "dur": dur_us,
            "args": {"correlation": corr, "External id": corr, "device": 0, "stream": stream},
        },
        {"ph": "s", "cat": "ac2g", "name": "ac2g", "id": corr, "pid": 1, "tid": tid, "ts": BASE_US + host_us},
        {
            "ph": "f",
            "cat": "ac2g",
            "name": "ac2g",
            "id": corr,
            "pid": 0,
            "tid": stream,
            "ts": BASE_US + gpu_us,
            "bp": "e",
        },
    ]


def simple_events() -> list[dict]:
    events = [
        {
            "ph": "X",
            "cat": "cpu_op",
            "name": "aten::mm",
            "pid": 1,
            "tid": 100,
            "ts": BASE_US + 0.0,
            "dur": 15.0,
            "args": {"External id": 1},
        }
    ]
    events += launch_pair(11, 1.0, 10.0, 5.25)
    events += launch_pair(12, 20.0, 16.0, 0.875, name="void rmsnorm_kernel()")
    return events


def write_trace(path: Path, events: list[dict], meta: dict | None = None, gz: bool = True) -> Path:
    doc = {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "NVIDIA H100 80GB HBM3"}]}
    doc.update(meta or {})
    doc["traceEvents"] = events
    doc["traceName"] = str(path)
    data = json.dumps(doc, indent=2).encode()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gzip.compress(data, mtime=0) if gz else data)
    return path

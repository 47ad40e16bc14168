"""ground_truth.json: every figure of a synthetic run, computed from the simulated schedule itself.

Nothing here calls tracehouse; the numbers come from the integer-ns schedule in `sim.RankSim.gpu`, so
comparing them with what tracehouse computes from the written trace tests ingest + SQL end to end.
All times are integer nanoseconds (timestamps: ns since the Unix epoch, i.e. Kineto `ts` × 1000).

Layout (keys of the top-level object):
- `schema`: "tracehouse-synth-truth/1"; `scenario`, `vendor`, `seed`, `ranks`, `layers`, `batch_size`,
  `run_label`, `phase` (prefill | decode | unknown), `anomalies` {straggler: [rank, us] | null,
  host_stall_us, slow_kernel: [regex, factor] | null}, `time_unit`: "ns".
- `files`: {rank (str): trace file name}; `capture_files`: [names under capture_traces/].
- `streams`: {"main": id, "side": id, "comm": id} (Kineto stream ids = GPU tid), `device`: {rank: device}.
- `kernel_categories`: {kernel name: intended category (PRODUCT.md vocabulary)}.
- `layer_period`: GPU activities per transformer layer (all streams); `layer_period_by_stream`:
  {stream: activities per layer on it}; `layer_sequence`: kernel names of one layer in launch order.
- `ranks_summary`: list, one per rank: {rank, device, n_steps, first_start_ns, last_end_ns, span_ns,
  busy_ns, compute_ns, exposed_comm_ns, exposed_memory_ns, idle_ns, n_activities, n_linked,
  category_ns {cat: ns}, kernels {name: {time_ns, count}}, streams {stream: {busy_ns, exclusive_ns,
  count}}}. Whole-rank union figures; steps never overlap in GPU time, so busy etc. are step sums.
- `steps`: list, one per (rank, step): {rank, step, phase, host_start_ns, host_end_ns (the step's
  annotation: `step[...]` or `ProfilerStep#N`), gpu_start_ns, gpu_end_ns, span_ns, busy_ns, compute_ns,
  exposed_comm_ns, exposed_memory_ns, idle_ns, n_activities, n_linked, category_ns, kernels {name:
  [time_ns, count]}, streams {stream: [busy_ns, exclusive_ns, count]}, graph_launches (int),
  launch_sites (key into `launch_site_templates`)}.
  Identity: compute_ns + exposed_comm_ns + exposed_memory_ns + idle_ns == span_ns (exactly).
  compute = union of activities whose category is neither communication nor memory; exposed_comm =
  |union(comm) − union(compute)|; exposed_memory = |union(memory) − union(compute ∪ comm)|.
  exclusive_ns of a stream = |union(stream) − union(other streams of the device)|.
- `launch_site_templates`: {key: [[kernel name, file, line, function], ...]}, one entry per GPU activity
  of a step in *ordinal* order = sorted by (stream, start_ns, launch order): stream-major, because a
  stream runs its work in launch order, so the order is the same in every step and every rank (one
  template per program) and ingest can rebuild it from the trace alone, graph replays included. The site is the innermost
  `python_function` frame around the launch call; for graph replays it is the site of the same launch in
  the capture trace (capture_traces/), since the replay itself has no Python stack. Memcpy/memset
  entries carry the innermost frame at their copy call.
- `collectives`: list, one per collective instance: {key "step:n", step, name, category, start_ns
  [per rank], end_ns [per rank], start_skew_ns [per rank: start − min start], end_skew_ns [per rank],
  last_rank (arrived last), max_start_skew_ns}.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import orjson

from .sim import Act, RankSim

COMM = "communication"
MEM = "memory"


def merge(iv: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[list[int]] = []
    for s, e in sorted(iv):
        if e <= s:
            continue
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return [(s, e) for s, e in out]


def length(m: list[tuple[int, int]]) -> int:
    return sum(e - s for s, e in m)


def minus(a: list[tuple[int, int]], b: list[tuple[int, int]]) -> int:
    """|a − b| for merged interval lists."""
    total, j = 0, 0
    for s, e in a:
        cur = s
        while j < len(b) and b[j][1] <= cur:
            j += 1
        k = j
        while k < len(b) and b[k][0] < e:
            if b[k][0] > cur:
                total += b[k][0] - cur
            cur = max(cur, b[k][1])
            if cur >= e:
                break
            k += 1
        if cur < e:
            total += e - cur
    return total


def step_metrics(acts: list[Act]) -> dict[str, Any]:
    iv = [(a.start, a.end) for a in acts]
    comp = merge([(a.start, a.end) for a in acts if a.category not in (COMM, MEM)])
    comm = merge([(a.start, a.end) for a in acts if a.category == COMM])
    mem = merge([(a.start, a.end) for a in acts if a.category == MEM])
    busy = length(merge(iv))
    first = min(a.start for a in acts)
    last = max(a.end for a in acts)
    span = last - first
    cats: dict[str, int] = {}
    kern: dict[str, list[int]] = {}
    for a in acts:
        cats[a.category] = cats.get(a.category, 0) + a.dur
        kv = kern.setdefault(a.name, [0, 0])
        kv[0] += a.dur
        kv[1] += 1
    streams: dict[str, list[int]] = {}
    by_stream: dict[int, list[tuple[int, int]]] = {}
    for a in acts:
        by_stream.setdefault(a.stream, []).append((a.start, a.end))
    for s, lst in by_stream.items():
        own = merge(lst)
        other = merge([x for t, l2 in by_stream.items() if t != s for x in l2])
        streams[str(s)] = [length(own), minus(own, other), len(lst)]
    res = {
        "gpu_start_ns": first, "gpu_end_ns": last, "span_ns": span, "busy_ns": busy,
        "compute_ns": length(comp), "exposed_comm_ns": minus(comm, comp),
        "exposed_memory_ns": minus(mem, merge(comp + comm)), "idle_ns": span - busy,
        "n_activities": len(acts), "n_linked": len(acts),
        "category_ns": dict(sorted(cats.items())), "kernels": dict(sorted(kern.items())), "streams": streams,
    }
    assert res["compute_ns"] + res["exposed_comm_ns"] + res["exposed_memory_ns"] + res["idle_ns"] == span
    return res


class Truth:
    """Accumulates per-step rows on disk (bounded memory for --target-size) and writes the JSON at the end."""

    def __init__(self, out: Path, header: dict[str, Any]):
        self.out = out
        self.header = header
        self.categories: dict[str, str] = {}
        self.templates: dict[tuple, str] = {}
        self.ranks: dict[int, dict[str, Any]] = {}
        self.prev_end: dict[int, int] = {}
        self._steps = open(out / ".ground_truth.steps.tmp", "wb")  # noqa: SIM115 - open for the whole run
        self._colls = open(out / ".ground_truth.colls.tmp", "wb")  # noqa: SIM115 - open for the whole run
        self._nsteps = 0
        self._ncolls = 0

    def on_collective(self, acts: list[Act], last_start: int) -> None:
        starts = [a.start for a in acts]
        ends = [a.end for a in acts]
        lo, elo = min(starts), min(ends)
        row = {"key": acts[0].coll, "step": int(acts[0].coll.split(":")[0]), "name": acts[0].name,
               "category": acts[0].category, "start_ns": starts, "end_ns": ends,
               "start_skew_ns": [s - lo for s in starts], "end_skew_ns": [e - elo for e in ends],
               "last_rank": starts.index(last_start), "max_start_skew_ns": last_start - lo}
        self._colls.write((b",\n" if self._ncolls else b"") + orjson.dumps(row))
        self._ncolls += 1

    def add_step(self, rank: int, step: int, sim: RankSim, phase: str, graph_launches: int,
                 host: tuple[int, int]) -> None:
        acts = sim.gpu
        if not acts:
            return
        for a in acts:
            self.categories.setdefault(a.name, a.category)
        m = step_metrics(acts)
        if rank in self.prev_end and m["gpu_start_ns"] < self.prev_end[rank]:
            raise AssertionError("synthetic steps overlap on the GPU; whole-rank sums would be wrong")
        self.prev_end[rank] = m["gpu_end_ns"]
        order = sorted(acts, key=lambda a: (a.stream, a.start, a.seq))
        sites = tuple((a.name, *(a.site or ("", 0, ""))) for a in order)
        key = self.templates.get(sites)
        if key is None:
            key = self.templates[sites] = f"t{len(self.templates)}"
        row = {"rank": rank, "step": step, "phase": phase, "host_start_ns": host[0], "host_end_ns": host[1],
               **m, "graph_launches": graph_launches, "launch_sites": key}
        self._steps.write((b",\n" if self._nsteps else b"") + orjson.dumps(row))
        self._nsteps += 1
        r = self.ranks.setdefault(rank, {"rank": rank, "device": sim.device, "n_steps": 0,
                                         "first_start_ns": m["gpu_start_ns"], "busy_ns": 0, "compute_ns": 0,
                                         "exposed_comm_ns": 0, "exposed_memory_ns": 0, "n_activities": 0,
                                         "n_linked": 0, "category_ns": {}, "kernels": {}, "streams": {}})
        r["n_steps"] += 1
        r["last_end_ns"] = m["gpu_end_ns"]
        for k in ("busy_ns", "compute_ns", "exposed_comm_ns", "exposed_memory_ns", "n_activities", "n_linked"):
            r[k] += m[k]
        for c, v in m["category_ns"].items():
            r["category_ns"][c] = r["category_ns"].get(c, 0) + v
        for n, (t, c) in m["kernels"].items():
            kv = r["kernels"].setdefault(n, {"time_ns": 0, "count": 0})
            kv["time_ns"] += t
            kv["count"] += c
        for s, (b, x, c) in m["streams"].items():
            sv = r["streams"].setdefault(s, {"busy_ns": 0, "exclusive_ns": 0, "count": 0})
            sv["busy_ns"] += b
            sv["exclusive_ns"] += x
            sv["count"] += c

    def write(self, extra: dict[str, Any]) -> Path:
        self._steps.close()
        self._colls.close()
        summary = []
        for rank in sorted(self.ranks):
            r = dict(self.ranks[rank])
            r["span_ns"] = r["last_end_ns"] - r["first_start_ns"]
            r["idle_ns"] = r["span_ns"] - r["busy_ns"]
            r["category_ns"] = dict(sorted(r["category_ns"].items()))
            r["kernels"] = dict(sorted(r["kernels"].items()))
            summary.append(r)
        head = {**self.header, **extra, "kernel_categories": dict(sorted(self.categories.items())),
                "ranks_summary": summary,
                "launch_site_templates": {v: [list(x) for x in k] for k, v in self.templates.items()}}
        path = self.out / "ground_truth.json"
        tmp_steps = self.out / ".ground_truth.steps.tmp"
        tmp_colls = self.out / ".ground_truth.colls.tmp"
        with open(path, "wb") as f:
            body = json.dumps(head, indent=1)
            f.write(body[:-2].encode() + b',\n "steps": [\n')
            _copy(tmp_steps, f)
            f.write(b'\n ],\n "collectives": [\n')
            _copy(tmp_colls, f)
            f.write(b"\n ]\n}\n")
        os.remove(tmp_steps)
        os.remove(tmp_colls)
        return path


def _copy(src: Path, dst) -> None:
    with open(src, "rb") as f:
        while chunk := f.read(1 << 20):
            dst.write(chunk)

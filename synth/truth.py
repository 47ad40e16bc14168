"""ground_truth.json: every figure of a synthetic run, computed from the simulated schedule itself.

Where it is written: `ground_truth.json` beside the traces, or `ground_truth.json.gz` (gzip, same JSON)
when the uncompressed JSON would be over COMPRESS_OVER bytes (a `--target-size` run: its per-step rows
are several times the size of the gzipped traces). Read it with `load_truth(folder)`, whichever it is.

Nothing here calls tracehouse; the numbers come from the integer-ns schedule in `sim.RankSim.gpu`, so
comparing them with what tracehouse computes from the written trace tests ingest + SQL end to end.
All times are integer nanoseconds (timestamps: ns since the Unix epoch, i.e. Kineto `ts` × 1000).

Layout (keys of the top-level object):
- `schema`: "tracehouse-synth-truth/1"; `scenario`, `vendor`, `seed`, `ranks`, `layers`, `batch_size`,
  `run_label`, `phase` (prefill | decode | unknown), `anomalies` {straggler: [rank, us] | null,
  host_stall_us, slow_kernel: [regex, factor] | null, slow_node: [graph node id, factor] | null (the
  replayed node that runs slower; write_scenario's slow_node), fuse: [step regex, ...] | null (the fusion
  pattern whose chains ran fused; write_scenario's fuse)}, `time_unit`: "ns".
- `files`: {rank (str): trace file name}; `capture_files`: [names under capture_traces/]; `parallel`:
  {tp, pp} of the 'megatron' naming (files `TP-<t>-PP-<p>`, Megatron's process groups), else null.
- `streams`: {"main": id, "side": id, "comm": id} (Kineto stream ids = GPU tid), `device`: {rank: device}.
- `kernel_categories`: {kernel name: intended category (docs/words.md vocabulary)}.
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
  n_with_op (activities launched inside a cpu_op), launch_sites (key into `launch_site_templates`)};
  graph_nodes (runs written with graph_nodes=True only): per activity in the launch-site order, [graph
  node id, annotated module FQN, annotated collective] (nulls where not replayed; synth/graph_nodes.py).
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
- `steps[i].critical_path`: the step's critical path (view `critical_path`, docs/interpretation.md), walked over the
  dependencies the simulator created *and the trace records*: stream order; each activity's launch call
  (cudaGraphLaunch for a replayed kernel); a traced cudaEventRecord -> cudaStreamWaitEvent (NVIDIA, eager:
  the first activity launched on the waiting stream after the wait depends on the last activity launched
  on the recorded stream before the record); an event wait the trace does not record (inside a graph
  replay; on AMD, which writes no cuda_sync record): the same dependency, edge `inferred_wait` (only its
  timing shows it: ties go to every other candidate); cudaStreamSynchronize (the host call waits for the last activity launched on the stream
  before it: the synced stream on NVIDIA, whose "Stream Sync" record names it, every stream on AMD, where
  nothing names it); host program order of the CUDA calls. The rule is the product's: start at the
  activity that ends last; at each node take the dependency satisfied last (ready times: an activity's
  end; a launch call's end, or a graph launch's start, both clamped to the activity's start; ties go to
  stream order, then the event wait, then the launch); a sync call is a `sync_wait` on its awaited activity
  when that ended after the call began, otherwise host program order. The walk stops at a dependency
  outside the step (an activity of another step, a host call outside the step's annotation window; a
  launch call always counts as the step's); a host call where it stops is preceded by a `cpu` segment from
  the annotation's start. Segments tile [start_ns, end_ns] exactly (boundaries clamped by a running
  minimum walking back). Keys: {start_ns, end_ns, span_ns, critical_stream (most gpu time on the path;
  ties: lower id), kind_ns {gpu, launch_delay, kernel_gap, cpu, sync_wait: ns} (kinds absent: 0),
  gpu_category_ns {category: ns}, stream_gpu_ns {stream: ns}, segments [[kind, name, start_ns, dur_ns,
  edge], ...] in time order}. Segment names: gpu -> activity name; a host call -> its name; launch_delay
  -> the launch call; sync_wait -> the sync call or "cudaStreamWaitEvent", an inferred wait -> the
  awaited activity "<name> (stream <id>)"; kernel gaps and host gaps -> null. `edge` is null for a node, else stream_order / event_wait / launch / host_sync / program_order /
  inferred_wait / step_start. Zero-length segments are left out, except activities and sync_wait edges.
- `steps[i].critical_path_captured` (NVIDIA serving-decode steps with a graph replay): the same path when the
  run is ingested with its capture traces: their "Stream Wait Event" records give the waits inside each
  replay, which are then `event_wait` edges named "cudaStreamWaitEvent (captured)" (ties as an event wait).
- `collectives`: list, one per collective instance: {key "step:n", step, name, category, start_ns
  [per rank], end_ns [per rank], start_skew_ns [per rank: start − min start], end_skew_ns [per rank],
  last_rank (arrived last), max_start_skew_ns, wait_ns [per rank: held until the last arrival],
  transfer_ns [per rank: from the last arrival to its end]}.
"""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path
from typing import Any

import orjson

from .graph_nodes import node_truth
from .sim import Act, RankSim

TRUTH_NAMES = ("ground_truth.json", "ground_truth.json.gz")
COMPRESS_OVER = 8 * 10**6  # bytes of JSON: a larger ground truth is written gzipped


def truth_path(folder: str | Path) -> Path:
    """The ground-truth file of a synthesized run or situation folder (plain or gzipped)."""
    folder = Path(folder)
    for name in TRUTH_NAMES:
        if (folder / name).is_file():
            return folder / name
    raise FileNotFoundError(
        f"{folder}: no ground_truth.json or ground_truth.json.gz (not a tracehouse synth folder)"
    )


def load_truth(folder: str | Path) -> dict[str, Any]:
    """The ground truth of a synthesized run or situation folder, whether it was written plain or gzipped."""
    path = truth_path(folder)
    data = path.read_bytes()
    return orjson.loads(gzip.decompress(data) if path.suffix == ".gz" else data)


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
        "gpu_start_ns": first,
        "gpu_end_ns": last,
        "span_ns": span,
        "busy_ns": busy,
        "compute_ns": length(comp),
        "exposed_comm_ns": minus(comm, comp),
        "exposed_memory_ns": minus(mem, merge(comp + comm)),
        "idle_ns": span - busy,
        "n_activities": len(acts),
        "n_linked": len(acts),
        "category_ns": dict(sorted(cats.items())),
        "kernels": dict(sorted(kern.items())),
        "streams": streams,
    }
    assert res["compute_ns"] + res["exposed_comm_ns"] + res["exposed_memory_ns"] + res["idle_ns"] == span
    return res


KINDS = ("gpu", "launch_delay", "kernel_gap", "cpu", "sync_wait")
RUNTIME_CATS = ("cuda_runtime", "cuda_driver")
CAPTURED_WAIT = "cudaStreamWaitEvent (captured)"  # a wait of a graph replay, recorded in its capture trace


class _PathWalk:
    """The step's dependency graph from the simulator's records: host calls (start, end, name, corr) in program
    order (start order on the one host thread), each activity's same-stream predecessor (the previous activity
    by start on the stream, else the one before the step), and each host sync's awaited activity."""

    def __init__(self, sim: RankSim, window: tuple[int, int], captured: bool = False):
        acts = sim.gpu
        self.window = window
        self.captured = captured  # the replays' waits are recorded, by the capture traces
        calls = sorted((e for e in sim.host if e[0] == "X" and e[1] in RUNTIME_CATS), key=lambda e: e[3])
        self.hc = [(e[3], e[3] + e[4], e[2], e[5]["correlation"]) for e in calls]
        self.by_corr = {c[3]: i for i, c in enumerate(self.hc)}
        self.in_step_acts = {id(a) for a in acts}
        self.prev: dict[int, Act | None] = {}
        by_stream: dict[int, list[Act]] = {}
        for a in sorted(acts, key=lambda a: (a.start, a.seq)):
            lst = by_stream.setdefault(a.stream, [])
            self.prev[id(a)] = lst[-1] if lst else sim.carry_last.get(a.stream)
            lst.append(a)
        # host syncs: the awaited activity = latest end among the last activity launched on each synced
        # stream before the call (sim.last at call time is not kept, so rebuild it from launch order)
        all_acts = list(sim.carry_last.values()) + acts
        self.sync_target: dict[int, Act] = {}
        for corr, streams in sim.host_syncs:
            i = self.by_corr[corr]
            best = self._awaited(all_acts, streams, self.hc[i][0], self.hc[i][1])
            if best is not None:
                self.sync_target[i] = best

    def issue(self, a: Act) -> int:
        return self.hc[self.by_corr[a.corr]][0] if a.corr in self.by_corr else a.start

    def _awaited(self, all_acts: list[Act], streams, cs: int, ce: int) -> Act | None:
        best: Act | None = None
        for st in streams if streams is not None else sorted({a.stream for a in all_acts}):
            cand = [
                a
                for a in all_acts
                if a.stream == st and (id(a) not in self.in_step_acts or self.issue(a) < cs)
            ]
            if not cand:
                continue
            last = max(
                cand, key=lambda a: (self.issue(a) if id(a) in self.in_step_acts else -1, a.start, a.seq)
            )
            if last.end <= ce and (best is None or last.end > best.end):
                best = last
        return best

    def in_window(self, i: int) -> bool:
        return self.window[0] <= self.hc[i][0] < self.window[1]

    def gpu_node(self, node: tuple) -> tuple[list, dict[str, Any]]:
        """(the activity's dependency candidates, its chain element)."""
        a = node[1]
        cands = []
        p = self.prev[id(a)]
        if p is not None:
            cands.append((min(p.end, a.start), 1, ("g", p), "stream_order", "kernel_gap", None))
        for src in a.event_deps or ():
            cands.append(
                (min(src.end, a.start), 2, ("g", src), "event_wait", "sync_wait", "cudaStreamWaitEvent")
            )
        for src in a.hidden_deps or ():
            if self.captured and a.replay:  # the capture trace recorded this wait of the graph
                cands.append((min(src.end, a.start), 2, ("g", src), "event_wait", "sync_wait", CAPTURED_WAIT))
                continue
            # a wait the trace does not record: the analysis can only infer it (ties go to the others)
            cands.append(
                (
                    min(src.end, a.start),
                    4,
                    ("g", src),
                    "inferred_wait",
                    "sync_wait",
                    f"{src.name} (stream {src.stream})",
                )
            )
        if a.corr in self.by_corr:
            i = self.by_corr[a.corr]
            ls, le, lname, _ = self.hc[i]
            ready = ls if lname.endswith("GraphLaunch") else le
            cands.append((min(ready, a.start), 3, ("c", i), "launch", "launch_delay", lname))
        el = {
            "node": node,
            "b": a.end,
            "a": a.start,
            "kind": "gpu",
            "name": a.name,
            "stream": a.stream,
            "category": a.category,
        }
        return cands, el

    def call_node(self, node: tuple) -> tuple[list, dict[str, Any]]:
        """(the host call's dependency candidates: its awaited activity, else the previous call; its element)."""
        i = node[1]
        hc = self.hc
        cs, ce, cname, _ = hc[i]
        t = self.sync_target.get(i)
        if t is not None and t.end > cs:
            cands = [(t.end, 0, ("g", t), "host_sync", "sync_wait", cname)]
            lo = ce
        else:
            cands = [(min(hc[i - 1][1], cs), 0, ("c", i - 1), "program_order", "cpu", None)] if i > 0 else []
            lo = cs
        el = {"node": node, "b": ce, "a": lo, "kind": "cpu", "name": cname, "stream": None, "category": None}
        return cands, el

    def followed(self, best) -> bool:
        """The walk follows this candidate: a launch, or a node inside the step (activity) or window (call)."""
        if best is None:
            return False
        pn = best[2]
        return best[3] == "launch" or (
            id(pn[1]) in self.in_step_acts if pn[0] == "g" else self.in_window(pn[1])
        )

    def chain(self, start: Act) -> list[dict[str, Any]]:
        """Walk back from the step's last-ending activity: each element (node, b, a, r, edge, kind, name)."""
        chain: list[dict[str, Any]] = []
        node: tuple = ("g", start)
        while True:
            cands, el = self.gpu_node(node) if node[0] == "g" else self.call_node(node)
            chain.append(el)
            best = min(cands, key=lambda c: (-c[0], c[1])) if cands else None
            if not self.followed(best):
                if node[0] == "c" and self.window[0] < el["a"]:
                    el.update(r=self.window[0], edge="step_start", ekind="cpu", ename=None)
                else:
                    el.update(r=el["a"], edge=None, ekind=None, ename=None)
                return chain
            el.update(r=best[0], edge=best[3], ekind=best[4], ename=best[5])
            node = best[2]


def _tile(chain: list[dict[str, Any]]) -> tuple[list[list[Any]], int | None]:
    """The path's segments, tiling it: a running minimum over (b, a, r) of each element, walking back; and
    the path's start (the last minimum)."""
    segs: list[list[Any]] = []
    m: int | None = None
    for el in chain:
        xb = el["b"] if m is None else min(m, el["b"])
        xa = min(xb, el["a"])
        xr = min(xa, el["r"])
        m = xr
        if el["kind"] == "gpu" or xb > xa:
            segs.append([el["kind"], el["name"], xa, xb - xa, None, el["stream"], el["category"]])
        if xa > xr or el["edge"] in ("event_wait", "host_sync"):
            segs.append([el["ekind"], el["ename"], xr, xa - xr, el["edge"], None, None])
    segs.reverse()
    return segs, m


def critical_path_truth(
    sim: RankSim, window: tuple[int, int], captured: bool = False
) -> dict[str, Any] | None:
    """The step's critical path from the simulator's own records (see the module docstring); captured: with
    the event waits inside graph replays recorded (the run ingested with its capture traces)."""
    acts = sim.gpu
    if not acts:
        return None
    chain = _PathWalk(sim, window, captured).chain(max(acts, key=lambda a: (a.end, a.start, a.seq)))
    segs, m = _tile(chain)
    end = chain[0]["b"]
    begin = m if m is not None else end
    kind_ns = dict.fromkeys(KINDS, 0)
    cat_ns: dict[str, int] = {}
    stream_ns: dict[str, int] = {}
    for kind, _, _, dur, _, stream, cat in segs:
        kind_ns[kind] += dur
        if kind == "gpu":
            cat_ns[cat] = cat_ns.get(cat, 0) + dur
            stream_ns[str(stream)] = stream_ns.get(str(stream), 0) + dur
    assert sum(kind_ns.values()) == end - begin
    crit = min(stream_ns, key=lambda s: (-stream_ns[s], int(s))) if stream_ns else None
    return {
        "start_ns": begin,
        "end_ns": end,
        "span_ns": end - begin,
        "critical_stream": int(crit) if crit is not None else None,
        "kind_ns": kind_ns,
        "gpu_category_ns": dict(sorted(cat_ns.items())),
        "stream_gpu_ns": stream_ns,
        "segments": [s[:5] for s in segs],
    }


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
        row = {
            "key": acts[0].coll,
            "step": int(acts[0].coll.split(":")[0]),
            "name": acts[0].name,
            "category": acts[0].category,
            "start_ns": starts,
            "end_ns": ends,
            "start_skew_ns": [s - lo for s in starts],
            "end_skew_ns": [e - elo for e in ends],
            "last_rank": starts.index(last_start),
            # what each rank's kernel did: held until the last arrival, then the transfer
            "wait_ns": [last_start - a.start for a in acts],
            "transfer_ns": [a.end - last_start for a in acts],
            "max_start_skew_ns": last_start - lo,
        }
        self._colls.write((b",\n" if self._ncolls else b"") + orjson.dumps(row))
        self._ncolls += 1

    def add_step(
        self, rank: int, step: int, sim: RankSim, phase: str, graph_launches: int, host: tuple[int, int]
    ) -> None:
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
        row = {
            "rank": rank,
            "step": step,
            "phase": phase,
            "host_start_ns": host[0],
            "host_end_ns": host[1],
            **m,
            "graph_launches": graph_launches,
            # activities launched inside a cpu_op (the op's External id, kept by the simulator at launch)
            "n_with_op": sum(1 for a in acts if a.ext is not None),
            "launch_sites": key,
            "critical_path": critical_path_truth(sim, host),
        }
        if graph_launches and sim.cfg.scenario == "serving-decode" and sim.vendor == "nvidia":
            # ingested with its capture traces, whose "Stream Wait Event" records give the replays' waits
            row["critical_path_captured"] = critical_path_truth(sim, host, captured=True)
        if sim.cfg.graph_nodes:
            row["graph_nodes"] = node_truth(order)
        self._steps.write((b",\n" if self._nsteps else b"") + orjson.dumps(row))
        self._nsteps += 1
        r = self.ranks.setdefault(
            rank,
            {
                "rank": rank,
                "device": sim.device,
                "n_steps": 0,
                "first_start_ns": m["gpu_start_ns"],
                "busy_ns": 0,
                "compute_ns": 0,
                "exposed_comm_ns": 0,
                "exposed_memory_ns": 0,
                "n_activities": 0,
                "n_linked": 0,
                "category_ns": {},
                "kernels": {},
                "streams": {},
            },
        )
        r["n_steps"] += 1
        r["last_end_ns"] = m["gpu_end_ns"]
        for k in (
            "busy_ns",
            "compute_ns",
            "exposed_comm_ns",
            "exposed_memory_ns",
            "n_activities",
            "n_linked",
        ):
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
        head = {
            **self.header,
            **extra,
            "kernel_categories": dict(sorted(self.categories.items())),
            "ranks_summary": summary,
            "launch_site_templates": {v: [list(x) for x in k] for k, v in self.templates.items()},
        }
        tmp_steps = self.out / ".ground_truth.steps.tmp"
        tmp_colls = self.out / ".ground_truth.colls.tmp"
        body = json.dumps(head, indent=1)
        size = len(body) + tmp_steps.stat().st_size + tmp_colls.stat().st_size
        compress = size > COMPRESS_OVER
        path = self.out / TRUTH_NAMES[compress]
        for stale in TRUTH_NAMES:  # a rerun into the same folder leaves one ground truth, this run's
            (self.out / stale).unlink(missing_ok=True)
        partial = path.with_name(f".{path.name}.tmp")
        with open(partial, "wb") as raw:
            # mtime=0: same run, same bytes (as the traces)
            f = (
                gzip.GzipFile(filename="", mode="wb", fileobj=raw, compresslevel=6, mtime=0)
                if compress
                else raw
            )
            f.write(body[:-2].encode() + b',\n "steps": [\n')
            _copy(tmp_steps, f)
            f.write(b'\n ],\n "collectives": [\n')
            _copy(tmp_colls, f)
            f.write(b"\n ]\n}\n")
            if compress:
                f.close()
        os.replace(partial, path)
        os.remove(tmp_steps)
        os.remove(tmp_colls)
        return path


def _copy(src: Path, dst) -> None:
    with open(src, "rb") as f:
        while chunk := f.read(1 << 20):
            dst.write(chunk)

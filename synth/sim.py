"""Discrete-event simulation of host threads and GPU streams, in integer nanoseconds.

A workload is a *program*: a Python generator per rank that calls `RankSim` methods in program order
(enter a Python frame, launch a kernel, record/wait an event, synchronise...). The host clock advances
as calls are made; each GPU activity starts at max(launch call + latency, its stream free, its event
dependencies). Processing in program (launch) order is causally exact, because an activity can only
depend on activities launched before it.

Collectives couple ranks: a program `yield`s each collective activity once its start is known; the
driver (`run_lockstep`) advances all ranks to the same collective, then ends it on every rank at
max(start over ranks) + transfer time, as NCCL does. The schedule kept in `RankSim.gpu` is therefore
the ground truth; the Kineto text is only a rendering of it.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Generator, Iterable

from .catalog import Kernel
from .fused_chains import FusedChains
from .graph_nodes import graph_node_args
from .kineto import TraceWriter
from .runtime_api import AMD, CBID, CID, NV
from .sim_types import Act, Cfg

PG_RANKS = "[{}]"


class RankSim:
    """Host thread + GPU streams of one rank. Collects one step at a time, then `flush`es it."""

    def __init__(self, cfg: Cfg, rank: int, streams: dict[str, int]):
        self.cfg = cfg
        self.rank = rank
        self.vendor = cfg.vendor
        self.api = AMD if cfg.vendor == "amd" else NV
        self.rng = random.Random(cfg.seed * 1_000_003 + rank * 7_919 + len(cfg.scenario))
        self.pid = 20_000 + (cfg.seed * 37 + rank * 101) % 40_000
        self.tid = self.pid
        self.device = rank
        self.S = streams
        self.h = cfg.t0_ns + cfg.seed % 997 * 1_000 + rank * 3_117  # host clocks are not aligned across ranks
        self.ready: dict[int, int] = {s: 0 for s in streams.values()}
        self.last: dict[int, Act] = {}
        self.corr = 1_000 + rank
        self.ext = 0
        self.pyid = 500_000 + rank * 17
        self.evidx = 0
        self.host: list[tuple] = []  # ("X", cat, name, ts, dur, args) / ("s"|"f", id, ts)
        self.gsync: list[tuple] = []  # GPU-side cuda_sync events (not GPU activities)
        self.gpu: list[Act] = []
        self.stack: list[list] = []
        self.seq = 0
        self.ncoll = 0
        self.step = 0
        self.capture = False  # emitting a capture trace: launches without execution
        self.replay: tuple[int, int] | None = None  # (graph corr, earliest GPU start) during graph replay
        self.replay_nodes = 0  # activities of the current graph launch so far (its nodes, in capture order)
        self.fqn: str | None = None  # the module FQN the workload is in (synth/graph_nodes.py)
        self.collectives: list[Act] = []
        self.gpu_annotations: list[tuple] = []
        self.used_streams: set[int] = set()
        # critical-path ground truth (truth.critical_path_truth): dependencies the trace records
        self.pending_waits: dict[int, list[Act]] = {}  # stream -> event sources for its next activity
        self.pending_hidden: dict[int, list[Act]] = {}  # ... of event waits the trace does not record
        self.host_syncs: list[tuple] = []  # (correlation, [streams] | None = all streams)
        self.carry_last: dict[int, Act] = {}  # last activity per stream before this step
        self.fused = FusedChains(cfg.fuse_re)  # Cfg.fuse: chains run as one kernel (synth/fused_chains.py)

    # ---- ids and random draws -------------------------------------------------------------
    def _corr(self) -> int:
        self.corr += 1 + (self.rng.random() < 0.3)  # runtime calls not traced leave holes, as in CUPTI
        return self.corr

    def jit(self, lo: int, hi: int) -> int:
        return self.rng.randint(lo, hi)

    # ---- host frames ---------------------------------------------------------------------
    def enter(
        self, cat: str, name: str, args: dict | None = None, cost: tuple[int, int] = (300, 900)
    ) -> dict:
        args = dict(args or {})
        if cat == "python_function":
            self.pyid += 1
            parent = next(
                (f[3]["Python id"] for f in reversed(self.stack) if f[0] == "python_function"),
                400_000 + self.rank,
            )
            args = {"Python parent id": parent, "Python id": self.pyid, **args}
        elif cat in ("cpu_op", "user_annotation"):
            self.ext += 1
            args = {"External id": self.ext, "Record function id": 0, **args}
        self.evidx += 1
        args["Ev Idx"] = self.evidx
        frame = [cat, name, self.h, args]
        self.stack.append(frame)
        self.h += self.jit(*cost)
        return args

    def exit(self, cost: tuple[int, int] = (200, 700)) -> None:
        cat, name, start, args = self.stack.pop()
        self.h += self.jit(*cost)
        self.host.append(("X", cat, name, start, self.h - start, args))

    def py(self, file: str, line: int, func: str) -> None:
        self.enter("python_function", f"{file}({line}): {func}")

    def module(self, name: str, idx: int) -> None:
        self.enter("python_function", f"nn.Module: {name}_{idx}", {"Python module id": idx})

    def _ext_now(self) -> int | None:
        for f in reversed(self.stack):
            if f[0] == "cpu_op":
                return f[3]["External id"]
        return None

    def runtime(
        self, name: str, dur: int, extra: dict | None = None, flow: str | None = None
    ) -> tuple[int, int]:
        """One cuda_runtime / cuda_driver call at the current host time; returns (correlation, start)."""
        corr = self._corr()
        args: dict = {}
        ext = self._ext_now()
        if ext is not None:
            args["External id"] = ext
        cat = "cuda_driver" if name.startswith("cu") and not name.startswith("cuda") else "cuda_runtime"
        if self.vendor == "amd":
            if extra:
                args.update(extra)
            args["cid"] = CID.get(name, 99)
            args["correlation"] = corr
        else:
            args["cbid"] = CBID.get(name, 1)
            args["correlation"] = corr
        start = self.h
        self.host.append(("X", cat, name, start, dur, args))
        if flow:
            self.host.append((flow, corr, start))
        self.h += dur
        return corr, start

    # ---- GPU work --------------------------------------------------------------------------
    def kdur(self, k: Kernel, base: int | None = None, node: int | None = None) -> int:
        """Its duration; node: its index in the replayed graph's body (Cfg.slow_node slows one node)."""
        ns = k.base_ns if base is None else base
        if k.scales:
            ns = ns * self.scale
        ns = ns * (1.0 + self.rng.gauss(0.0, 0.025))
        if self.cfg.slow_re is not None and self.cfg.slow_re.search(k.name):
            ns *= self.cfg.slow_kernel[1]
        if node is not None and self.cfg.slow_node is not None and self.cfg.slow_node[0] == node:
            ns *= self.cfg.slow_node[1]
        return max(200, int(ns))

    scale: float = 1.0

    def op(self, k: Kernel, stream: int, deps: Iterable[int] = ()) -> Generator[Act, None, Act | None]:
        """Launch kernel `k` on `stream` (eager, captured or replayed, by mode); yields collectives."""
        act = self._launch(k, stream, deps)
        if act is not None and act.coll:
            yield act  # the driver sets act.dur from all ranks' arrivals
            self.ready[stream] = act.end
        return act

    def _launch(self, k: Kernel, stream: int, deps: Iterable[int]) -> Act | None:
        waits = stream in self.pending_waits or stream in self.pending_hidden
        fuse = self.fused.launch(stream, k.name, not k.collective and not waits)
        if self.replay is not None:
            corr, t0 = self.replay
            act = self._gpu(k, stream, max(t0, *(deps or [0])), corr, None, self.replay_nodes, fuse)
            if act is not None:
                act.graph_node = self.replay_nodes
            self.replay_nodes += 1
            return act
        h0, n0 = self.h, len(self.host)
        self.py(k.file, k.line, k.func)
        eager_nccl = bool(k.collective) and k.cpu_op.startswith("nccl:")
        meta = None
        if eager_nccl:
            self.enter("user_annotation", k.cpu_op)
            meta = self._coll_meta(k)
            self.enter(
                "cpu_op",
                "record_param_comms",
                {**meta, "Rank": self.rank, "Global rank start": 0, "Global rank stride": 1},
            )
        else:
            self.enter(
                "cpu_op",
                k.cpu_op,
                {
                    "Input Dims": [[self.cfg.batch_size, 7168], [7168]],
                    "Input type": ["c10::BFloat16", "c10::BFloat16"],
                },
            )
        drv = k.api == "drv"
        name = self.api["launch_drv"] if drv else self.api["launch"]
        extra = None
        if self.vendor == "amd":
            extra = {"kernel": k.name, "grid": list(k.grid), "block": list(k.block), "shared memory": k.smem}
        dur = self.jit(3_100, 6_900) if not drv else self.jit(4_200, 9_800)
        corr, rt = self.runtime(name, dur, extra, flow="s")
        ext = self._ext_now()
        self.exit()
        if eager_nccl:
            self.exit()
        self.exit()
        if fuse:  # the fused kernel is launched as its first member: this launch is not made (same draws)
            self.h = h0
            del self.host[n0:]
        if self.capture:
            return None
        act = self._gpu(k, stream, max(rt + self.jit(2_400, 5_200), *(deps or [0])), corr, ext, fuse=fuse)
        if act is not None:
            act.coll_meta = meta
        return act

    def _gpu(
        self,
        k: Kernel,
        stream: int,
        earliest: int,
        corr: int,
        ext: int | None,
        node: int | None = None,
        fuse: bool = False,
    ) -> Act | None:
        """node: the activity's index in the body of the graph replayed (None: not replayed). fuse: a later
        member of a fused chain: the stream's last activity lasts as long as the longer of the two (None)."""
        replay = node is not None
        gap = self.jit(450, 1_400) if replay else self.jit(900, 2_100)
        start = max(earliest, self.ready[stream] + gap if self.ready[stream] else earliest)
        self.seq += 1
        if fuse:
            first = self.last[stream]
            first.dur = max(first.dur, self.kdur(k, node=node))
            self.ready[stream] = first.end
            return None
        act = Act(
            "kernel",
            k.name,
            k.category,
            stream,
            start,
            self.kdur(k, node=node),
            corr,
            ext,
            (k.file, k.line, k.func),
            self.seq,
            k,
            replay,
        )
        act.event_deps = self.pending_waits.pop(stream, None)
        act.fqn = self.fqn
        act.hidden_deps = self.pending_hidden.pop(stream, None)
        if k.collective:
            self.ncoll += 1
            act.coll = f"{self.step}:{self.ncoll}"
            self.collectives.append(act)
        self.gpu.append(act)
        self.ready[stream] = act.end
        self.last[stream] = act
        return act

    def _coll_meta(self, k: Kernel) -> dict:
        n = self.cfg.ranks
        nel = self.cfg.batch_size * 7168 if self.cfg.scenario != "training" else 25_165_824
        return {
            "Collective name": k.collective,
            "In msg nelems": nel,
            "Out msg nelems": nel,
            "Group size": n,
            "dtype": "BFloat16",
            "In split size": "[]",
            "Out split size": "[]",
            "Process Group Name": "0",
            "Process Group Description": "default_pg",
            "Process Group Ranks": "[" + ", ".join(str(i) for i in range(n)) + "]",
        }

    def straggle(self, stream: int) -> None:
        """On the straggler rank, the work before the next collective runs late (a slow GPU)."""
        st = self.cfg.straggler
        if st and st[0] == self.rank and not self.capture and stream in self.last:
            extra = int(st[1] * 1000)
            a = self.last[stream]
            a.dur += extra
            self.ready[stream] = max(self.ready[stream], a.end)

    def memcpy(self, kind: str, nbytes: int, stream: int, cpu_op: str = "aten::copy_") -> Act | None:
        self.fused.interrupt(stream)
        self.enter(
            "cpu_op",
            cpu_op,
            {"Input Dims": [[nbytes // 8], [nbytes // 8]], "Input type": ["long int", "long int"]},
        )
        extra = None
        if self.vendor == "amd":
            extra = {
                "src": "0x7f0e4a7e8000",
                "dst": "0x7f0e79800400",
                "bytes": str(nbytes),
                "kind": {"HtoD": "1", "DtoH": "2", "DtoD": "3"}[kind],
            }
        corr, rt = self.runtime(self.api["memcpy"], self.jit(3_000, 8_000), extra, flow="s")
        ext = self._ext_now()
        self.exit()
        if self.capture:
            return None
        start = max(rt + self.jit(1_500, 3_500), self.ready[stream] + self.jit(600, 1_500))
        dur = 1_100 + nbytes // 20 + self.jit(0, 700)  # ~20 GB/s for small PCIe copies, plus setup
        self.seq += 1
        label = {
            "HtoD": "Memcpy HtoD (Pinned -> Device)",
            "DtoH": "Memcpy DtoH (Device -> Pinned)",
            "DtoD": "Memcpy DtoD (Device -> Device)",
        }[kind]
        act = Act(
            "gpu_memcpy",
            label,
            "memory",
            stream,
            start,
            dur,
            corr,
            ext,
            self._site(),
            self.seq,
            nbytes=nbytes,
            copy_kind=kind,
        )
        act.event_deps = self.pending_waits.pop(stream, None)
        act.hidden_deps = self.pending_hidden.pop(stream, None)
        self.gpu.append(act)
        self.ready[stream] = act.end
        self.last[stream] = act
        return act

    def memset(self, nbytes: int, stream: int) -> Act | None:
        self.fused.interrupt(stream)
        self.enter("cpu_op", "aten::zero_", {"Input Dims": [[nbytes // 2]], "Input type": ["c10::BFloat16"]})
        corr, rt = self.runtime(self.api["memset"], self.jit(2_500, 5_000), None, flow="s")
        ext = self._ext_now()
        self.exit()
        if self.capture:
            return None
        start = max(rt + self.jit(1_500, 3_000), self.ready[stream] + self.jit(600, 1_500))
        self.seq += 1
        act = Act(
            "gpu_memset",
            "Memset (Device)",
            "memory",
            stream,
            start,
            900 + nbytes // 1_000,
            corr,
            ext,
            self._site(),
            self.seq,
            nbytes=nbytes,
            copy_kind="memset",
        )
        act.event_deps = self.pending_waits.pop(stream, None)
        act.hidden_deps = self.pending_hidden.pop(stream, None)
        self.gpu.append(act)
        self.ready[stream] = act.end
        self.last[stream] = act
        return act

    def _site(self) -> tuple[str, int, str] | None:
        for f in reversed(self.stack):
            if f[0] == "python_function" and "(" in f[1] and not f[1].startswith("nn.Module"):
                file, rest = f[1].split("(", 1)
                line, func = rest.split("): ", 1)
                return (file, int(line), func)
        return None

    def record(self, stream: int) -> tuple[int, int, Act | None]:
        """cudaEventRecord on `stream`; the event fires when the stream reaches this point (the end of
        the last activity launched on it, returned third for the critical-path truth)."""
        self.fused.interrupt(stream)
        t = self.ready[stream]
        src = self.last.get(stream)
        if self.replay is not None:
            return t, 0, src
        corr, _ = self.runtime(self.api["record"], self.jit(1_200, 3_500))
        return t, corr, src

    def wait(self, stream: int, ev: tuple[int, int], src_stream: int) -> None:
        """cudaStreamWaitEvent: later work on `stream` starts after the event."""
        t, rec_corr, src = ev
        self.fused.interrupt(stream)
        if src is not None and not self.capture and (self.replay is not None or self.vendor != "nvidia"):
            # a wait the trace does not record (inside a replay; ROCm writes no cuda_sync record)
            self.pending_hidden.setdefault(stream, []).append(src)
        if self.replay is None:
            # NVIDIA: CUPTI's record of the wait, during a capture too (its dependency is then the graph's)
            flow = "s" if self.vendor == "nvidia" else None
            corr, rt = self.runtime(self.api["wait"], self.jit(1_500, 4_000), flow=flow)
            if flow and src is not None and not self.capture:
                # the trace shows this wait (a cuda_sync record naming the source stream and the record)
                self.pending_waits.setdefault(stream, []).append(src)
            if flow:
                # CUPTI's synchronization record: a short GPU-side marker on the waiting stream.
                self.gsync.append(
                    (
                        "Stream Wait Event",
                        stream,
                        rt + 800,
                        1_200,
                        corr,
                        self._ext_now(),
                        {
                            "wait_on_stream": src_stream,
                            "wait_on_cuda_event_record_corr_id": rec_corr,
                            "wait_on_cuda_event_id": 7 + (rec_corr % 50),
                        },
                    )
                )
        self.ready[stream] = max(self.ready[stream], t)

    def stream_sync(self, stream: int) -> None:
        """cudaStreamSynchronize: the host blocks until `stream` drains (a `sync_wait` on the CPU)."""
        self.fused.interrupt(stream)
        start = self.h
        done = max(start + self.jit(1_800, 3_000), self.ready[stream] + self.jit(1_200, 2_500))
        flow = "s" if self.vendor == "nvidia" else None
        corr, _ = self.runtime(self.api["sync"], done - start, flow=flow)
        # the trace names the synced stream only through the NVIDIA "Stream Sync" record
        self.host_syncs.append((corr, [stream] if flow else None))
        if flow:
            self.gsync.append(
                ("Stream Sync", stream, start + 700, done - start - 700, corr, self._ext_now(), {})
            )
        self.h = done + self.jit(300, 900)

    def host_stall(self, file: str, line: int, func: str, ns: int) -> None:
        self.py(file, line, func)
        self.h += ns
        self.exit()

    def graph_launch(self, body: Callable[[], Generator]) -> Generator[Act, None, None]:
        """cudaGraphLaunch replaying `body`'s kernels (one correlation id for all, 1:N flows)."""
        if self.capture:
            yield from body()
            return
        name = self.api["graph"]
        dur = self.jit(9_000, 16_000) if self.vendor == "nvidia" else self.jit(60_000, 90_000)
        # Kineto: NVIDIA writes one `s` at the launch; ROCm writes an `f` there instead (see the SGLang trace).
        corr, rt = self.runtime(name, dur, flow="s" if self.vendor == "nvidia" else "f")
        self.replay = (corr, rt + self.jit(4_000, 7_000))
        self.replay_nodes = 0
        self.fused.interrupt()  # a chain never spans a graph launch's boundary
        yield from body()
        self.replay = None
        self.fused.interrupt()

    # ---- output ------------------------------------------------------------------------
    def flush(self, w: TraceWriter) -> None:
        """Write the step's host events, GPU activities and flows, then forget them."""
        pid, tid, amd = self.pid, self.tid, self.vendor == "amd"
        self.host.sort(key=lambda e: (e[3], -e[4]) if e[0] == "X" else (e[2], 0))
        for e in self.host:
            if e[0] == "X":
                w.x(e[1], e[2], pid, tid, e[3], e[4], e[5])
            else:
                w.flow(e[0], e[1], pid, tid, e[2])
        dev = self.device
        for a in self.gpu:
            args: dict = {}
            if a.ext is not None:
                args["External id"] = a.ext
            if a.kind == "kernel":
                k = a.k
                if amd:
                    args.update(
                        {
                            "device": dev,
                            "stream": a.stream,
                            "correlation": a.corr,
                            "kind": "Dispatch Task" if a.replay else "Dispatch Kernel",
                            "grid": list(k.grid),
                            "block": list(k.block),
                        }
                    )
                else:
                    blocks = k.grid[0] * k.grid[1] * k.grid[2]
                    warps = blocks * ((k.block[0] * k.block[1] * k.block[2] + 31) // 32)
                    args.update(
                        {
                            "queued": 0,
                            "device": dev,
                            "context": 1,
                            "stream": a.stream,
                            "correlation": a.corr,
                            "registers per thread": k.regs,
                            "shared memory": k.smem,
                            "blocks per SM": round(blocks / 132, 6),
                            "warps per SM": round(warps / 132, 6),
                            "grid": list(k.grid),
                            "block": list(k.block),
                            "est. achieved occupancy %": min(100, int(warps / 132 / 64 * 100)),
                        }
                    )
                if a.coll_meta:
                    args.update(a.coll_meta)
                if self.cfg.graph_nodes and a.graph_node is not None and not amd:
                    args.update(graph_node_args(a, self._coll_meta(k) if k.collective else None))
            else:
                args.update({"device": dev})
                if not amd:
                    args["context"] = 1
                args.update({"stream": a.stream, "correlation": a.corr})
                if amd:
                    args["kind"] = a.copy_kind if a.kind == "gpu_memcpy" else "Memset"
                if a.kind == "gpu_memcpy" or not amd:
                    args["bytes"] = a.nbytes
                    args["memory bandwidth (GB/s)"] = round(a.nbytes / max(a.dur, 1), 6)
            w.x(a.kind, a.name, dev, a.stream, a.start, a.dur, args)
            w.flow("f", a.corr, dev, a.stream, a.start)
        for name, stream, ts, dur, corr, ext, extra in self.gsync:
            args = {"External id": ext} if ext is not None else {}
            args.update(
                {
                    "cuda_sync_kind": name,
                    **extra,
                    "stream": stream,
                    "correlation": corr,
                    "device": dev,
                    "context": 1,
                }
            )
            w.x("cuda_sync", name, dev, stream, ts, max(dur, 0), args)
            w.flow("f", corr, dev, stream, ts)
        for name, stream, ts, dur, ext in self.gpu_annotations:
            w.x("gpu_user_annotation", name, dev, stream, ts, dur, {"External id": ext})
        self.host.clear()
        self.gsync.clear()
        self.gpu_annotations.clear()

    def new_step(self, step: int) -> None:
        self.step = step
        self.fused.interrupt()
        self.carry_last = dict(self.last)
        self.host_syncs = []
        self.gpu = []
        self.collectives = []
        self.seq = 0
        self.ncoll = 0


def run_lockstep(
    sims: list[RankSim], gens: list[Generator], on_coll: Callable[[list[Act], int], None]
) -> None:
    """Advance every rank's program to its next collective, end it on all ranks together, repeat."""
    n = len(gens)
    alive = [True] * n
    while True:
        outs: list[Act | None] = []
        for i, g in enumerate(gens):
            if not alive[i]:
                outs.append(None)
                continue
            try:
                outs.append(next(g))
            except StopIteration:
                alive[i] = False
                outs.append(None)
        if not any(alive):
            return
        acts = [a for a in outs if a is not None]
        if len(acts) != n or len({a.coll for a in acts}) != 1:
            raise RuntimeError("ranks diverged: programs must issue the same collectives in the same order")
        last = max(a.start for a in acts)
        for i, a in enumerate(acts):
            transfer = sims[i].kdur(a.k)
            a.dur = last - a.start + transfer
            sims[i].ready[a.stream] = a.end
        on_coll(acts, last)

"""A short side-stream wait inside a CUDA-graph replay, recorded only by the capture trace (issue 37).

Each step replays one graph of two MoE layers: on the main stream norm, attention, router and topk; the
routed experts on a side stream after an event recorded behind topk (the fork); the shared expert on the
main stream meanwhile; then the main stream waits for an event recorded behind the side stream's last GEMM
(the join) before `finalize`. The replay trace records neither wait (one launch call replays the graph);
the capture trace (capture_traces/) holds them: cudaEventRecord and cudaStreamWaitEvent between the
launches, each wait with Kineto's "Stream Wait Event" record naming the waiting stream, the recorded
stream and the record's correlation.

The join is short: the main stream idles about 4 us after the shared expert, under the inferred-wait
rule's threshold (4 resume windows of a stream whose own pace is about 1 us), so only the captured
record can tell that finalize waited for the routed experts.

The trace is written by a small discrete-event simulation (`_Sim`): each stream runs its activities in
order, each starting at the latest of the replay's submission, its stream's previous end plus the
replay's pace, and the end of the event it waits on plus the device's reaction; every start keeps its
cause (ties as the product's rule: stream order, then the event wait, then the launch). The ground truth
(`expect`) is what the simulation did.

expect keys read by tests/test_captured_waits.py:
  steps            number of steps
  path_gpu[step]   names of the GPU activities on the step's critical path (walked back from its
                   last-ending activity along the causes, to the graph launch)
  waits[step]      [[waiter, awaited, wait_ns]]: each event wait on that path, the activity it waited for
                   and the time from the awaited activity's end to the waiter's start
  side_path_ns[step]  GPU time of the side stream's activities on the path
  side_stream      the side stream's id
"""

from __future__ import annotations

from pathlib import Path

from . import situation
from .timeline import Timeline

US = 1_000
MAIN, SIDE = 7, 24
PACE = [900, 1_100, 1_000, 1_000, 950, 1_050]  # the replay's gaps between activities of one stream
REACT = 1_200  # from an event's end to the waiting stream's next activity
LAYER = [  # (name, stream, duration ns, waits for: the activity of this layer named so, recorded before)
    ("rmsnorm_kernel", MAIN, 6 * US, None),
    ("flash_attn_decode", MAIN, 18 * US, None),
    ("moe_router_gemm", MAIN, 5 * US, None),
    ("moe_topk_softmax", MAIN, 4 * US, None),
    ("moe_grouped_gemm_up", SIDE, 16 * US, "moe_topk_softmax"),
    ("moe_grouped_gemm_down", SIDE, 14 * US, None),
    ("shared_expert_mlp", MAIN, 28 * US, None),
    ("moe_finalize", MAIN, 3 * US, "moe_grouped_gemm_down"),
]
LAYERS = 2
CAPTURE_FILE = "capture_traces/capture_bs_8.pt.trace.json.gz"


class _Sim:
    """The GPU side of the replays: each activity's start and its cause ('stream' | 'wait' | 'launch')."""

    def __init__(self) -> None:
        self.ready: dict[int, int] = {}
        self.n = 0
        self.cause: dict[int, tuple] = {}  # index into acts -> (kind, index of the awaited activity or None)
        self.acts: list[list] = []  # [name, stream, start, end]

    def replay(self, submit: int) -> list[int]:
        """The graph's activities from `submit` on; returns their indices (in capture order)."""
        done: dict[str, int] = {}
        last: dict[int, int] = {}
        out = []
        for _ in range(LAYERS):
            for name, stream, dur, waits_for in LAYER:
                gap = PACE[self.n % len(PACE)]
                self.n += 1
                cands = [(submit, 2, ("launch", None))]
                if stream in last:
                    cands.append((self.acts[last[stream]][3] + gap, 0, ("stream", last[stream])))
                if waits_for is not None:
                    src = done[waits_for]
                    cands.append((self.acts[src][3] + REACT, 1, ("wait", src)))
                start, _, cause = max(cands, key=lambda c: (c[0], -c[1]))
                i = len(self.acts)
                self.acts.append([name, stream, start, start + dur])
                self.cause[i] = cause
                done[name] = last[stream] = i
                out.append(i)
        return out

    def truth(self, idx: list[int]) -> tuple[list[str], list[list], int]:
        """Walk back from the replay's last-ending activity along the causes, to the launch."""
        node: int | None = max(idx, key=lambda i: (self.acts[i][3], self.acts[i][2]))
        names, waits, side = [], [], 0
        while node is not None:
            name, stream, start, end = self.acts[node]
            names.append(name)
            side += end - start if stream == SIDE else 0
            kind, pred = self.cause[node]
            if kind == "wait":
                waits.append([name, self.acts[pred][0], start - self.acts[pred][3]])
            node = pred
        return names[::-1], waits[::-1], side


def _capture(out: Path) -> None:
    """The capture trace: one window, the launches in capture order and the fork/join events between them."""
    cap = Timeline()
    t = 10 * US
    cap.call("cudaStreamBeginCapture", t, t + 2 * US)
    t += 5 * US
    for _ in range(LAYERS):
        for name, stream, _, waits_for in LAYER:
            if waits_for is not None:  # record on the other stream, then the wait on this one
                other = MAIN if stream == SIDE else SIDE
                cap.record_and_wait(t, t + 3 * US, other, stream)
                t += 6 * US
            cap.op(f"aten::{name}", t + 500, t + 3_500)
            cap.call(cap.calls["kernel"], t + 1_000, t + 3_000)
            t += 10 * US
    cap.call("cudaStreamEndCapture", t, t + 2 * US)
    cap.write(out / CAPTURE_FILE)


@situation(
    "graph-replay-short-side-wait",
    "decode steps that each replay a graph of two MoE layers: the main stream waits about 4 us for the "
    "routed experts on a side stream (too short for the inferred-wait rule); the capture trace records the "
    "fork and join events",
)
def graph_replay_short_side_wait(out: Path) -> dict:
    sim = _Sim()
    tl = Timeline()
    t = 0
    expect: dict = {"steps": 2, "path_gpu": {}, "waits": {}, "side_path_ns": {}, "side_stream": SIDE}
    for step in range(2):
        host = t + 10 * US
        call_start = host + 2 * US
        idx = sim.replay(call_start + 6 * US)
        kernels = [
            (sim.acts[i][0], sim.acts[i][1], sim.acts[i][2], sim.acts[i][3] - sim.acts[i][2]) for i in idx
        ]
        end = max(sim.acts[i][3] for i in idx)
        tl.op(f"ProfilerStep#{step}", t, end + 20 * US, cat="user_annotation")
        tl.frame("torch/cuda/graphs.py", 139, "replay", host, host + 20 * US)
        tl.graph(call_start, kernels)
        tl.stream_sync(host + 25 * US, end + 3 * US, MAIN)
        names, waits, side = sim.truth(idx)
        expect["path_gpu"][str(step)] = names
        expect["waits"][str(step)] = waits
        expect["side_path_ns"][str(step)] = side
        t = end + 40 * US
    tl.write(out / "rank-0.pt.trace.json.gz")
    _capture(out)
    return expect

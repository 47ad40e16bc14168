"""Event waits recorded in a capture trace, mapped onto a graph replay (a step of ingest.capture's attribution).

While a CUDA graph is captured, a fork or join between streams is a cudaEventRecord on one stream and a
cudaStreamWaitEvent on another (`side.wait_stream(main)`, MoE routed experts on a side stream): the graph
keeps it as a dependency, so every replay waits the same way, but the replay trace records no wait (the
replay is one launch call). The capture trace does record them, in call order between the launches, with
Kineto's "Stream Wait Event" record naming the waiting stream, the recorded stream and the record's
correlation (ingest.capture_windows.CaptureEvent).

`captured_waits` maps them onto one alignment of a replay with its capture window: for each wait, the first
launch after it on the waiting stream waits for the last launch on the recorded stream before the matching
cudaEventRecord (found by the record's correlation; without it the wait call itself bounds the record).
A launch's stream is that of the replayed activity aligned with it. A capture-trace stream id is read as
the replay stream that the launches the capture puts on it were aligned with (where the capture names its
launches' streams: ROCm's and some Kineto versions' launch records do), else as the same replay stream id
(a graph replays on the streams it was captured on, as in the synthesizer's traces). A wait whose streams cannot be told (no "Stream Wait Event" record: ROCm, or a record
without the recorded stream) gives no dependency: the inferred-wait rule of dependency_edges remains.
"""

from __future__ import annotations

from collections import Counter

from tracehouse.ingest.capture_windows import CaptureWindow


def _stream_map(window: CaptureWindow, launch_stream: dict[int, int], replay_streams: set) -> dict:
    """Capture-trace stream id -> replay stream id, from the launches that name their capture stream."""
    votes: dict[int, Counter] = {}
    for c, launch in enumerate(window.launches):
        if launch.stream is not None and c in launch_stream:
            votes.setdefault(launch.stream, Counter())[launch_stream[c]] += 1
    mapped = {s: v.most_common(1)[0][0] for s, v in votes.items()}
    return {**{s: s for s in replay_streams}, **mapped}


def captured_waits(window: CaptureWindow, launch_stream: dict[int, int]) -> dict[int, list[int]]:
    """{waiting launch index: [awaited launch index, ...]} of one replay's alignment with `window`.

    launch_stream: {launch index: the stream of the replayed activity aligned with it} (aligned launches
    only: a dependency is kept only between launches the replay ran)."""
    if not window.events or len(set(launch_stream.values())) < 2:
        return {}
    to_replay = _stream_map(window, launch_stream, set(launch_stream.values()))
    record_at = {e.correlation: e.position for e in window.events if e.call == "record" and e.correlation}
    by_stream: dict[int, list[int]] = {}
    for c in sorted(launch_stream):
        by_stream.setdefault(launch_stream[c], []).append(c)
    out: dict[int, list[int]] = {}
    for e in window.events:
        if e.call != "wait" or e.stream is None or e.wait_on_stream is None:
            continue
        waiting, recorded = to_replay.get(e.stream), to_replay.get(e.wait_on_stream)
        if waiting is None or recorded is None or waiting == recorded:
            continue
        bound = record_at.get(e.wait_on_corr, e.position) if e.wait_on_corr else e.position
        bound = min(bound, e.position)  # a record after its wait is not the one waited for
        awaited = [c for c in by_stream.get(recorded, []) if c < bound]
        after = [c for c in by_stream.get(waiting, []) if c >= e.position]
        if awaited and after and awaited[-1] not in out.get(after[0], []):
            out.setdefault(after[0], []).append(awaited[-1])
    return out

"""Event waits recorded in capture traces, mapped onto every CUDA-graph replay (issue 37, item 1).

- graph-replay-short-side-wait (synth/situations/captured_waits.py): the main stream waits a few us for the
  routed experts on a side stream inside each replay. With the capture trace the path, its waits and the
  side stream's time on it are the simulation's; without it the wait is too short for the inferred-wait
  rule and the path runs through the shared expert instead (why the recorded edge matters).
- serving-decode: ingested with its capture traces, every step's path is the simulation's with the
  replays' waits recorded (truth `critical_path_captured`).
- real capture traces (SGLang, vLLM on ROCm) record no event wait: no captured wait is kept.
"""

from __future__ import annotations

import gzip
import json

import pytest
from conftest import TRACES, require_shared
from tracehouse.warehouse.catalog import connect
from warehouses import real, scenario, situation

SITUATION = "graph-replay-short-side-wait"
CAPTURED = "cudaStreamWaitEvent (captured)"


@pytest.fixture(scope="module")
def with_capture(warehouses):
    built = warehouses.get([situation(SITUATION)])
    return connect(built.warehouse), built.run_ids[0], built.truths[0]["expect"], built.inputs[0]


@pytest.fixture(scope="module")
def without_capture(tmp_path_factory):
    from tracehouse.ingest.load import ingest_paths
    from tracehouse.synth.situations import write_situation
    from tracehouse.warehouse.store import Warehouse

    root = tmp_path_factory.mktemp("no_capture")
    out = write_situation(SITUATION, root / "s")
    wh = Warehouse(root / "wh")
    [outcome] = ingest_paths(wh, [out / "rank-0.pt.trace.json.gz"], analyse=False)
    return connect(wh), outcome.run_id, json.loads((out / "ground_truth.json").read_text())["expect"]


def _path(con, run_id: str) -> dict[int, list[tuple]]:
    rows = con.execute(
        "SELECT step, kind, name, stream, dur_ns, edge FROM critical_path WHERE run_id = ? ORDER BY step, seq",
        [run_id],
    ).fetchall()
    out: dict[int, list[tuple]] = {}
    for step, *rest in rows:
        out.setdefault(step, []).append(tuple(rest))
    return out


def test_the_path_goes_through_the_side_stream_for_the_time_it_waited(with_capture):
    con, run_id, expect, _ = with_capture
    path = _path(con, run_id)
    assert len(path) == expect["steps"]
    for i, (_, segs) in enumerate(sorted(path.items())):
        gpu = [s for s in segs if s[0] == "gpu"]
        assert [s[1] for s in gpu] == expect["path_gpu"][str(i)]
        # each wait: the activity after it waited for the one before it, for the time between them
        waits = [
            [segs[k + 1][1], segs[k - 1][1], s[3]]
            for k, s in enumerate(segs)
            if s[0] == "sync_wait" and s[4] == "event_wait" and s[1] == CAPTURED
        ]
        assert waits == expect["waits"][str(i)] and waits
        assert sum(s[3] for s in gpu if s[2] == expect["side_stream"]) == expect["side_path_ns"][str(i)] > 0
        assert all(s[4] != "inferred_wait" for s in segs)


def test_the_capture_waits_are_those_the_capture_trace_records(with_capture):
    """Independent read of the capture JSON: its "Stream Wait Event" records, one per captured wait; each
    replay keeps that many waits (every wait's first launch on the waiting stream was replayed)."""
    con, run_id, _, folder = with_capture
    [(name,)] = con.execute(
        "SELECT DISTINCT capture_file FROM kernel_sites WHERE run_id = ?", [run_id]
    ).fetchall()
    [capture] = (folder / "capture_traces").glob("*.json.gz")
    assert capture.name == name
    events = json.loads(gzip.decompress(capture.read_bytes()))["traceEvents"]
    recorded = [e for e in events if e.get("cat") == "cuda_sync" and e["name"] == "Stream Wait Event"]
    per_replay = con.execute(
        "SELECT graph_correlation, sum(len(capture_waits)) FROM kernel_sites WHERE run_id = ? "
        "AND capture_waits IS NOT NULL GROUP BY ALL",
        [run_id],
    ).fetchall()
    assert len(per_replay) == 2 and {n for _, n in per_replay} == {len(recorded)} and recorded


def test_without_the_capture_trace_the_short_wait_is_missed(without_capture):
    """The replay trace alone records no wait, and the main stream's idle before finalize is under 4
    resume windows of its own pace (read from the kernels: twice the median gap between its activities):
    the path takes the shared expert's stream order and the side stream's work is off it."""
    con, run_id, expect = without_capture
    path = _path(con, run_id)
    for i, (_, segs) in enumerate(sorted(path.items())):
        assert all(s[0] != "sync_wait" for s in segs)
        assert all(s[2] != expect["side_stream"] for s in segs if s[0] == "gpu")
        assert [s[1] for s in segs if s[0] == "gpu"] != expect["path_gpu"][str(i)]
    gaps = [
        r[0]
        for r in con.execute(
            "SELECT start_ns - lag(end_ns) OVER (PARTITION BY step ORDER BY start_ns) FROM kernels "
            "WHERE run_id = ? AND stream = 7",
            [run_id],
        ).fetchall()
        if r[0] is not None
    ]
    finalize = con.execute(
        "SELECT k.start_ns - p.end_ns FROM kernels k JOIN kernels p ON p.run_id = k.run_id AND p.step = k.step "
        "AND p.name = 'shared_expert_mlp' AND p.end_ns <= k.start_ns AND p.start_ns > k.start_ns - 40000 "
        "WHERE k.run_id = ? AND k.name = 'moe_finalize'",
        [run_id],
    ).fetchall()
    gaps.sort()
    window = max(2 * gaps[len(gaps) // 2], 1000)
    assert finalize and all(g < 4 * window for (g,) in finalize)


@pytest.fixture(scope="module")
def decode(warehouses):
    built = warehouses.get([scenario("serving-decode", seed=5, ranks=2, steps=3, layers=2)])
    return connect(built.warehouse), built.run_ids[0], built.truths[0]


def test_serving_decode_path_with_its_capture_traces_is_the_simulations(decode):
    con, run_id, truth = decode
    captured = 0
    for st in truth["steps"]:
        cp = st["critical_path_captured"]
        [sql_step] = con.execute(
            "SELECT DISTINCT step FROM critical_path WHERE run_id = ? AND rank = ? ORDER BY step LIMIT 1 OFFSET ?",
            [run_id, st["rank"], st["step"]],
        ).fetchone() or [None]
        rows = con.execute(
            "SELECT kind, name, start_ns, dur_ns, edge FROM critical_path WHERE run_id = ? AND rank = ? "
            "AND step = ? ORDER BY seq",
            [run_id, st["rank"], sql_step],
        ).fetchall()
        assert [(r[0], r[2], r[3], r[4]) for r in rows] == [(s[0], s[2], s[3], s[4]) for s in cp["segments"]]
        waits = [r for r in rows if r[4] == "event_wait"]
        assert [r[1] for r in waits] == [s[1] for s in cp["segments"] if s[4] == "event_wait"]
        captured += sum(1 for r in waits if r[1] == CAPTURED)
    assert captured > 0


@pytest.mark.parametrize("folder", ["inference/sglang_decode", "inference/vllm_decode_full"])
def test_real_capture_traces_record_no_event_wait(warehouses, folder):
    """The real capture traces (ROCm) hold no hip/cudaStreamWaitEvent call (independent read of the JSON):
    no replayed kernel keeps a captured wait, and no captured edge appears."""
    require_shared()
    calls = 0
    for f in (TRACES / folder / "capture_traces").glob("*.json.gz"):
        events = json.loads(gzip.decompress(f.read_bytes()))["traceEvents"]
        calls += sum(1 for e in events if "StreamWaitEvent" in str(e.get("name", "")))
    assert calls == 0
    wh, runs, _ = warehouses.named({"r": real(folder)})
    con = connect(wh)
    sites, waits = con.execute(
        "SELECT count(*), count(capture_waits) FROM kernel_sites WHERE run_id = ?", [runs["r"]]
    ).fetchone()
    assert sites > 0 and waits == 0
    edges = con.execute(
        "SELECT count(*) FROM dependency_edges WHERE run_id = ? AND edge_name = ?", [runs["r"], CAPTURED]
    ).fetchone()[0]
    assert edges == 0


def _window(launch_streams, events):
    from tracehouse.ingest.capture_windows import CaptureLaunch, CaptureWindow

    w = CaptureWindow("cap.json", 0, 0, 8, None, 0, 1)
    for i, s in enumerate(launch_streams):
        w.launches.append(
            CaptureLaunch(i, "cudaLaunchKernel", "kernel", None, s, None, None, None, None, None)
        )
    w.events = events
    return w


def test_a_wait_maps_onto_the_replay_by_the_launches_streams_and_the_record():
    """captured_waits by hand: launches 0-5 replayed on streams 7 7 24 24 24 7. A record (correlation 50)
    after launch 1 (position 2) that stream 24 waits for at position 2: launch 2, the first on 24 from
    there, waits for launch 1, the last on 7 before the record. A record (corr 60) after launch 3
    (position 4), then launch 4 on 24, then stream 7 waits on corr 60 at position 5: launch 5 waits for
    launch 3, the last on 24 before that record (not 4, launched after it). Without the record's
    correlation the wait bounds the record: launch 4. A wait without its recorded stream (ROCm, CUDA 13's
    -1) gives nothing."""
    from tracehouse.ingest.capture_waits import captured_waits
    from tracehouse.ingest.capture_windows import CaptureEvent

    replay = {0: 7, 1: 7, 2: 24, 3: 24, 4: 24, 5: 7}
    events = [
        CaptureEvent(2, "record", 50, None),
        CaptureEvent(2, "wait", 51, 24, 7, 50),
        CaptureEvent(4, "record", 60, None),
        CaptureEvent(5, "wait", 62, 7, 24, 60),
        CaptureEvent(5, "wait", 63, 24, None, None),
    ]
    unnamed = [None] * 6
    assert captured_waits(_window(unnamed, events), replay) == {2: [1], 5: [3]}
    # the capture's own stream ids (100, 101) are not the replay's: read through the launches it names
    ids = {7: 100, 24: 101}
    renamed = [
        CaptureEvent(
            e.position, e.call, e.correlation, ids.get(e.stream), ids.get(e.wait_on_stream), e.wait_on_corr
        )
        for e in events
    ]
    assert captured_waits(_window([ids[replay[c]] for c in range(6)], renamed), replay) == {2: [1], 5: [3]}
    assert captured_waits(_window(unnamed, [CaptureEvent(5, "wait", 62, 7, 24, None)]), replay) == {5: [4]}
    # one stream only: no cross-stream wait
    assert captured_waits(_window(unnamed, events), dict.fromkeys(range(6), 7)) == {}

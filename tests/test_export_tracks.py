"""The export's host and Python tracks hold exactly the tables' rows per thread (count, start and duration to
the ns), and every GPU activity carries its category as an arg and as the slice name's prefix (issue 18)."""

from __future__ import annotations

from collections import defaultdict

import pytest
from tracehouse.reports.export import export_run
from tracehouse.reports.perfetto_proto import read_slices, track_rank
from tracehouse.warehouse.catalog import connect

SITUATIONS = ("eager-module-sites", "stream-sync-wait")


@pytest.fixture(scope="module")
def runs(situation_warehouse):
    wh, every, _ = situation_warehouse
    return wh, {name: every[name] for name in SITUATIONS}


def _base(tracks, uuid):
    while "(overlap" in (tracks[uuid].get("name") or ""):
        uuid = tracks[uuid]["parent"]
    return uuid


@pytest.mark.parametrize("name", SITUATIONS)
def test_host_ops_and_frames_per_thread_and_categories(runs, name, tmp_path):
    wh, ids = runs
    run_id = ids[name]
    out = tmp_path / "t.pftrace"
    export_run(wh, run_id, out, analysis=False)
    tracks, slices = read_slices(out.read_bytes())
    con = connect(wh, runs=[run_id])
    ops = con.execute(
        "SELECT rank, pid, tid, stream, cat, op_id, start_ns, coalesce(dur_ns, 0) FROM cpu_ops "
        "WHERE run_id = ?",
        [run_id],
    ).fetchall()
    frames = con.execute(
        "SELECT rank, pid, tid, frame_id, start_ns, coalesce(dur_ns, 0) FROM python_frames WHERE run_id = ?",
        [run_id],
    ).fetchall()
    cats = dict(
        con.execute("SELECT kernel_id, category FROM activity_category WHERE run_id = ?", [run_id]).fetchall()
    )
    names = dict(con.execute("SELECT kernel_id, name FROM kernels WHERE run_id = ?", [run_id]).fetchall())
    con.close()
    want_ops, want_frames = defaultdict(list), defaultdict(list)
    for rank, pid, tid, stream, cat, op_id, start, dur in ops:
        key = f"GPU sync records stream {stream}" if cat == "cuda_sync" else f"thread {tid} (pid {pid})"
        want_ops[(rank, key)].append((op_id, start, dur))
    for rank, _pid, tid, frame_id, start, dur in frames:
        want_frames[(rank, f"python thread {tid}")].append((frame_id, start, dur))
    got_ops, got_frames = defaultdict(list), defaultdict(list)
    gpu = 0
    for s in slices:
        key = (track_rank(tracks, s["track"]), tracks[_base(tracks, s["track"])]["name"])
        if s.get("category") == "python":
            got_frames[key].append((s["args"]["frame_id"], s["start_ns"], s["dur_ns"]))
        elif "op_id" in s["args"] and s.get("category") not in ("critical_path",):
            got_ops[key].append((s["args"]["op_id"], s["start_ns"], s["dur_ns"]))
        elif s.get("category") in ("kernel", "memcpy", "memset"):
            gpu += 1
            k = s["args"]["kernel_id"]
            category = cats.get(k) or ("memory" if s["category"] in ("memcpy", "memset") else "other")
            assert s["args"]["category"] == category and s["name"] == f"[{category}] {names[k]}"
    assert {k: sorted(v) for k, v in got_ops.items()} == {k: sorted(v) for k, v in want_ops.items()}
    assert {k: sorted(v) for k, v in got_frames.items()} == {k: sorted(v) for k, v in want_frames.items()}
    assert gpu == len(names) and ops
    if name == "eager-module-sites":
        assert frames  # the situation records Python stacks

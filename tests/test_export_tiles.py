"""The export's idle gaps, exposed communication and data-quality flags, computed per tile / batch of steps in
bounded memory (issue 18), are exactly the rows of the whole-run views: on situations, on a 2-rank decode run
cut into tiles of one step, and on windows whose bounds cut through a gap and an exposed interval."""

from __future__ import annotations

import pytest
from tracehouse.reports.export import export_run
from tracehouse.reports.perfetto_proto import read_slices, track_rank
from tracehouse.warehouse.catalog import connect

SITUATIONS = (
    "dataloader-stall",
    "stream-sync-wait",
    "gpu-queued-at-window-start",
    "host-stall-in-step",
    "single-step",
    "graph-replay-no-capture",
)


@pytest.fixture(scope="module")
def runs(warehouses):
    from warehouses import scenario, situation

    wh, out, _ = warehouses.named(
        {
            **{name: situation(name) for name in SITUATIONS},
            "decode": scenario("serving-decode", seed=7, ranks=2, steps=6, layers=2),
        }
    )
    return wh, out


def _exported(path):
    tracks, slices = read_slices(path.read_bytes())
    got = {"idle_gap": [], "exposed_comm": [], "data_quality": []}
    for s in slices:
        cat = s.get("category")
        if cat not in got:
            continue
        rank, a = track_rank(tracks, s["track"]), s["args"]
        if cat == "idle_gap":
            got[cat].append(
                (
                    rank,
                    a.get("step"),
                    s["start_ns"],
                    s["dur_ns"],
                    a["class"],
                    a["wait_ns"],
                    a["host_ns"],
                    a["queued_ns"],
                    a.get("host_op"),
                    a.get("host_op_ns"),
                    a.get("next_kernel_id"),
                )
            )
        elif cat == "exposed_comm":
            got[cat].append((rank, s["start_ns"], s["dur_ns"]))
        else:
            got[cat].append((a.get("rank"), a.get("step"), a["flag"]))
    return {k: sorted(v, key=repr) for k, v in got.items()}


def _views(wh, run_id, lo=None, hi=None):
    con = connect(wh)
    lo = -(1 << 62) if lo is None else lo
    hi = (1 << 62) if hi is None else hi
    gaps = con.execute(
        """
        SELECT rank, step, gap_start_ns, gap_ns, class, wait_ns, host_ns, queued_ns, host_op, host_op_ns, next_kernel_id
        FROM idle_gaps WHERE run_id = ? AND scope = 'device' AND class <> 'tiny'
          AND gap_start_ns < ? AND (gap_start_ns + gap_ns > ? OR gap_start_ns >= ?)""",
        [run_id, hi, lo, lo],
    ).fetchall()
    comm = con.execute(
        """
        SELECT rank, start_ns, dur_ns FROM export_exposed_comm
        WHERE run_id = ? AND start_ns < ? AND (end_ns > ? OR start_ns >= ?)""",
        [run_id, hi, lo, lo],
    ).fetchall()
    flags = con.execute("SELECT rank, step, flag FROM data_quality WHERE run_id = ?", [run_id]).fetchall()
    (ranks,) = con.execute("SELECT count(DISTINCT rank) FROM kernels WHERE run_id = ?", [run_id]).fetchone()
    con.close()
    # a flag of the whole run (rank NULL) is drawn on every rank's analysis track
    flags = [f for f in flags if f[0] is not None] + [f for f in flags if f[0] is None] * max(ranks, 1)
    return {
        "idle_gap": sorted(gaps, key=repr),
        "exposed_comm": sorted(comm, key=repr),
        "data_quality": sorted(flags, key=repr),
    }


@pytest.mark.parametrize("name", [*SITUATIONS, "decode"])
def test_tiles_of_one_step_give_the_whole_run_views(runs, name, tmp_path):
    wh, ids = runs
    out = tmp_path / "t.pftrace"  # step_batch=1: every step its own tile and batch
    summary = export_run(wh, ids[name], out, align=False, analysis_steps=1000, step_batch=1)
    assert not [n for n in summary.notes if "not drawn" in n], summary.notes
    got, want = _exported(out), _views(wh, ids[name])
    for key in got:
        assert got[key] == want[key], key
    if name == "decode":  # the run has each figure, on several tiles
        con = connect(wh)
        (steps,) = con.execute(
            "SELECT count(DISTINCT step) FROM step_spans WHERE run_id = ?", [ids[name]]
        ).fetchone()
        con.close()
        assert steps >= 6 and len(want["idle_gap"]) > steps and want["exposed_comm"] and want["data_quality"]


def test_windows_cutting_through_gaps_and_comm(runs, tmp_path):
    """Windows whose bounds fall inside an idle gap and inside an exposed-communication interval: the export
    (tiles of one step) has exactly the whole-run rows that overlap the window, whole (never clipped)."""
    wh, ids = runs
    run_id = ids["decode"]
    con = connect(wh)
    comm = con.execute(
        "SELECT start_ns, end_ns FROM export_exposed_comm WHERE run_id = ? AND rank = 0 "
        "ORDER BY dur_ns DESC LIMIT 3",
        [run_id],
    ).fetchall()
    gaps = con.execute(
        "SELECT gap_start_ns, gap_end_ns FROM idle_gaps WHERE run_id = ? AND rank = 0 AND "
        "scope = 'device' AND class <> 'tiny' ORDER BY gap_ns DESC LIMIT 3",
        [run_id],
    ).fetchall()
    con.close()
    assert comm and gaps
    windows = [((g0 + g1) // 2, (c0 + c1) // 2) for (g0, g1), (c0, c1) in zip(gaps, comm)]
    windows += [((c0 + c1) // 2, (g0 + g1) // 2) for (g0, g1), (c0, c1) in zip(gaps, comm)]
    for i, (a, b) in enumerate(windows):
        lo, hi = min(a, b), max(a, b)
        if hi - lo < 2:
            continue
        out = tmp_path / f"w{i}.pftrace"
        export_run(wh, run_id, out, rank=0, window=(lo, hi), align=False, step_batch=1)
        got, want = _exported(out), _views(wh, run_id, lo, hi)
        want = {k: [r for r in v if r[0] == 0] for k, v in want.items()}
        assert got["idle_gap"] == want["idle_gap"], (lo, hi)
        assert got["exposed_comm"] == want["exposed_comm"], (lo, hi)
        cut_gap = [r for r in want["idle_gap"] if r[2] < lo < r[2] + r[3] or r[2] < hi < r[2] + r[3]]
        cut_comm = [r for r in want["exposed_comm"] if r[1] < lo < r[1] + r[2] or r[1] < hi < r[1] + r[2]]
        assert cut_gap or cut_comm  # a bound falls inside one of them (the case under test)


def _content(path):
    """Every track (name, parent's name, order) and every slice (track name, start, dur, name, args, flows) of
    an export, as sorted lists: the file's content whatever order its packets come in."""
    tracks, slices = read_slices(path.read_bytes())
    name = {u: d.get("name") or d.get("process_name") or "" for u, d in tracks.items()}
    described = sorted(
        (name[u], name.get(d.get("parent"), ""), d.get("rank_order") or 0) for u, d in tracks.items()
    )
    rows = sorted(
        (
            name[s["track"]],
            s["start_ns"],
            s["dur_ns"] if s["dur_ns"] is not None else -1,
            s.get("name"),
            repr(sorted(s.get("args", {}).items())),
            tuple(s.get("flows", ())),
            tuple(s.get("terminating", ())),
        )
        for s in slices
    )
    return described, rows


@pytest.mark.parametrize("rows_per_tile", [1, 3])
def test_tracks_cut_into_row_tiles_hold_the_same_slices(runs, tmp_path, rows_per_tile):
    """The GPU, host and Python tracks are read per tile of about TILE_ROWS rows of each rank (in bounded
    memory): cut into tiles of 1 or 3 rows, the export holds exactly the tracks (with their order), slices,
    args and flows of the export read as one tile, for every rank, a window cutting through the run, and
    overlap sub-tracks (graph-replay-no-capture overlaps on one stream)."""
    wh, ids = runs
    for name, kw in (("decode", {}), ("graph-replay-no-capture", {}), ("decode", {"rank": 1})):
        whole = tmp_path / f"{name}-whole.pftrace"
        export_run(wh, ids[name], whole, analysis=False, tile_rows=10**9, **kw)
        cut = tmp_path / f"{name}-cut.pftrace"
        summary = export_run(wh, ids[name], cut, analysis=False, tile_rows=rows_per_tile, **kw)
        assert summary.counts["gpu"] > rows_per_tile and summary.counts["host"] > rows_per_tile
        assert _content(cut) == _content(whole), name

"""Clocks aligned across ranks in the export (issue 18): sql/export_clock_offset and reports.export.

Ground truth: the situation ranks-two-hosts-clock-offset (synth/situations/clock_offset.py) writes four ranks,
ranks 2 and 3 stamped by a clock exactly HOST_B_OFFSET_NS ahead of ranks 0 and 1; the export must shift
ranks 2 and 3 back by exactly that and leave ranks 0 and 1 (one host, collective ends 2 µs apart) as they are.
"""

from __future__ import annotations

import json

import pytest
from tracehouse.reports.export import clock_alignment, export_run
from tracehouse.reports.perfetto_proto import read_slices, track_rank
from tracehouse.warehouse.catalog import connect

SITUATION = "ranks-two-hosts-clock-offset"


@pytest.fixture(scope="module")
def two_hosts(warehouses):
    from warehouses import situation

    built = warehouses.get([situation(SITUATION)])
    return built.warehouse, built.run_ids[0], built.truths[0]["expect"], built.inputs[0].parent


def _tables(con, run_id):
    """(rank, kernel_id) -> start_ns of GPU activities, (rank, op_id) -> start_ns of host ops, from the tables."""
    gpu = {
        (r, k): s
        for r, k, s in con.execute(
            "SELECT rank, kernel_id, start_ns FROM kernels WHERE run_id = ?", [run_id]
        ).fetchall()
    }
    host = {
        (r, o): s
        for r, o, s in con.execute(
            "SELECT rank, op_id, start_ns FROM cpu_ops WHERE run_id = ?", [run_id]
        ).fetchall()
    }
    return gpu, host


def _exported(path):
    tracks, slices = read_slices(path.read_bytes())

    def rank(uuid):

        return track_rank(tracks, uuid)

    gpu = {
        (rank(s["track"]), s["args"]["kernel_id"]): s["start_ns"]
        for s in slices
        if "kernel_id" in s["args"] and s.get("category") in ("kernel", "memcpy", "memset")
    }
    host = {
        (rank(s["track"]), s["args"]["op_id"]): s["start_ns"]
        for s in slices
        if "op_id" in s["args"] and s.get("category") not in ("critical_path",)
    }
    notes = next(t for t in tracks.values() if t.get("name") == "tracehouse export notes")
    return gpu, host, json.loads(notes["description"])


def test_offset_estimated_exactly_from_collective_ends(two_hosts):
    wh, run_id, expect, _ = two_hosts
    con = connect(wh)
    rows = {
        r: (ref, m, off, sig)
        for r, ref, m, off, sig in con.execute(
            "SELECT rank, reference_rank, matched, offset_ns, significant FROM export_clock_offset WHERE run_id = ?",
            [run_id],
        ).fetchall()
    }
    assert sorted(rows) == [1, 2, 3]
    for r, (ref, matched, offset, significant) in rows.items():
        assert ref == 0 and matched == expect["matched"]
        assert offset == expect["estimate_ns"][str(r)]
        assert significant is expect["significant"][str(r)]
    clocks = clock_alignment(con, run_id)
    con.close()
    assert clocks.shifts == {r: s for r, s in ((int(k), v) for k, v in expect["shift_ns"].items()) if s}


def test_export_shifts_the_other_host_by_exactly_its_offset(two_hosts, tmp_path):
    wh, run_id, expect, _ = two_hosts
    shift = {int(r): s for r, s in expect["shift_ns"].items()}
    con = connect(wh)
    gpu, host = _tables(con, run_id)
    con.close()
    summary = export_run(wh, run_id, tmp_path / "aligned.pftrace", analysis=False)
    got_gpu, got_host, meta = _exported(tmp_path / "aligned.pftrace")
    assert got_gpu.keys() == gpu.keys() and got_host.keys() == host.keys()
    for (rank, k), start in gpu.items():
        assert got_gpu[(rank, k)] == start - shift[rank], (rank, k)
    for (rank, o), start in host.items():
        assert got_host[(rank, o)] == start - shift[rank], (rank, o)
    # ranks 0 and 1 are not shifted; 2 and 3 by the one offset of their host
    assert {r for r in range(4) if shift[r]} == {2, 3}
    assert meta["clock_aligned"] is True and meta["clock_reference_rank"] == 0
    assert [meta[f"rank {r} clock_shift_ns"] for r in (1, 2, 3)] == [0] + [expect["host_b_offset_ns"]] * 2
    assert any(
        "rank(s) 2, 3 shifted by -4,321,987,654,321 ns onto rank 0's clock" in n for n in summary.notes
    )
    assert any("rank(s) 1 on rank 0's clock" in n for n in summary.notes)
    assert meta["notes"] == summary.notes


def test_no_align_keeps_raw_times(two_hosts, tmp_path):
    wh, run_id, _, _ = two_hosts
    con = connect(wh)
    gpu, host = _tables(con, run_id)
    con.close()
    summary = export_run(wh, run_id, tmp_path / "raw.pftrace", analysis=False, align=False)
    got_gpu, got_host, meta = _exported(tmp_path / "raw.pftrace")
    assert got_gpu == gpu and got_host == host
    assert meta["clock_aligned"] is False and meta["rank 2 clock_shift_ns"] == 0
    assert any("not shifted (--no-align)" in n for n in summary.notes)


def test_json_variant_shifted_alike_and_carries_the_metadata(two_hosts, tmp_path):
    wh, run_id, expect, _ = two_hosts
    shift = {int(r): s for r, s in expect["shift_ns"].items()}
    con = connect(wh)
    gpu, _ = _tables(con, run_id)
    con.close()
    export_run(wh, run_id, tmp_path / "a.json", fmt="json", analysis=False)
    doc = json.loads((tmp_path / "a.json").read_text())
    got = {
        (e["pid"] - 1, e["args"]["kernel_id"]): e["args"]["start_ns"]
        for e in doc["traceEvents"]
        if e["ph"] == "X" and e.get("cat") in ("kernel", "memcpy", "memset")
    }
    assert got == {k: s - shift[k[0]] for k, s in gpu.items()}
    assert doc["tracehouse"]["rank 3 clock_shift_ns"] == expect["host_b_offset_ns"]


def test_window_is_in_the_reference_rank_time_base(two_hosts, tmp_path):
    """Without --rank a window is on the aligned timeline (rank 0's clock): every rank's activities of that
    moment; with --rank it is in that rank's own time base."""
    wh, run_id, _, _ = two_hosts
    con = connect(wh)
    # the second step's all-reduces on rank 0's clock
    ((lo, hi),) = con.execute(
        "SELECT min(start_ns), max(start_ns + dur_ns) FROM kernels WHERE run_id = ? AND rank = 0 "
        "AND step = 1 AND name LIKE 'nccl%'",
        [run_id],
    ).fetchall()
    per_rank = dict(
        con.execute(
            "SELECT rank, count(*) FROM kernels WHERE run_id = ? AND step = 1 AND name LIKE "
            "'nccl%' GROUP BY rank",
            [run_id],
        ).fetchall()
    )
    con.close()
    lo += 10_000  # clear of the step's GEMMs (they end up to 1 us after the first all-reduce starts)
    export_run(wh, run_id, tmp_path / "w.pftrace", window=(lo, hi), analysis=False)
    got, _, _ = _exported(tmp_path / "w.pftrace")
    counts = {r: sum(1 for (rr, _) in got if rr == r) for r in range(4)}
    assert counts == per_rank  # 3 all-reduces on every rank, host B's too
    assert all(lo - 200_000 <= t < hi for t in got.values())
    export_run(wh, run_id, tmp_path / "w2.pftrace", rank=2, window=(lo, hi), analysis=False)
    assert _exported(tmp_path / "w2.pftrace")[0] == {}  # rank 2's own clock has nothing there


def test_cli_says_the_alignment_on_stderr(two_hosts, tmp_path, cli_runner):
    from cli import main

    wh, run_id, _, _ = two_hosts
    out = tmp_path / "c.pftrace"
    result = cli_runner.invoke(
        main, ["--warehouse", str(wh.root), "export", run_id, "--no-analysis", "-o", str(out)]
    )
    assert result.exit_code == 0, result.output
    assert "shifted by -4,321,987,654,321 ns" in result.stderr
    assert "shifted" not in result.stdout and str(out) in result.stdout


def test_one_host_run_is_not_shifted(tmp_path):
    """A 2-rank synthesized run of one host: collective ends agree, nothing shifted."""
    from tracehouse.ingest.load import ingest_paths
    from tracehouse.synth import write_scenario
    from tracehouse.warehouse.store import Warehouse

    wh = Warehouse(tmp_path / "wh")
    [o] = ingest_paths(
        wh,
        [write_scenario("serving-decode", tmp_path / "run", seed=2, ranks=2, steps=2, layers=2)],
        analyse=False,
    )
    con = connect(wh)
    ((sig, matched),) = con.execute(
        "SELECT significant, matched FROM export_clock_offset WHERE run_id = ?", [o.run_id]
    ).fetchall()
    clocks = clock_alignment(con, o.run_id)
    con.close()
    assert matched >= 3 and sig is False and clocks.shifts == {}


def test_real_two_ranks_point_to_point_only_not_aligned(real_runs, tmp_path):
    """multirank/sampled_2ranks: two ranks of a 128-rank job whose only communication is NCCL SendRecv
    (point-to-point: the n-th transfer of rank 0 and of rank 1 need not be one transfer; their end differences
    run from -68 ms to +134 ms). Nothing is matched, nothing shifted, and the file says so."""
    wh, run_of = real_runs
    run_id = run_of["multirank/sampled_2ranks"]
    con = connect(wh, runs=[run_id])
    rows = con.execute(
        "SELECT rank, reference_rank, matched, offset_ns, significant FROM export_clock_offset "
        "WHERE run_id = ?",
        [run_id],
    ).fetchall()
    con.close()
    assert rows == [(1, 0, 0, None, False)]
    summary = export_run(wh, run_id, tmp_path / "mr.pftrace", analysis=False)
    assert any("rank(s) 1 not aligned: fewer than 3 collectives matched" in n for n in summary.notes)

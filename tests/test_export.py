"""tracehouse export: the file parses back into exactly the activities of the tables.

Per stream the same activities (count, start and duration to the ns), none dropped where they overlap (on
sub-tracks), flows from each linked activity's launch call, the critical-path track tiling each step's path,
one process per rank, the JSON variant with the same content, and every report finding's export command
opening exactly its window. Parsing uses reports.perfetto_proto's reader, which decodes the fields the
writer writes (field numbers of Perfetto's published protos).
"""

from __future__ import annotations

import itertools
import json
import shlex
from collections import Counter, defaultdict
from pathlib import Path

import pytest
from conftest import TRACES, independent_gpu_summary, query_rows, real_trace_files, require_shared
from tracehouse.reports.export import export_run, parse_window, step_windows
from tracehouse.reports.perfetto_proto import read_slices, track_rank
from tracehouse.warehouse.catalog import connect

OVERLAP = "overlap-same-stream"
USED = (OVERLAP, "dataloader-stall", "back-to-back-1ns")


@pytest.fixture(scope="module")
def situation_warehouse(warehouses):
    """The situations these tests read, each its own run, analyses stored as `tracehouse ingest` does (the
    conftest fixture ingests all of them, without): (Warehouse, {situation: run id}, {situation: expect})."""
    from warehouses import situation

    wh, runs, truths = warehouses.named({name: situation(name) for name in USED}, derived=True)
    return wh, runs, {name: truth["expect"] for name, truth in truths.items()}


class Parsed:
    """An exported Perfetto file: slices with the track, base track (overlap lanes folded) and rank of each."""

    def __init__(self, path: Path):
        self.tracks, self.slices = read_slices(Path(path).read_bytes())
        for s in self.slices:
            s["base"] = self.base(s["track"])
            s["rank"] = self.rank(s["track"])
            s["base_name"] = self.tracks[s["base"]].get("name")

    def base(self, uuid: int) -> int:
        while "(overlap" in (self.tracks[uuid].get("name") or ""):
            uuid = self.tracks[uuid]["parent"]
        return uuid

    def rank(self, uuid: int) -> int:
        return track_rank(self.tracks, uuid)

    def of(self, category: str) -> list[dict]:
        return [s for s in self.slices if s.get("category") == category]

    def gpu(self) -> list[dict]:
        return [s for s in self.slices if s.get("category") in ("kernel", "memcpy", "memset")]


def _export(wh, run_id, path, **kw) -> Parsed:
    export_run(wh, run_id, path, **kw)
    return Parsed(path)


def _table_gpu(con, run_id, where="", params=()) -> list[dict]:
    return query_rows(
        con,
        f"""
        SELECT rank, device, stream, kernel_id, start_ns, dur_ns FROM kernels WHERE run_id = ? {where}
        ORDER BY rank, device, stream, start_ns, kernel_id""",
        [run_id, *params],
    )


def _per_stream(rows) -> dict:
    out = defaultdict(list)
    for r in rows:
        out[(r["rank"], r["device"], r["stream"])].append((r["kernel_id"], r["start_ns"], r["dur_ns"]))
    return {k: sorted(v) for k, v in out.items()}


def _exported_per_stream(p: Parsed) -> dict:
    out = defaultdict(list)
    for s in p.gpu():
        out[(s["rank"], s["args"]["device"], s["args"]["stream"])].append(
            (s["args"]["kernel_id"], s["start_ns"], s["dur_ns"])
        )
    return {k: sorted(v) for k, v in out.items()}


@pytest.fixture(scope="module")
def overlap(situation_warehouse, tmp_path_factory):
    wh, runs, expect = situation_warehouse
    path = tmp_path_factory.mktemp("export") / "overlap.pftrace"
    return wh, runs[OVERLAP], expect[OVERLAP], _export(wh, runs[OVERLAP], path)


def test_overlapping_activities_go_to_sub_tracks_none_dropped(overlap):
    _wh, _run_id, expect, p = overlap
    per_stream = defaultdict(list)
    for s in p.gpu():
        per_stream[s["args"]["stream"]].append(s)
    assert sorted(per_stream) == sorted(int(k) for k in expect["streams"])
    for stream, truth in expect["streams"].items():
        got = per_stream[int(stream)]
        assert len(got) == truth["activities"]
        assert sorted(s["start_ns"] for s in got) == truth["starts_ns"]
        assert sorted(s["dur_ns"] for s in got) == truth["durs_ns"]
        lanes = {s["track"] for s in got}
        assert len(lanes) == truth["lanes"], stream
        for lane in lanes:  # no two slices of one lane overlap: Perfetto would nest or drop them
            spans = sorted((s["start_ns"], s["start_ns"] + s["dur_ns"]) for s in got if s["track"] == lane)
            assert all(a[1] <= b[0] for a, b in itertools.pairwise(spans)), (stream, spans)
    assert expect["streams"]["7"]["lanes"] == 3  # the situation does hold overlaps (a long kernel + 2 inside)


def test_per_stream_activities_equal_the_tables_to_the_ns(overlap, situation_warehouse, tmp_path):
    wh, runs, _ = situation_warehouse
    con = connect(wh)
    for name in (OVERLAP, "dataloader-stall", "back-to-back-1ns"):
        run_id = runs[name]
        p = (
            overlap[3]
            if name == OVERLAP
            else _export(wh, run_id, tmp_path / f"{name}.pftrace", analysis=False)
        )
        assert _exported_per_stream(p) == _per_stream(_table_gpu(con, run_id)), name
    con.close()


def test_flows_connect_each_linked_kernel_to_its_launch_call(overlap):
    wh, run_id, expect, p = overlap
    con = connect(wh)
    launch_of = {
        r["kernel_id"]: r["launch_op_id"]
        for r in query_rows(
            con,
            "SELECT kernel_id, launch_op_id FROM kernels WHERE run_id = ? AND launch_op_id IS NOT NULL",
            [run_id],
        )
    }
    con.close()
    starts = {}
    for s in p.of("cuda_runtime") + p.of("cuda_driver"):
        for f in s["flows"]:
            assert f not in starts
            starts[f] = s
    ends = [(s, f) for s in p.gpu() for f in s["terminating"]]
    assert len(ends) == len(launch_of) == expect["linked"]
    for s, f in ends:
        assert starts[f]["args"]["op_id"] == launch_of[s["args"]["kernel_id"]]
    assert set(starts) == {f for _, f in ends}  # no dangling flow start either
    # the graph launch: one call, one flow per replayed kernel
    assert max(len(s["flows"]) for s in starts.values()) == expect["graph_launch_flows"]


def test_critical_path_track_tiles_the_path_exactly(situation_warehouse, tmp_path):
    wh, runs, _ = situation_warehouse
    con = connect(wh)
    for name in (OVERLAP, "dataloader-stall"):
        run_id = runs[name]
        p = _export(wh, run_id, tmp_path / f"{name}.pftrace")
        segs = p.of("critical_path")
        assert segs, name
        by_step = defaultdict(list)
        for s in segs:
            by_step[s["args"]["step"]].append(s)
        for step, rows in by_step.items():
            truth = query_rows(
                con,
                "SELECT seq, start_ns, dur_ns FROM critical_path WHERE run_id = ? AND rank = 0 "
                "AND step = ? ORDER BY seq",
                [run_id, step],
            )
            rows.sort(key=lambda s: s["args"]["seq"])
            assert [(s["args"]["seq"], s["start_ns"], s["dur_ns"]) for s in rows] == [
                (r["seq"], r["start_ns"], r["dur_ns"]) for r in truth
            ]
            for a, b in itertools.pairwise(rows):  # consecutive segments touch
                assert a["start_ns"] + a["dur_ns"] == b["start_ns"]
            span = rows[-1]["start_ns"] + rows[-1]["dur_ns"] - rows[0]["start_ns"]
            assert sum(s["dur_ns"] for s in rows) == span
    con.close()


def test_idle_gaps_and_flags_and_takeaways(situation_warehouse, tmp_path):
    wh, runs, expect = situation_warehouse
    run_id = runs["dataloader-stall"]
    p = _export(wh, run_id, tmp_path / "dl.pftrace")
    gaps = p.of("idle_gap")
    truth = [g for g in expect["dataloader-stall"]["idle_gaps"] if g["scope"] == "device"]
    assert [(g["start_ns"], g["dur_ns"], g["args"]["class"], g["args"]["host_op"]) for g in gaps] == [
        (t["gap_start_ns"], t["gap_ns"], t["class"], t["host_op"]) for t in truth
    ]
    con = connect(wh)
    flags = query_rows(con, "SELECT flag FROM data_quality WHERE run_id = ?", [run_id])
    con.close()
    assert sorted(s["args"]["flag"] for s in p.of("data_quality")) == sorted(f["flag"] for f in flags)
    assert all(s.get("instant") for s in p.of("data_quality"))
    takeaways = p.of("takeaway")
    assert takeaways
    for t in takeaways:
        assert t["args"]["export"].startswith("tracehouse export")


def test_exposed_communication_sums_to_the_timeline(situation_warehouse):
    wh, runs, _ = situation_warehouse
    con = connect(wh)
    for name in (OVERLAP, "dataloader-stall"):
        rows = query_rows(
            con,
            """
            SELECT t.rank, t.device, t.exposed_comm_ns, coalesce(x.ns, 0) AS ns
            FROM gpu_timeline AS t
            LEFT JOIN (SELECT rank, device, sum(dur_ns) AS ns FROM export_exposed_comm WHERE run_id = ?
                       GROUP BY ALL) AS x USING (rank, device)
            WHERE t.run_id = ? AND t.variant = 'exact' AND t.step IS NULL""",
            [runs[name], runs[name]],
        )
        assert rows and all(r["exposed_comm_ns"] == r["ns"] for r in rows), rows
    # the overlap situation's all-reduce runs 5 us beside compute, then 5 us beside the norm of stream 9 ...:
    # its exposed time is where no compute ran
    (n,) = con.execute(
        "SELECT count(*) FROM export_exposed_comm WHERE run_id = ?", [runs[OVERLAP]]
    ).fetchone()
    assert n >= 0
    con.close()


@pytest.fixture(scope="module")
def four_ranks(warehouses, tmp_path_factory):
    from warehouses import scenario

    built = warehouses.get([scenario("serving-decode", seed=3, ranks=4, steps=2, layers=2)])
    return built.warehouse, built.run_ids[0], tmp_path_factory.mktemp("four")  # (the exports' folder)


def test_four_ranks_one_process_each_clocks_as_the_tables(four_ranks):
    wh, run_id, root = four_ranks
    p = _export(wh, run_id, root / "all.pftrace")
    processes = {u: t for u, t in p.tracks.items() if "parent" not in t}
    assert sorted(t["pid"] - 1 for t in processes.values()) == [0, 1, 2, 3]
    assert sorted(t["process_name"] for t in processes.values()) == [f"rank {r}" for r in range(4)]
    con = connect(wh)
    assert _exported_per_stream(p) == _per_stream(_table_gpu(con, run_id))
    con.close()
    assert {s["rank"] for s in p.of("critical_path")} == {0, 1, 2, 3}
    one = _export(wh, run_id, root / "r2.pftrace", rank=2, analysis=False)
    assert {s["rank"] for s in one.slices} == {2}
    # the per-step analyses of the first N steps only, and the file says so
    cut = export_run(wh, run_id, root / "cut.pftrace", analysis_steps=1)
    assert cut.notes and any("first 1 of its 2 steps" in n for n in cut.notes)
    steps = {s["args"]["step"] for s in Parsed(root / "cut.pftrace").of("critical_path")}
    assert steps == {min({s["args"]["step"] for s in p.of("critical_path")})}
    # ingested --no-analyses: no takeaways, said so
    assert any("no report takeaways" in n for n in cut.notes)


def test_step_and_window_select_exactly_the_overlapping_slices(four_ranks):
    wh, run_id, root = four_ranks
    con = connect(wh)
    wins = step_windows(con, run_id)
    rank, step, lo, hi, _ = wins[-1]
    p = _export(wh, run_id, root / "step.pftrace", rank=rank, step=step, analysis=False)
    inside = "AND rank = ? AND start_ns < ? AND (end_ns > ? OR start_ns >= ?)"
    assert _exported_per_stream(p) == _per_stream(_table_gpu(con, run_id, inside, (rank, hi, lo, lo)))
    # step_windows is step_breakdown's wall
    ((a, b),) = con.execute(
        "SELECT wall_start_ns, wall_end_ns FROM step_breakdown WHERE run_id = ? AND rank = ? AND step = ?",
        [run_id, rank, step],
    ).fetchall()
    assert (a, b) == (lo, hi)
    mid = (lo + hi) // 2
    w = _export(wh, run_id, root / "w.pftrace", window=(mid, mid + 1000), analysis=False)
    assert _exported_per_stream(w) == _per_stream(
        _table_gpu(con, run_id, "AND start_ns < ? AND (end_ns > ? OR start_ns >= ?)", (mid + 1000, mid, mid))
    )
    hosts = query_rows(
        con,
        "SELECT count(*) AS n FROM cpu_ops WHERE run_id = ? AND start_ns < ? AND "
        "(start_ns + dur_ns > ? OR start_ns >= ?)",
        [run_id, mid + 1000, mid, mid],
    )
    assert (
        len(
            [
                s
                for s in w.slices
                if s.get("category")
                not in (
                    "kernel",
                    "memcpy",
                    "memset",
                    "python",
                    "critical_path",
                    "idle_gap",
                    "exposed_comm",
                    "layer",
                    "data_quality",
                    "takeaway",
                )
            ]
        )
        == hosts[0]["n"]
    )
    con.close()


def test_json_variant_has_the_same_content(four_ranks):
    wh, run_id, root = four_ranks
    # one step's analyses (the analysis tracks of both formats, at a fraction of the views' work)
    p = _export(wh, run_id, root / "same.pftrace", analysis_steps=1)
    export_run(wh, run_id, root / "same.json", fmt="json", analysis_steps=1)
    doc = json.loads((root / "same.json").read_text())
    events = doc["traceEvents"]
    xs = [e for e in events if e["ph"] in ("X", "i")]
    assert Counter(e["cat"] for e in xs) == Counter(s.get("category") for s in p.slices)
    gpu = sorted(
        (
            e["pid"] - 1,
            e["args"]["stream"],
            e["args"]["kernel_id"],
            e["args"]["start_ns"],
            e["args"]["dur_ns"],
        )
        for e in xs
        if e["cat"] in ("kernel", "memcpy", "memset")
    )
    assert gpu == sorted(
        (s["rank"], s["args"]["stream"], s["args"]["kernel_id"], s["start_ns"], s["dur_ns"]) for s in p.gpu()
    )
    # ts/dur are exact decimal µs: the ns survive in the literal itself
    raw = (root / "same.json").read_text()
    first = next(e for e in xs if e["cat"] == "kernel")
    assert f'"ts":{first["args"]["start_ns"] // 1000}.{first["args"]["start_ns"] % 1000:03d}' in raw
    # no two X slices of one (pid, tid) overlap without nesting (Perfetto's JSON importer drops those)
    by_tid = defaultdict(list)
    for e in xs:
        if e["ph"] == "X" and e["cat"] in ("kernel", "memcpy", "memset"):
            by_tid[(e["pid"], e["tid"])].append(
                (e["args"]["start_ns"], e["args"]["start_ns"] + e["args"]["dur_ns"])
            )
    for spans in by_tid.values():
        spans.sort()
        assert all(a[1] <= b[0] for a, b in itertools.pairwise(spans))
    assert len([e for e in events if e["ph"] == "s"]) == len([e for e in events if e["ph"] == "f"]) > 0


def test_report_findings_name_their_window_and_the_command_reproduces_it(
    situation_warehouse, cli_runner, tmp_path
):
    from tracehouse.reports.run import build_run_report
    from tracehouse.warehouse.engine import open as open_connection

    from tracehouse.cli import main

    wh, runs, _ = situation_warehouse
    run_id = runs["dataloader-stall"]
    con = open_connection(wh, runs=[run_id])
    report = build_run_report(con, run_id)
    con.close()
    findings = (
        [t.where for t in report.takeaways]
        + [q.where for q in report.quality]
        + [report.step.window, report.step.gap_window]
    )
    # a device gap's window (the longest gap, and a takeaway drawn on it) holds no activity: the gap itself;
    # a host-setup window is before the step's first GPU activity: it may hold none either
    gaps = [report.step.gap_window] + [t.where for t in report.takeaways if t.window_of == "gap"]
    may_be_empty = [t.where for t in report.takeaways if t.figure == "step_breakdown.host_setup"]
    assert report.takeaways and report.quality and all(f is not None for f in findings)
    con = connect(wh)
    for i, f in enumerate(findings):
        assert f.start_ns is not None and f.end_ns is not None and f.end_ns > f.start_ns
        args = shlex.split(f.command)
        assert args[:2] == ["tracehouse", "export"]
        args[args.index("-o") + 1] = str(tmp_path / f"{i}.pftrace")
        is_gap = any(f is g for g in gaps)
        # the GPU tracks are checked; the analysis tracks (seconds of views each) only for a gap's own slice
        result = cli_runner.invoke(
            main, ["--warehouse", str(wh.root)] + args[1:] + ([] if is_gap else ["--no-analysis"])
        )
        assert result.exit_code == 0, result.output
        p = Parsed(tmp_path / f"{i}.pftrace")
        where = "AND start_ns < ? AND (end_ns > ? OR start_ns >= ?)" + (
            " AND rank = ?" if f.rank is not None else ""
        )
        params = (f.end_ns, f.start_ns, f.start_ns) + ((f.rank,) if f.rank is not None else ())
        expected = _per_stream(_table_gpu(con, run_id, where, params))
        assert _exported_per_stream(p) == expected, f.command
        if is_gap:  # a device gap: no activity inside it, the gap itself is on its track
            assert not expected
            assert [(g["start_ns"], g["dur_ns"]) for g in p.of("idle_gap")] == [
                (f.start_ns, f.end_ns - f.start_ns)
            ]
        elif not any(f is m for m in may_be_empty):
            assert expected, f.command
    con.close()
    md = Path(tmp_path / "r.md")
    result = cli_runner.invoke(main, ["--warehouse", str(wh.root), "report", "--run", run_id, "-o", str(md)])
    assert result.exit_code == 0
    text = md.read_text()
    assert text.count("tracehouse export") >= len(report.takeaways) + 2


def test_report_with_trace_writes_and_links_the_file(situation_warehouse, cli_runner, tmp_path):
    from tracehouse.cli import main

    wh, runs, _ = situation_warehouse
    out = tmp_path / "run.html"
    result = cli_runner.invoke(
        main,
        [
            "--warehouse",
            str(wh.root),
            "report",
            "--run",
            runs[OVERLAP],
            "--format",
            "html",
            "-o",
            str(out),
            "--with-trace",
        ],
    )
    assert result.exit_code == 0, result.output
    html = out.read_text()
    assert (tmp_path / "run.pftrace").is_file() and 'href="run.pftrace"' in html
    assert "ncclDevKernel_AllReduce_Sum_bf16_RING_LL<&>" not in html  # every trace string escaped
    p = Parsed(tmp_path / "run.pftrace")
    assert any(s["name"].endswith("RING_LL<&>") for s in p.gpu())  # the trace keeps the name as it is
    bad = cli_runner.invoke(
        main, ["--warehouse", str(wh.root), "report", "--run", runs[OVERLAP], "--with-trace"]
    )
    assert bad.exit_code == 2


def test_report_with_trace_opens_one_connection_and_builds_the_report_once(
    situation_warehouse, cli_runner, tmp_path, monkeypatch
):
    """`report --with-trace`: the run resolved, the report built and the trace exported on one connection;
    the trace's takeaways are those of the report written beside it (built once, not again by the export)."""
    import tracehouse.reports.export.analysis
    import tracehouse.reports.write
    import tracehouse.warehouse.engine  # noqa: F401

    from tracehouse import reports, warehouse
    from tracehouse.cli import main

    wh, runs, _ = situation_warehouse
    opened, built = [], []

    def counting(calls, real):
        return lambda *a, **k: calls.append(1) or real(*a, **k)

    monkeypatch.setattr(warehouse.engine, "connect", counting(opened, warehouse.engine.connect))
    monkeypatch.setattr(reports.write, "build", counting(built, reports.write.build))
    # the export's own build of the report (reports/export/analysis.py), which --with-trace must not call
    analysis = reports.export.analysis
    monkeypatch.setattr(analysis, "build_run_report", counting(built, analysis.build_run_report))
    out = tmp_path / "run.json"
    args = ["--warehouse", str(wh.root), "report", "--run", runs["dataloader-stall"], "--format", "json"]
    result = cli_runner.invoke(main, [*args, "-o", str(out), "--with-trace"])
    assert result.exit_code == 0, result.output
    assert len(opened) == 1 and len(built) == 1
    report = json.loads(out.read_text())
    drawn = Parsed(tmp_path / "run.pftrace").of("takeaway")
    assert drawn and {t["args"]["text"] for t in drawn} <= {t["text"] for t in report["takeaways"]}


@pytest.mark.parametrize(
    "args, message",
    [
        (["nope", "-o", "{tmp}/x.pftrace"], "no run 'nope'"),
        (["{run}", "--window", "5:3", "-o", "{tmp}/x.pftrace"], "END must be after START"),
        (["{run}", "--window", "abc", "-o", "{tmp}/x.pftrace"], "is not START:END"),
        (["{run}", "--step", "99", "-o", "{tmp}/x.pftrace"], "has no step 99"),
        (["{run}", "--rank", "7", "-o", "{tmp}/x.pftrace"], "has no rank 7"),
    ],
)
def test_bad_input_one_line_exit_1_nothing_written(situation_warehouse, cli_runner, tmp_path, args, message):
    from tracehouse.cli import main

    wh, runs, _ = situation_warehouse
    args = [a.format(tmp=tmp_path, run=runs[OVERLAP]) for a in args]
    result = cli_runner.invoke(main, ["--warehouse", str(wh.root), "export"] + args)
    assert result.exit_code == 1
    assert message in result.output and "Traceback" not in result.output
    assert len(result.output.strip().splitlines()) == 1
    assert list(tmp_path.iterdir()) == []


def test_parse_window_units():
    assert parse_window("1765000000000000000:1765000000000001000") == (
        1765000000000000000,
        1765000000000001000,
    )
    assert parse_window("1765000000000.5us:1765000000001us") == (1_765_000_000_000_500, 1_765_000_000_001_000)
    assert parse_window("2ms:3ms") == (2_000_000, 3_000_000)


@pytest.mark.parametrize("rel", real_trace_files())
def test_every_real_trace_exports(real_warehouse, rel, tmp_path):
    """Every real trace exports; its GPU slices are the tables' per stream, and their count and total
    duration are those of a plain JSON pass over the trace file (no tracehouse code)."""
    require_shared()
    wh, run_of = real_warehouse
    # the GPU tracks only: the analysis tracks are checked on the situations and on b200_eager below (with
    # them, this test took 10 minutes of the suite over the corpus)
    p = _export(wh, run_of[rel], tmp_path / "real.pftrace", analysis=False)
    con = connect(wh)
    assert _exported_per_stream(p) == _per_stream(_table_gpu(con, run_of[rel]))
    (dups,) = con.execute(
        "SELECT coalesce(max(warnings['duplicate_gpu_activities']), 0) FROM runs WHERE run_id = ?",
        [run_of[rel]],
    ).fetchone()
    con.close()
    truth = independent_gpu_summary(TRACES / rel)
    if not dups:
        assert len(p.gpu()) == truth["count"]
        assert sum(s["dur_ns"] for s in p.gpu()) == truth["dur_ns"]


def test_b200_eager_pdl_overlaps_on_a_sub_track(real_warehouse, tmp_path):
    """Hand-checked: b200_eager_rank0 has 929 GPU activities (11,665,760 ns in all, a plain JSON pass), 74 of
    which start before an earlier activity of stream 7 ends (programmatic dependent launch); at most two are
    open at once, so stream 7 has one overlap sub-track, holding 38 of them (first fit: in a chain of
    overlapping kernels every other one), and none is dropped."""
    require_shared()
    wh, run_of = real_warehouse
    rel = "nvidia/b200_eager_rank0.json.gz"
    if rel not in run_of:
        pytest.skip(f"{rel} not in ../shared/traces")
    p = _export(wh, run_of[rel], tmp_path / "b200.pftrace")
    gpu = p.gpu()
    assert len(gpu) == 929 and sum(s["dur_ns"] for s in gpu) == 11_665_760
    lanes = Counter(p.tracks[s["track"]]["name"] for s in gpu)
    assert lanes == {"GPU 0 stream 7": 891, "GPU 0 stream 7 (overlap 1)": 38}
    assert len([s for s in gpu if s["terminating"]]) == 929  # every activity linked to its launch call

"""One run per profiling session: a folder's files are grouped into runs by what they say (ingest/sessions.py).

The synthesized layouts (synth/sessions.py) generate each session on its own and record which files it
wrote; the grouping must give back exactly those sessions. The real folders of ../shared/traces are
checked against what an independent read of their names and metadata says.
"""

from __future__ import annotations

import gzip
import itertools
import json
import re
import sqlite3
from pathlib import Path

import pytest
from conftest import TRACES, require_shared
from tracebuilder import simple_events, write_trace
from tracehouse.ingest.load import ingest_paths
from tracehouse.ingest.run import UNTOLD, plan_runs
from tracehouse.synth.scenario import write_scenario
from tracehouse.synth.sessions import LAYOUTS, write_layout
from tracehouse.warehouse.catalog import connect
from tracehouse.warehouse.store import Warehouse


def _groups(plans) -> set[frozenset[str]]:
    return {frozenset(p.name for p in plan.files) for plan in plans}


def _truth(folder: Path) -> list[dict]:
    return json.loads((folder / "ground_truth.json").read_text())["sessions"]


@pytest.mark.parametrize("name", sorted(LAYOUTS))
def test_layout_sessions_are_the_runs(tmp_path, name):
    folder = write_layout(name, tmp_path / name)
    sessions = _truth(folder)
    assert len(sessions) >= 2
    plans = plan_runs([folder])
    assert _groups(plans) == {frozenset(s["files"]) for s in sessions}
    said = plans[0].announce
    assert said.startswith(f"{len(sessions)} profiling sessions in {folder}, each its own run: run A (")
    for s in sessions:
        assert all(f in said for f in s["files"])
    # --one-run: the old rule, every file of the folder one run
    [one] = plan_runs([folder], one_run=True)
    assert sorted(p.name for p in one.files) == sorted(f for s in sessions for f in s["files"])
    assert one.announce is None


def test_two_sglang_sessions_ingest_as_two_runs(tmp_path, capsys):
    folder = write_layout("two-sessions-sglang", tmp_path / "profile")
    sessions = _truth(folder)
    wh = Warehouse(tmp_path / "wh")
    outcomes = ingest_paths(wh, [folder], analyse=False)
    assert "2 profiling sessions in" in capsys.readouterr().err
    assert all(o.stored and not o.problems for o in outcomes) and len({o.run_id for o in outcomes}) == 2
    con = connect(wh)
    for outcome, session in zip(outcomes, sessions):
        files, n_ranks, world, attributed = con.execute(
            "SELECT files, n_ranks, world_size, attributed_activities FROM runs WHERE run_id = ?",
            [outcome.run_id],
        ).fetchone()
        assert sorted(f["name"] for f in files) == sorted(session["files"])
        assert attributed > 0
        # the server's capture traces (recorded once, at its start) attribute each session's graph replays
        sites = con.execute("SELECT count(*) FROM kernel_sites WHERE run_id = ?", [outcome.run_id]).fetchone()
        assert sites[0] > 0
        assert (n_ranks, world) == (session["ranks"], session["world_size"])
        ranks = con.execute(
            "SELECT list(DISTINCT rank ORDER BY rank) FROM kernels WHERE run_id = ?", [outcome.run_id]
        ).fetchone()[0]
        assert ranks == list(range(session["ranks"]))
    # the old rule on purpose: one run of four ranks, the repeat noted
    [old] = ingest_paths(wh, [folder], analyse=False, one_run=True)
    assert old.stored and old.run_id not in {o.run_id for o in outcomes}
    assert con.execute("SELECT n_ranks FROM runs WHERE run_id = ?", [old.run_id]).fetchone() == (4,)


def test_nsys_exports_ingest_one_run_each(tmp_path, capsys):
    folder = write_layout("nsys-exports", tmp_path / "exports")
    sessions = {frozenset(s["files"]): s for s in _truth(folder)}
    wh = Warehouse(tmp_path / "wh")
    outcomes = ingest_paths(wh, [folder], analyse=False)
    assert f"{len(sessions)} profiling sessions in" in capsys.readouterr().err
    assert len(outcomes) == len(sessions) and all(o.stored and not o.problems for o in outcomes)
    con = connect(wh)
    for outcome in outcomes:
        files, n_ranks = con.execute(
            "SELECT files, n_ranks FROM runs WHERE run_id = ?", [outcome.run_id]
        ).fetchone()
        session = sessions[frozenset(f["name"] for f in files)]
        assert n_ranks == session["ranks"]


def _session_files(tmp_path: Path, seed: int, ranks: int, start_ns: int, keep: set[int]) -> list[str]:
    """One session's rank files (those of `keep`), generated on its own, moved into tmp_path/'mixed'."""
    out = write_scenario(
        "serving-decode",
        tmp_path / f"gen-{seed}",
        ranks=ranks,
        steps=1,
        layers=1,
        seed=seed,
        start_ns=start_ns,
        naming="tensorboard",
    )
    names = json.loads((out / "ground_truth.json").read_text())["files"]
    kept = [names[str(r)] for r in sorted(keep)]
    (tmp_path / "mixed").mkdir(exist_ok=True)
    for name in kept:
        (out / name).rename(tmp_path / "mixed" / name)
    return kept


def test_ranks_of_one_run_agree_on_world_size(tmp_path):
    """Session B's rank 2 of a world of 3, written beside session A's ranks 0 and 1 of a world of 2 and
    at the same time: its rank does not repeat, its world size tells it apart."""
    start = 1_765_432_100_000_000_000
    a = _session_files(tmp_path, 3, 2, start, {0, 1})
    b = _session_files(tmp_path, 4, 3, start, {2})
    assert _groups(plan_runs([tmp_path / "mixed"])) == {frozenset(a), frozenset(b)}


def test_files_that_say_nothing_stay_one_run_and_say_so(tmp_path):
    """No rank, no world size, no process, no time in the name: nothing tells sessions apart."""
    events = [{k: v for k, v in e.items() if k not in ("pid",)} for e in simple_events()]
    for name in ("first.json.gz", "second.json.gz"):
        write_trace(tmp_path / "run" / name, events)
    [plan] = plan_runs([tmp_path / "run"])
    assert len(plan.files) == 2 and plan.notes == [UNTOLD] and plan.announce is None


def test_traces_of_separate_programs_are_separate_runs(tmp_path):
    """Two rank-less traces of one process (the same pid: profiled twice) and one of another program."""
    for name, pid in (("before.json.gz", 7), ("after.json.gz", 7), ("other.json.gz", 9)):
        write_trace(
            tmp_path / "run" / name, [dict(e, pid=pid) if e["pid"] == 1 else e for e in simple_events()]
        )
    plans = plan_runs([tmp_path / "run"])
    assert _groups(plans) == {frozenset({n}) for n in ("before.json.gz", "after.json.gz", "other.json.gz")}
    assert all(not p.notes for p in plans)


# ---- the real folders ----------------------------------------------------------------------------
def _kineto_head(path: Path) -> dict:
    """distributedInfo's rank and world size, read with gzip and a regular expression (no tracehouse code)."""
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rb") as f:
        head = f.read(1 << 20).decode("utf-8", "replace")
    head = head[: head.find('"traceEvents"')]
    rank = re.search(r'"distributedInfo"\s*:\s*\{[^}]*?"rank"\s*:\s*(\d+)', head)
    world = re.search(r'"distributedInfo"\s*:\s*\{[^}]*?"world_size"\s*:\s*(\d+)', head)
    return {"rank": rank and int(rank.group(1)), "world_size": world and int(world.group(1))}


def _export_start(path: Path) -> int:
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return con.execute("SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME").fetchone()[0]
    finally:
        con.close()


def test_real_folders_form_the_runs_they_should():
    require_shared()
    # the two ranks of one job: ranks 0 and 1 of one world of 128, by their own heads
    pair = TRACES / "multirank" / "sampled_2ranks"
    heads = [_kineto_head(pair / n) for n in ("rank-0.json.gz", "rank-1.json.gz")]
    assert heads == [{"rank": 0, "world_size": 128}, {"rank": 1, "world_size": 128}]
    assert _groups(plan_runs([pair])) == {frozenset({"rank-0.json.gz", "rank-1.json.gz"})}
    # five Nsight Systems exports, sessions started hours to years apart: five runs
    exports = sorted((TRACES / "nsys").glob("*.sqlite"))
    starts = sorted(_export_start(p) for p in exports)
    assert len(exports) == 5 and min(b - a for a, b in itertools.pairwise(starts)) > 3600 * 10**9
    assert _groups(plan_runs([TRACES / "nsys"])) == {frozenset({p.name}) for p in exports}
    # four unrelated traces, each rank 0 of its own program: four runs
    cp = TRACES / "nvidia" / "critical_path"
    traces = sorted(cp.glob("*.json.gz"))
    assert [_kineto_head(p)["rank"] for p in traces] == [0] * 4
    assert _groups(plan_runs([cp])) == {frozenset({p.name}) for p in traces}
    # a control and a test run of different worlds (8 and 2): two runs
    diff = TRACES / "nvidia" / "trace_diff"
    assert [_kineto_head(diff / n)["world_size"] for n in ("control.json.gz", "test.json.gz")] == [8, 2]
    assert _groups(plan_runs([diff])) == {frozenset({"control.json.gz"}), frozenset({"test.json.gz"})}


def test_an_unreadable_rank_stays_in_its_run(tmp_path):
    """A rank whose head cannot be read says no world size: it joins the files named like it, so the run
    is ingested with what could be read and says what could not (as before the grouping)."""
    world = {"distributedInfo": {"backend": "nccl", "rank": 0, "world_size": 2}}
    write_trace(tmp_path / "run" / "rank-0.json.gz", simple_events(), world)
    (tmp_path / "run" / "rank-1.json.gz").write_bytes(b"\x1f\x8b not a gzip stream")
    [plan] = plan_runs([tmp_path / "run"])
    assert sorted(p.name for p in plan.files) == ["rank-0.json.gz", "rank-1.json.gz"]

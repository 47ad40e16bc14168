"""Derived runs' reports (warehouse/derived.py): ingest derives each run's per-run views, the report reads
them kept, and the report they give is the report the views give when computed live, in every format and
for every phase. The step a report shows is a rule of sql/ (report_steps), kept with the run.
"""

from __future__ import annotations

import json
import shutil

import pytest
from conftest import REPORT_SCENARIOS, require_shared
from tracehouse.ingest.load import ingest_paths
from tracehouse.reports.run import build_run_report, render_run_report, report_json
from tracehouse.synth import write_scenario
from tracehouse.warehouse.catalog import connect, kept_file, per_run_views, store_dir, view_files
from tracehouse.warehouse.derived import derive, is_derived
from tracehouse.warehouse.engine import open as open_connection
from tracehouse.warehouse.store import Warehouse
from warehouses import real

RUN_VIEWS = per_run_views()
STEP_PICKS = [None, "decode", "prefill", "mixed", "unknown"]  # report_steps' picks (None: 'all')

# real traces with CUDA graphs, prefill + decode, several streams and NCCL, AMD, two ranks
REAL = [
    "inference/sglang_prefilldecode/sglang_Qwen3-8B_prefilldecode.json.gz",
    "nvidia/a100_multistream_rank0.json.gz",
    "amd/mi300_qwen1.5-0.5b.json.gz",
    "multirank/sampled_2ranks",
]


def _live(wh: Warehouse, run_id: str, phase: str | None):
    """The report with every view computed from the tables (no kept rows read)."""
    return build_run_report(connect(wh, runs=[run_id], kept=False), run_id, phase)


def _stored(wh: Warehouse, run_id: str, phase: str | None):
    con = open_connection(wh, runs=[run_id])
    stored_views = {
        r[0]
        for r in con.execute(
            "SELECT view_name FROM duckdb_views() WHERE temporary AND NOT internal"
        ).fetchall()
    }
    assert stored_views == set(RUN_VIEWS), "the report connection reads every per-run view kept"
    return build_run_report(con, run_id, phase)


def _same(wh: Warehouse, run_id: str) -> None:
    phases = [
        r[0]
        for r in connect(wh, runs=[run_id])
        .execute("SELECT DISTINCT phase FROM step_breakdown WHERE run_id = ?", [run_id])
        .fetchall()
    ]
    for phase in [None] + [p for p in phases if p in STEP_PICKS]:
        live, stored = _live(wh, run_id, phase), _stored(wh, run_id, phase)
        # as JSON text: a number stored as another type (a DECIMAL for a HUGEINT, a float for an int) differs
        assert json.dumps(report_json(stored), default=str) == json.dumps(report_json(live), default=str), (
            phase
        )
        for fmt in ("md", "html"):
            assert render_run_report(stored, fmt) == render_run_report(live, fmt), (phase, fmt)


@pytest.mark.parametrize("scenario", sorted(REPORT_SCENARIOS))
def test_stored_report_equals_live_report_synth(synth_warehouse, scenario):
    wh, runs = synth_warehouse
    assert is_derived(wh, runs[scenario]), "ingest derives the run"
    _same(wh, runs[scenario])


@pytest.mark.parametrize("rel", REAL)
def test_stored_report_equals_live_report_real(warehouses, rel):
    require_shared()
    wh, runs, _ = warehouses.named({rel: real(rel)}, derived=True)  # the session's derived unit of the trace
    assert is_derived(wh, runs[rel])
    _same(wh, runs[rel])
    _picks_follow_the_rule(wh, runs[rel])


def _rule_in_python(con, run_id: str, phase: str | None) -> tuple | None:
    """The step pick as the report wrote it in Python before it was a view: the median wall step of the
    lowest rank's steps with GPU work (of the phase; decode before prefill before the rest), warm-up out."""
    (rank,) = con.execute("SELECT min(rank) FROM step_spans WHERE run_id = ?", [run_id]).fetchone()
    if rank is None:
        return None
    rows = con.execute(
        f"""SELECT rank, step, phase FROM step_breakdown
        WHERE run_id = ? AND rank = ? AND activities > 0 {"AND phase = ?" if phase else ""}
          AND step NOT IN (SELECT step FROM step_warmup WHERE run_id = ? AND rank = ? AND is_warmup)
        ORDER BY CASE phase WHEN 'decode' THEN 0 WHEN 'prefill' THEN 1 ELSE 2 END, wall_ns, step""",
        [run_id, rank] + ([phase] if phase else []) + [run_id, rank],
    ).fetchall()
    if not rows:
        return None
    same = [r for r in rows if r[2] == rows[0][2]]
    return (*same[len(same) // 2], len(same))


def _picks_follow_the_rule(wh: Warehouse, run_id: str) -> int:
    """report_steps (kept, and computed) picks what the rule above picks, for every --phase; how many
    picks the run has."""
    kept, computed = connect(wh, runs=[run_id]), connect(wh, runs=[run_id], kept=False)
    query = "SELECT rank, step, phase, steps_in_run FROM report_steps WHERE run_id = ? AND pick = ?"
    found = 0
    for phase in STEP_PICKS:
        want = _rule_in_python(computed, run_id, phase)
        for con in (kept, computed):
            rows = con.execute(query, [run_id, phase or "all"]).fetchall()
            assert rows == ([want] if want else []), (phase, rows, want)
        found += want is not None
    return found


@pytest.mark.parametrize("scenario", sorted(REPORT_SCENARIOS))
def test_the_step_pick_is_the_rule(synth_warehouse, scenario):
    """Every --phase's step (and the default's) is a kept row of report_steps, the rule's pick."""
    wh, runs = synth_warehouse
    assert _picks_follow_the_rule(wh, runs[scenario]) >= 1


# the views a derived run's report must not compute: each is over the whole run (dependency_edges of every
# rank, _kernel_facts, the fusion chains); the report reads their rows of its step kept (report_whatif_edges,
# report_whatif_collectives, report_fusion_chains, report_lanes, step_components, ...)
WHOLE_RUN_VIEWS = ["dependency_edges", "_whatif_edges", "_whatif_collectives", "_fusion_chains"]
WHOLE_RUN_VIEWS += ["_kernel_facts"]


@pytest.mark.parametrize("scenario", sorted(REPORT_SCENARIOS))
def test_a_derived_runs_report_reads_its_step_kept(synth_warehouse, scenario):
    """A derived run's report, what-if gains and step timeline included, reads kept rows only: with the
    whole-run views it would compute failing when read, it is the live report (every view computed)."""
    wh, runs = synth_warehouse
    run_id = runs[scenario]
    con = open_connection(wh, runs=[run_id])
    for view in WHOLE_RUN_VIEWS:
        con.execute(f"CREATE OR REPLACE TEMP VIEW {view} AS SELECT error('{view} computed') AS x")
    stored = build_run_report(con, run_id, None)
    assert stored.whatif and stored.step.timeline, "the gains and the lanes are there, from kept rows"
    live = _live(wh, run_id, None)
    assert json.dumps(report_json(stored), default=str) == json.dumps(report_json(live), default=str)


def test_a_report_derives_its_run_first(own_synth_warehouse):
    """`tracehouse report` (reports.write) derives a run not derived yet, then reads it kept: same report."""
    from tracehouse.reports.write import write_run_report

    wh, runs = own_synth_warehouse
    run_id = runs["training"]
    before = render_run_report(build_run_report(connect(wh, runs=[run_id], kept=False), run_id), "md")
    for view in RUN_VIEWS:
        shutil.rmtree(kept_file(store_dir(wh), view, run_id).parent)
    assert not is_derived(wh, run_id)
    assert write_run_report(wh, run_id, "md") == before
    assert is_derived(wh, run_id)


def test_ingest_without_analysis_derives_none(tmp_path):
    wh = Warehouse(tmp_path / "wh")
    [outcome] = ingest_paths(
        wh, [write_scenario("serving-decode", tmp_path / "run", ranks=1, steps=2, layers=1)], analyse=False
    )
    assert outcome.stored and not is_derived(wh, outcome.run_id)
    report = build_run_report(open_connection(wh, runs=[outcome.run_id]), outcome.run_id)
    assert report.step is not None and not is_derived(wh, outcome.run_id), "a reader never derives"


def test_one_fingerprint_follows_the_whole_catalogue(tmp_path, monkeypatch):
    """The store's folder is keyed on the whole catalogue: an edit of any view or rule file moves it (its
    rows are derived anew, never mixed with old ones); nothing else does."""
    from tracehouse.warehouse import catalog

    where = {view: path.relative_to(catalog.SQL_DIR) for view, path in view_files().items()}  # sql/<domain>/
    sql = tmp_path / "sql"
    shutil.copytree(catalog.SQL_DIR, sql)
    monkeypatch.setattr(catalog, "SQL_DIR", sql)
    wh = Warehouse(tmp_path / "wh")
    seen = [store_dir(wh)]
    assert store_dir(wh) == seen[0], "the same files, the same folder"

    def edit(path):
        path.write_text(path.read_text() + "\n-- edited\n")
        seen.append(store_dir(wh))
        assert seen[-1] != seen[-2] and seen[-1].parent == wh.root / "derived", path

    edit(sql / where["regression"])
    edit(sql / where["overlap_opportunity"])
    edit(sql / "rules" / "kernel_categories.csv")


def test_unwritable_store_computes_for_the_report_alone(own_synth_warehouse, monkeypatch, capsys):
    """A warehouse the user may only read: the report is the same, computed on its connection, with a note."""
    from tracehouse.reports import write
    from tracehouse.reports.write import write_run_report

    wh, runs = own_synth_warehouse
    run_id = runs["serving-decode"]
    expected = write_run_report(wh, run_id, "md")
    for view in RUN_VIEWS:
        shutil.rmtree(kept_file(store_dir(wh), view, run_id).parent)

    def refuse(_wh, run_ids, *_args, **_kw):
        return {r: f"[Errno 13] Permission denied: '{store_dir(wh)}'" for r in run_ids}

    monkeypatch.setattr(write, "derive", refuse)
    assert write_run_report(wh, run_id, "md") == expected
    assert "could not be kept" in capsys.readouterr().err
    assert not is_derived(wh, run_id)
    assert derive(wh, [run_id]) == {run_id: None}


def test_cli_ingest_derives_only_when_asked(tmp_path, cli_runner, monkeypatch):
    from tracehouse.cli import main

    monkeypatch.delenv("TRACEHOUSE_DERIVE", raising=False)  # ingest's own default: none (issue 35)
    run = write_scenario("serving-decode", tmp_path / "run", ranks=1, steps=2, layers=1)
    cases = ([], False), (["--no-analyses"], False), (["--no-derive"], False), (["--wait"], True)
    for flag, expected in cases:
        wh = tmp_path / f"wh{''.join(flag)}"
        res = cli_runner.invoke(main, ["--warehouse", str(wh), "ingest", str(run), *flag])
        assert res.exit_code == 0, res.output
        run_id = res.output.split()[0]
        assert is_derived(Warehouse(wh), run_id) is expected

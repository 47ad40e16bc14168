"""Stored analyses (warehouse/stored.py): ingest stores each run's report views, the report reads them, and
the report they give is the report the views give when computed live, in every format and for every phase.
"""

from __future__ import annotations

import json
import shutil

import pytest
from conftest import REPORT_SCENARIOS, TRACES, require_shared

from ingest.load import ingest_paths
from reports.run import build_run_report, render_run_report, report_json
from synth import write_scenario
from warehouse.catalog import connect, view_files
from warehouse.engine import open as open_connection
from warehouse.store import Warehouse
from warehouse.stored import RUN_VIEWS, STEP_PICKS, analyses_dir, is_stored, run_folder, store_analyses

# real traces with CUDA graphs, prefill + decode, several streams and NCCL, AMD, two ranks
REAL = [
    "inference/sglang_prefilldecode/sglang_Qwen3-8B_prefilldecode.json.gz",
    "nvidia/a100_multistream_rank0.json.gz",
    "amd/mi300_qwen1.5-0.5b.json.gz",
    "multirank/sampled_2ranks",
]


def _live(wh: Warehouse, run_id: str, phase: str | None):
    """The report with every view computed from the tables (no stored analyses read)."""
    return build_run_report(connect(wh, runs=[run_id]), run_id, phase)


def _stored(wh: Warehouse, run_id: str, phase: str | None):
    con = open_connection(wh, runs=[run_id], stored=True)
    stored_views = {
        r[0]
        for r in con.execute(
            "SELECT view_name FROM duckdb_views() WHERE temporary AND NOT internal"
        ).fetchall()
    }
    assert stored_views == set(RUN_VIEWS), "the report connection reads every stored whole-run view"
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
    assert is_stored(wh, runs[scenario]), "ingest stores the run's analyses"
    _same(wh, runs[scenario])


@pytest.mark.parametrize("rel", REAL)
def test_stored_report_equals_live_report_real(tmp_path, rel):
    require_shared()
    wh = Warehouse(tmp_path / "wh")
    [outcome] = ingest_paths(wh, [TRACES / rel])
    assert not outcome.problems and is_stored(wh, outcome.run_id)
    _same(wh, outcome.run_id)


def test_every_phase_pick_is_stored(synth_warehouse):
    """Each --phase's step (and the default's) is stored, so no report computes a critical path."""
    wh, runs = synth_warehouse
    run_id = runs["serving-decode"]
    manifest = json.loads((run_folder(wh, run_id) / "manifest.json").read_text())
    con = open_connection(wh, runs=[run_id], stored=True)
    report = build_run_report(con, run_id)
    assert [report.step.rank, report.step.step] in manifest["steps"]
    assert con.execute("SELECT count(*) FROM tracehouse_stored_steps").fetchone()[0] == len(manifest["steps"])


def test_missing_analyses_are_computed_by_the_report_and_stored(own_synth_warehouse):
    wh, runs = own_synth_warehouse
    run_id = runs["training"]
    before = render_run_report(
        build_run_report(open_connection(wh, runs=[run_id], stored=True), run_id), "md"
    )
    shutil.rmtree(run_folder(wh, run_id))
    assert not is_stored(wh, run_id)
    after = render_run_report(build_run_report(open_connection(wh, runs=[run_id], stored=True), run_id), "md")
    assert after == before and is_stored(wh, run_id)


def test_half_written_folder_is_never_read(own_synth_warehouse):
    """A folder without its manifest (a killed store) is not stored; the store writes aside and renames."""
    wh, runs = own_synth_warehouse
    run_id = runs["serving-prefill"]
    folder = run_folder(wh, run_id)
    shutil.rmtree(folder)
    folder.mkdir(parents=True)
    (folder / "_kernel_facts.parquet").write_bytes(b"not parquet")
    assert not is_stored(wh, run_id)
    shutil.rmtree(folder)
    store_analyses(wh, run_id)
    assert is_stored(wh, run_id)
    assert not [p for p in analyses_dir(wh).iterdir() if p.name.startswith(".")], "no partial folder left"


def test_ingest_without_analysis_stores_none(tmp_path):
    wh = Warehouse(tmp_path / "wh")
    [outcome] = ingest_paths(
        wh, [write_scenario("serving-decode", tmp_path / "run", ranks=1, steps=2, layers=1)], analyse=False
    )
    assert outcome.stored and not is_stored(wh, outcome.run_id)
    report = build_run_report(open_connection(wh, runs=[outcome.run_id], stored=True), outcome.run_id)
    assert report.step is not None and is_stored(wh, outcome.run_id)


def test_fingerprints_follow_only_what_the_stored_rows_depend_on(tmp_path, monkeypatch, request):
    """Editing a view changes the key of the stored rows that read it, directly or through other views,
    and of nothing else: trend's views do not recompute analyses or run metrics; a report view does not
    recompute run metrics; _kernel_facts (read by both) recomputes both."""
    from warehouse import catalog
    from warehouse.metrics import metrics_dir

    sql = tmp_path / "sql"
    shutil.copytree(catalog.SQL_DIR, sql)
    monkeypatch.setattr(catalog, "SQL_DIR", sql)
    request.addfinalizer(catalog.forget_sql)  # the next test in this process reads the real sql/ again
    catalog.forget_sql()
    wh = Warehouse(tmp_path / "wh")

    def keys():
        catalog.forget_sql()  # the SQL files are read once per process: they were edited
        kept = sorted(str(p) for p in catalog.kept_dirs(wh).values())
        return (analyses_dir(wh).name, kept), metrics_dir(wh).name

    def edit(view):
        path = sql / view_files()[view].relative_to(catalog.SQL_DIR)
        path.write_text(path.read_text() + "\n-- edited\n")

    start = keys()
    edit("regression")
    assert keys() == start
    edit("overlap_opportunity")
    after_report_view = keys()
    assert after_report_view[0] != start[0] and after_report_view[1] == start[1]
    edit("_kernel_facts")
    after_shared = keys()
    assert after_shared[0] != after_report_view[0] and after_shared[1] != after_report_view[1]
    (sql / "rules" / "kernel_categories.csv").write_text(
        (sql / "rules" / "kernel_categories.csv").read_text() + "\n"
    )
    assert all(a != b for a, b in zip(keys(), after_shared))


def test_unwritable_store_computes_for_the_report_alone(own_synth_warehouse, monkeypatch, capsys):
    """A warehouse the user may only read: the report is the same, computed on its connection."""
    from warehouse import stored

    wh, runs = own_synth_warehouse
    run_id = runs["serving-decode"]
    expected = render_run_report(
        build_run_report(open_connection(wh, runs=[run_id], stored=True), run_id), "md"
    )
    shutil.rmtree(run_folder(wh, run_id))

    def refuse(*_args, **_kw):
        raise PermissionError(13, "Permission denied", str(analyses_dir(wh)))

    monkeypatch.setattr(stored, "store_analyses", refuse)
    assert (
        render_run_report(build_run_report(open_connection(wh, runs=[run_id], stored=True), run_id), "md")
        == expected
    )
    assert "could not be stored" in capsys.readouterr().err
    assert not is_stored(wh, run_id)


def test_cli_ingest_stores_analyses_unless_asked_not_to(tmp_path, cli_runner):
    from tracehouse.cli import main

    run = write_scenario("serving-decode", tmp_path / "run", ranks=1, steps=2, layers=1)
    for flag, expected in (["--no-analyses"], False), (["--no-derive"], False), (["--wait"], True):
        wh = tmp_path / f"wh{flag[0]}"
        res = cli_runner.invoke(main, ["--warehouse", str(wh), "ingest", str(run), *flag])
        assert res.exit_code == 0, res.output
        run_id = res.output.split()[0]
        assert is_stored(Warehouse(wh), run_id) is expected


def test_abandoned_partial_folders_are_removed(own_synth_warehouse):
    """A store killed mid-way leaves .<run>.<pid>.tmp; the next store removes it once that process is gone,
    and leaves a running store's folder alone."""
    import os
    import subprocess
    import sys

    wh, runs = own_synth_warehouse
    run_id = runs["training"]
    gone = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True, check=True
    ).stdout.strip()
    dead = analyses_dir(wh) / f".{run_id}.{gone}.tmp"
    running = analyses_dir(wh) / f".another-run.{os.getpid()}.tmp"  # this process is alive
    for folder in (dead, running):
        (folder / "work").mkdir(parents=True)
    shutil.rmtree(run_folder(wh, run_id))
    store_analyses(wh, run_id)
    assert not dead.exists() and is_stored(wh, run_id)
    assert running.exists()
    shutil.rmtree(running)

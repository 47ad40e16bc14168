"""Kept rows (the one derived store): the views whose header says `-- materialized: per_run` are derived once
per run (warehouse.derived.derive, `tracehouse derive`, run by ingest in its own process once a run is published) into
derived/<fingerprint>/<view>/run_id=<id>/, and read back by every connection (warehouse.catalog.read_kept,
from the store's listing when it opens), with the very rows the view computes: every row, every column,
every type.

The expected rows of each comparison are the catalogue's own view (`catalog.main.<view>`), computed from
the tables on the same connection; the kept read is `<view>` (the temp view read_kept makes). Each test
also checks which of the two the connection really read (the temp view's SQL), so that a comparison of a
view with itself cannot pass for one of kept rows with computed ones.
"""

from __future__ import annotations

import os
import shutil
import threading

import pytest
from conftest import TRACES, require_shared
from tracehouse.ingest.load import ingest_paths
from tracehouse.synth import write_scenario
from tracehouse.warehouse.catalog import connect, focus, kept_file, per_run_views, store_dir
from tracehouse.warehouse.derived import HELPERS, _compute_order, derive, is_derived, missing_views
from tracehouse.warehouse.session import Session
from tracehouse.warehouse.store import Warehouse

RUN_VIEWS = per_run_views()
COMPUTE_ORDER = _compute_order(RUN_VIEWS)


def derive_run(wh: Warehouse, run_id: str, **kwargs) -> None:
    assert derive(wh, [run_id], **kwargs) == {run_id: None}


def run_folder(wh: Warehouse, view: str, run_id: str):
    return kept_file(store_dir(wh), view, run_id).parent


REAL = ["nvidia/a100_nccl_rank0.json.gz", "amd/mi300_qwen1.5-0.5b.json.gz"]


def _temp_views(con) -> dict[str, str]:
    """{view: its SQL} of the connection's temp views (read_kept's)."""
    return dict(
        con.execute("SELECT view_name, sql FROM duckdb_views() WHERE temporary AND NOT internal").fetchall()
    )


def _rows(con, sql: str) -> list[str]:
    # repr keeps the Python type of each value (Decimal, int, float, None), so a HUGEINT read back as a
    # DECIMAL differs; sorted: a view's rows have no order
    return sorted(repr(row) for row in con.execute(sql).fetchall())


def _same_rows(con, view: str) -> int:
    kept_types = con.execute(f"DESCRIBE {view}").fetchall()
    computed_types = con.execute(f"DESCRIBE catalog.main.{view}").fetchall()
    assert kept_types == computed_types, view
    kept = _rows(con, f"SELECT * FROM {view}")
    assert kept == _rows(con, f"SELECT * FROM catalog.main.{view}"), view
    return len(kept)


def _all_kept(wh: Warehouse, runs: list[str] | None) -> None:
    """Every RUN_VIEWS row of these runs read kept (no computed part), identical to the computed rows."""
    con = connect(wh, runs=runs)
    views = _temp_views(con)
    counts = {}
    for view in RUN_VIEWS:
        assert view in views and "UNION" not in views[view], f"{view} read kept only"
        counts[view] = _same_rows(con, view)
    # the views a first question asks have rows on every run compared (a kept file of no rows is no test)
    assert counts["gpu_timeline"] > 0 and counts["kernel_summary"] > 0 and counts["step_breakdown"] > 0


def test_the_header_declares_the_kept_views():
    """The kept views are those whose header line says so (the report's step pick, the diff's facts and
    run_metrics among them), and derive computes each, and each helper, after what it reads."""
    assert {"gpu_timeline", "kernel_summary", "step_breakdown", "fusion_match"} <= set(RUN_VIEWS)
    assert {"report_steps", "run_metrics", "critical_path_summary", "step_kernel_time"} <= set(RUN_VIEWS)
    from tracehouse.warehouse.diff_facts import FACT_VIEWS

    assert set(FACT_VIEWS) <= set(RUN_VIEWS), "a diff of two derived runs reads kept rows only"
    assert set(COMPUTE_ORDER) == set(RUN_VIEWS) | set(HELPERS)
    from tracehouse.warehouse.catalog import view_dependencies, view_files

    files = view_files()
    direct = {name: view_dependencies(path.read_text()) & set(files) for name, path in files.items()}

    def reads(view, seen=None):  # every view it reads, through other views too
        seen = set() if seen is None else seen
        for dep in direct[view] - seen:
            seen.add(dep)
            reads(dep, seen)
        return seen

    for i, view in enumerate(COMPUTE_ORDER):
        assert reads(view) & set(COMPUTE_ORDER) <= set(COMPUTE_ORDER[:i]), view
    # a kept view may read what is replaced after ingest (step_requests, the runs row's labels): replacing
    # it forgets every row derived from the run (test_new_requests_forget_the_kept_request_cost below)


def test_kept_rows_equal_computed_rows_synth(synth_warehouse):
    wh, runs = synth_warehouse
    assert all(is_derived(wh, r) for r in runs.values()), "the fixture's ingest (--wait) derived every run"
    _all_kept(wh, None)
    for run_id in runs.values():
        _all_kept(wh, [run_id])


@pytest.mark.parametrize("rel", REAL)
def test_kept_rows_equal_computed_rows_real(tmp_path, rel):
    require_shared()
    wh = Warehouse(tmp_path / "wh")
    [outcome] = ingest_paths(wh, [TRACES / rel], derive="wait")
    assert not outcome.problems and is_derived(wh, outcome.run_id)
    _all_kept(wh, None)


def test_runs_not_kept_are_computed(own_synth_warehouse):
    """One run's kernel_summary not kept: the view reads the others kept and computes that one; focused on
    a kept run it computes nothing; a file being written (not renamed yet) is not read."""
    wh, runs = own_synth_warehouse
    gone, kept = runs["training"], runs["serving-decode"]
    folder = run_folder(wh, "kernel_summary", gone)
    shutil.rmtree(folder)
    partial = folder.with_name(f".{folder.name}.{os.getpid()}.tmp")  # being written: not read
    partial.mkdir()
    (partial / "rows.parquet").write_bytes(b"half a parquet file")
    assert missing_views(wh, gone) == ["kernel_summary"]
    con = connect(wh)
    sql = _temp_views(con)["kernel_summary"]
    assert "UNION" in sql and gone not in sql.split("UNION")[0], "the run not kept is computed"
    assert _same_rows(con, "kernel_summary") > 0
    assert con.execute("SELECT count(*) FROM kernel_summary WHERE run_id = ?", [gone]).fetchone()[0] > 0
    focus(con, [kept])  # a report's focus: every run it sees is kept
    assert "UNION" not in _temp_views(con)["kernel_summary"]
    assert _same_rows(con, "kernel_summary") > 0
    focus(con, [gone])  # no run it sees is kept: the catalogue's view computes it, with no kept part
    assert "kernel_summary" not in _temp_views(con)
    assert con.execute("SELECT count(*) FROM kernel_summary").fetchone()[0] > 0


def test_an_ad_hoc_reader_decides_at_open_from_the_listing(own_synth_warehouse):
    """A reader (`sql`, a Session) makes its kept views when it opens, from the store's listing alone (no
    scan of its queries): every view with kept rows, computing the run that is not kept; its answers are
    the computed view's. Opening writes nothing."""
    from tracehouse.warehouse.query import run_query

    wh, runs = own_synth_warehouse
    gone = runs["training"]
    for view in RUN_VIEWS:
        shutil.rmtree(run_folder(wh, view, gone))
    before = sorted(p.name for p in store_dir(wh).rglob("*"))
    con = connect(wh)
    made = _temp_views(con)
    assert set(made) == set(RUN_VIEWS)
    assert all("UNION" in sql for sql in made.values()), "the run not kept is computed"
    _, asked = run_query(con, "SELECT * FROM Step_Breakdown ORDER BY ALL")
    assert sorted(map(repr, asked)) == _rows(con, "SELECT * FROM catalog.main.step_breakdown")
    focus(con, [runs["serving-decode"]])  # a change of focus: every run it sees is kept
    assert _temp_views(con).keys() == made.keys()
    assert all("UNION" not in sql for sql in _temp_views(con).values())
    assert sorted(p.name for p in store_dir(wh).rglob("*")) == before, "a reader wrote"


def test_two_processes_deriving_one_run(own_synth_warehouse):
    """Two derives of one run at once (two threads, each its own connection, as two processes would be):
    both return, the rows are kept once, nothing partial is left, the rows are the computed ones."""
    wh, runs = own_synth_warehouse
    run_id = runs["serving-prefill"]
    for view in RUN_VIEWS:
        shutil.rmtree(run_folder(wh, view, run_id))
    assert not is_derived(wh, run_id)
    errors = []

    def derive():
        try:
            derive_run(wh, run_id)
        except BaseException as exc:  # noqa: BLE001 - reported by the assert below
            errors.append(exc)

    threads = [threading.Thread(target=derive) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and is_derived(wh, run_id)
    for view in RUN_VIEWS:
        assert [p.name for p in run_folder(wh, view, run_id).iterdir()] == ["rows.parquet"]
        assert not [p for p in (store_dir(wh) / view).iterdir() if p.name.startswith(".")], "a partial left"
    _all_kept(wh, [run_id])


def test_a_killed_derive_leaves_nothing_read_and_is_cleaned(own_synth_warehouse):
    """A derive killed while writing leaves .run_id=<id>.<pid>.tmp (never read: not a run_id= folder); the
    next derive removes it once its process is gone, and keeps the rows; it also removes the folders of
    other fingerprints (rows of code no longer in use)."""
    import subprocess
    import sys

    wh, runs = own_synth_warehouse
    run_id = runs["training"]
    gone = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True, check=True
    ).stdout.strip()
    folder = run_folder(wh, "gpu_timeline", run_id)
    shutil.rmtree(folder)
    dead = folder.with_name(f".{folder.name}.{gone}.tmp")
    dead.mkdir()
    (dead / "rows.parquet").write_bytes(b"PAR1 half written")
    old = wh.root / "derived" / "0123456789abcdef" / "gpu_timeline" / f"run_id={run_id}"
    old.mkdir(parents=True)
    assert missing_views(wh, run_id) == ["gpu_timeline"]
    assert _same_rows(connect(wh), "gpu_timeline") > 0  # computed for that run, kept for the others
    derive_run(wh, run_id)
    assert not dead.exists() and not missing_views(wh, run_id)
    assert not old.parent.parent.exists(), "another fingerprint's folder is removed by the derive"
    _all_kept(wh, [run_id])


def test_session_reads_rows_kept_after_it_opened(own_synth_warehouse):
    """A long-lived reader (Session) opened before a run is derived reads its kept rows once they are."""
    wh, runs = own_synth_warehouse
    run_id = runs["training"]
    for view in RUN_VIEWS:
        shutil.rmtree(run_folder(wh, view, run_id))
    with Session(wh) as th:
        before = th.sql("SELECT * FROM gpu_timeline ORDER BY ALL")
        assert "UNION" in _temp_views(th.con)["gpu_timeline"]
        derive_run(wh, run_id)
        assert th.sql("SELECT * FROM gpu_timeline ORDER BY ALL") == before
        assert "UNION" not in _temp_views(th.con)["gpu_timeline"]


def test_ingest_does_not_derive_by_default_and_says_how(tmp_path, cli_runner, monkeypatch):
    """Issue 35: ingest never waits for derived rows. As a user runs it (no TRACEHOUSE_DERIVE), `tracehouse
    ingest` publishes the run and returns with no kept rows at all, and its closing line says what keeps
    them; the first `report` derives the run before reading; `--wait` derives in ingest's own process
    (nothing outlives the command), after which a derive has nothing to do."""
    from tracehouse.cli import main

    monkeypatch.delenv("TRACEHOUSE_DERIVE", raising=False)
    monkeypatch.setattr(
        "tracehouse.commands.ingest.progress_enabled", lambda: True
    )  # the hint is a terminal's
    run = write_scenario("serving-decode", tmp_path / "run", ranks=1, steps=2, layers=1)
    wh = tmp_path / "wh"
    res = cli_runner.invoke(main, ["--warehouse", str(wh), "ingest", str(run)])
    assert res.exit_code == 0, res.output
    run_id = res.stdout.split()[0]
    assert res.stdout == f"{run_id}\tstored\t1 file(s)\n", res.stdout  # stdout: the run ids only
    assert not is_derived(Warehouse(wh), run_id)
    assert missing_views(Warehouse(wh), run_id) == per_run_views()  # not one view kept
    assert not list((wh / "derived").glob("*/*/run_id=*")), "a fresh ingest keeps no derived rows"
    assert f"`tracehouse derive {run_id}`" in res.stderr and "tracehouse report" in res.stderr, res.stderr
    res = cli_runner.invoke(main, ["--warehouse", str(wh), "report", run_id])
    assert res.exit_code == 0, res.output
    assert is_derived(Warehouse(wh), run_id), "the first report derives its run before reading"
    # a diff and a trend derive their runs before reading too (kept rows for every later reader)
    ids = []
    for steps, series in ((3, "a"), (4, "b")):
        other = write_scenario("serving-decode", tmp_path / series, ranks=1, steps=steps, layers=1)
        res = cli_runner.invoke(
            main, ["--warehouse", str(wh), "ingest", str(other), "--label", f"series={series}"]
        )
        assert res.exit_code == 0, res.output
        ids.append(res.stdout.split()[0])
    assert not any(is_derived(Warehouse(wh), i) for i in ids)
    res = cli_runner.invoke(main, ["--warehouse", str(wh), "trend", "--where", "series=a"])
    assert res.exit_code == 0, res.output
    assert is_derived(Warehouse(wh), ids[0]) and not is_derived(Warehouse(wh), ids[1]), (
        "the trend's runs only"
    )
    res = cli_runner.invoke(main, ["--warehouse", str(wh), "diff", ids[0], ids[1]])
    assert res.exit_code == 0, res.output
    assert is_derived(Warehouse(wh), ids[1]), "a diff derives both its runs before reading"

    wh = tmp_path / "wh-wait"
    res = cli_runner.invoke(main, ["--warehouse", str(wh), "ingest", str(run), "--wait"])
    assert res.exit_code == 0, res.output
    run_id = res.stdout.split()[0]
    assert "not derived" not in res.stderr
    assert is_derived(Warehouse(wh), run_id)  # in ingest's own process, before it returned
    _all_kept(Warehouse(wh), [run_id])
    res = cli_runner.invoke(main, ["--warehouse", str(wh), "derive", run_id])
    assert res.exit_code == 0 and res.output == f"{run_id}\tderived\n", res.output


def test_a_label_change_forgets_what_was_derived_from_the_old_row(own_synth_warehouse):
    """`hardware` picks the device peaks that kernel_roofline and step_roofline hold a run to (kept rows):
    a new label removes every row derived from the run, so no reader sees the old peaks; derived again,
    the kept rows equal the computed ones under the new label."""
    from tracehouse.warehouse.labels import set_labels

    wh, runs = own_synth_warehouse
    run_id = runs["serving-decode"]
    assert not missing_views(wh, run_id) and {"kernel_roofline", "step_roofline"} <= set(RUN_VIEWS)
    query = "SELECT DISTINCT device FROM kernel_roofline WHERE run_id = ?"
    con = connect(wh)
    before = con.execute(query, [run_id]).fetchall()
    con.close()
    assert before and before != [("NVIDIA B200",)]
    set_labels(wh, run_id, {"hardware": "NVIDIA B200"})
    assert sorted(missing_views(wh, run_id)) == sorted(RUN_VIEWS) and not is_derived(wh, run_id)
    con = connect(wh)
    assert con.execute(query, [run_id]).fetchall() == [("NVIDIA B200",)]  # computed: the new peaks
    con.close()
    derive_run(wh, run_id)
    _all_kept(wh, [run_id])
    con = connect(wh)
    assert con.execute(query, [run_id]).fetchall() == [("NVIDIA B200",)]  # kept: the new peaks
    con.close()


def test_new_requests_forget_the_kept_request_cost(own_synth_warehouse, tmp_path):
    """request_cost and steps are kept and read step_requests: a requests file attached after the derive
    removes every row derived from the run, so readers see the new requests; derived again, kept rows
    equal computed rows."""
    from tracehouse.ingest.requests import attach_requests, read_requests

    wh, runs = own_synth_warehouse
    run_id = runs["serving-decode"]
    assert not missing_views(wh, run_id) and {"request_cost", "steps"} <= set(RUN_VIEWS)
    con = connect(wh)
    [(step, gpu_ns)] = con.execute(
        "SELECT step, sum(dur_ns) FROM kernels WHERE run_id = ? AND rank = 0 AND step IS NOT NULL "
        "GROUP BY step ORDER BY step LIMIT 1",
        [run_id],
    ).fetchall()
    before = con.execute("SELECT count(*) FROM request_cost WHERE run_id = ?", [run_id]).fetchone()[0]
    con.close()
    path = tmp_path / "requests.csv"
    path.write_text("rank,step,request_id,tokens\n" + "".join(f"0,{step},new-{i},1\n" for i in range(3)))
    assert attach_requests(wh, run_id, read_requests(path)) == {"rows": 3, "unmatched": 0}
    assert sorted(missing_views(wh, run_id)) == sorted(RUN_VIEWS)
    query = (
        "SELECT request_id, gpu_ns FROM request_cost WHERE run_id = ? AND request_id LIKE 'new-%' ORDER BY 1"
    )
    con = connect(wh)
    computed = con.execute(query, [run_id]).fetchall()
    con.close()
    assert [r for r, _ in computed] == ["new-0", "new-1", "new-2"], before
    assert sum(ns for _, ns in computed) == gpu_ns  # rank 0's step split over its three requests
    derive_run(wh, run_id)
    _all_kept(wh, [run_id])
    con = connect(wh)
    assert con.execute(query, [run_id]).fetchall() == computed  # kept: the new requests
    con.close()


def test_derive_says_each_view_as_it_is_done(own_synth_warehouse):
    """derive's progress gets a line per view it computes, in COMPUTE_ORDER (`tracehouse derive` shows
    them on a terminal: a 1 GB run's derive takes minutes)."""
    from tracehouse.warehouse.derived import forget_derived

    wh, runs = own_synth_warehouse
    run_id = runs["training"]
    forget_derived(wh, run_id)
    lines: list[str] = []
    derive_run(wh, run_id, progress=lines.append)
    assert [line.split(" ")[0] for line in lines] == COMPUTE_ORDER
    assert all(line.endswith(" s") for line in lines)
    _all_kept(wh, [run_id])


def test_small_runs_are_derived_together_with_each_runs_own_rows(own_synth_warehouse):
    """Runs with nothing kept, small enough (derived.BATCH_BYTES), are derived by one connection, each view
    computed once for all of them and its rows written per run; every run's kept rows are the rows the view
    computes for it (alone and beside the others)."""
    from tracehouse.warehouse.derived import batches, forget_derived

    wh, runs = own_synth_warehouse
    for run_id in runs.values():
        forget_derived(wh, run_id)
    assert batches(wh, store_dir(wh), list(runs.values())) == [list(runs.values())]
    lines: list[str] = []
    assert derive(wh, progress=lines.append) == {r: None for r in sorted(runs.values())}
    assert [line.split(" ")[0] for line in lines] == COMPUTE_ORDER  # each view once, for the three runs
    assert all(f", {len(runs)} runs)" in line for line in lines)
    _all_kept(wh, None)
    for run_id in runs.values():
        _all_kept(wh, [run_id])


def test_a_run_the_batch_cannot_derive_leaves_the_others_derived(own_synth_warehouse, monkeypatch):
    """A batch that fails derives its runs one by one: the run that fails alone says why (one line), the
    others are derived. (The failure is made by hand: a damaged table file fails every focused reader of the
    warehouse, as DuckDB reads each file's footer.)"""
    import duckdb
    from tracehouse.warehouse import derived

    wh, runs = own_synth_warehouse
    for run_id in runs.values():
        derived.forget_derived(wh, run_id)
    damaged = runs["training"]
    compute = derived._compute

    def failing(warehouse, store, work, order, missing, run_ids, memory_limit, progress):
        if damaged in run_ids:
            raise duckdb.IOException(f"cannot read run {damaged}\nsecond line")
        return compute(warehouse, store, work, order, missing, run_ids, memory_limit, progress)

    monkeypatch.setattr(derived, "_compute", failing)
    out = derive(wh)
    assert out.pop(damaged) == f"cannot read run {damaged}"  # its first line
    assert out == {r: None for r in runs.values() if r != damaged}
    assert not is_derived(wh, damaged)
    _all_kept(wh, [r for r in runs.values() if r != damaged])

"""The memory policy (warehouse.memory): its default (half of the machine within [640 MB, 16 GB], shared
by the rank workers), TRACEHOUSE_MEMORY_LIMIT, the threads it allows, every connection of ingest, derive,
export and the readers taking the same settings, a small trace ingested and derived under a tiny limit
(spilling), and an out-of-memory said in one line that names the setting."""

from __future__ import annotations

import os
import re
import shutil

import duckdb
import pytest
from tracehouse.warehouse import memory
from tracehouse.warehouse.memory import default_limit, memory_limit, threads

GB = 10**9


def test_default_is_half_of_the_machine_within_bounds():
    assert default_limit(4 * GB) == "2000MB"  # half
    assert default_limit(64 * GB) == "16000MB"  # the cap
    assert default_limit(GB) == "640MB"  # the floor
    assert default_limit(0) == "640MB"  # the machine's memory unreadable
    assert memory_limit(env={}, total=4 * GB) == "2000MB"


def test_rank_workers_share_the_default():
    assert memory_limit(env={"TRACEHOUSE_RANK_WORKERS": "4"}, total=16 * GB) == "2000MB"
    assert memory_limit(env={"TRACEHOUSE_RANK_WORKERS": "100"}, total=16 * GB) == "320MB"  # each at least
    assert memory_limit(env={"TRACEHOUSE_RANK_WORKERS": "x"}, total=16 * GB) == "8000MB"


def test_the_setting_fixes_it():
    assert memory_limit(env={"TRACEHOUSE_MEMORY_LIMIT": "640MB"}, total=64 * GB) == "640MB"
    assert memory_limit(env={"TRACEHOUSE_MEMORY_LIMIT": " 3GB ", "TRACEHOUSE_RANK_WORKERS": "4"}) == "3GB"


def test_machine_memory_is_read():
    total = memory.machine_memory()
    assert 0 < total <= os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def test_threads_one_per_512_mb_of_the_limit():
    assert threads("640MB", env={}, cores=16) == 1  # the low-memory setting: one thread
    assert threads("2GB", env={}, cores=16) == 3
    assert threads("2GB", env={}, cores=2) == 2  # never more than the cores
    assert threads("100MB", env={}, cores=2) == 1
    assert threads("2GB", env={"TRACEHOUSE_THREADS": "1"}, cores=2) == 1


def test_sizes_parse():
    assert memory.parse_size("640MB") == 640 * 10**6
    assert memory.parse_size("1.5 GiB") == int(1.5 * (1 << 30))
    assert memory.parse_size("lots") is None


def _settings(con) -> dict:
    names = ("memory_limit", "threads", "temp_directory", "preserve_insertion_order")
    return {n: con.execute(f"SELECT current_setting('{n}')").fetchone()[0] for n in names}


def test_every_connection_takes_the_policy(synth_warehouse, tmp_path, monkeypatch):
    """ingest's work connection, the derive's, the export's, a reader's and a scratch one: one limit and
    one thread count, each spilling where it says."""
    from tracehouse.ingest.rank import work_connection
    from tracehouse.reports.export.params import export_settings
    from tracehouse.warehouse import catalog, derived, engine, local_db

    monkeypatch.setenv("TRACEHOUSE_MEMORY_LIMIT", "700MB")
    monkeypatch.delenv("TRACEHOUSE_THREADS", raising=False)
    wh, runs = synth_warehouse
    seen = {"ingest": _settings(work_connection(tmp_path / "work"))}
    seen["reader"] = _settings(engine.open(wh))
    seen["scratch"] = _settings(local_db.connect())
    export = catalog.connect(wh, lockdown=False, settings=export_settings(wh))
    seen["export"] = _settings(export)

    captured = {}

    def capture(*args, **kwargs):
        con = catalog.connect(*args, **kwargs)
        captured["derive"] = _settings(con)
        raise duckdb.InterruptException("stop here")  # the settings are all this test wants

    monkeypatch.setattr(derived, "connect", capture)
    copy = tmp_path / "wh"
    shutil.copytree(wh.root, copy)
    for path in (copy / "derived").glob("*/*/run_id=*"):
        shutil.rmtree(path)
    derived.derive(copy, [next(iter(runs.values()))])
    seen["derive"] = captured["derive"]
    limits = {name: s["memory_limit"].replace(" ", "") for name, s in seen.items()}
    assert set(limits.values()) <= {"667.5MiB", "700.0MB"}, limits
    assert {s["threads"] for s in seen.values()} == {1}  # 700 MB: one thread
    assert seen["ingest"]["temp_directory"].endswith("spill")
    assert str(wh.staging_dir) in seen["export"]["temp_directory"]
    assert ".work-" in seen["derive"]["temp_directory"]
    assert seen["derive"]["preserve_insertion_order"] is False  # no order relied on
    assert seen["ingest"]["preserve_insertion_order"] is True  # an event's id is its position


def test_pool_workers_know_how_many_share_the_machine(monkeypatch):
    from tracehouse.ingest import run

    monkeypatch.setattr(os, "environ", dict(os.environ))
    run._set_threads(1, 2)
    assert os.environ["TRACEHOUSE_RANK_WORKERS"] == "2" and os.environ["TRACEHOUSE_THREADS"] == "1"


def test_out_of_memory_is_one_line_naming_the_setting():
    line = memory.out_of_memory_line("trace.json", env={"TRACEHOUSE_MEMORY_LIMIT": "640MB"})
    assert "\n" not in line
    assert (
        line
        == "trace.json: out of memory at the memory limit 640MB; raise it, e.g. TRACEHOUSE_MEMORY_LIMIT=1280MB"
    )
    assert memory.is_out_of_memory(MemoryError())
    assert not memory.is_out_of_memory(ValueError("x"))


def test_a_trace_ingests_and_derives_under_a_tiny_limit_spilling(tmp_path, monkeypatch):
    """200 MB for DuckDB (one thread; the derive's launch-site join needs more than 100 MB on this run): the
    run ingests and derives (spilling where it must) with the rows of a run ingested at the default; the spill folders are
    gone after."""
    from tracehouse.ingest.load import ingest_paths
    from tracehouse.synth import write_scenario
    from tracehouse.warehouse import catalog, derived
    from tracehouse.warehouse.store import Warehouse

    trace = tmp_path / "run"
    write_scenario("serving-decode", trace, ranks=1, target_size=30_000_000, seed=3)
    outcomes = {}
    for name, limit in (("tiny", "200MB"), ("default", None)):
        if limit:
            monkeypatch.setenv("TRACEHOUSE_MEMORY_LIMIT", limit)
        else:
            monkeypatch.delenv("TRACEHOUSE_MEMORY_LIMIT", raising=False)
        wh = Warehouse(tmp_path / name)
        (outcome,) = ingest_paths(wh, [trace], derive="none")
        assert outcome.stored and not outcome.problems, outcome
        assert derived.derive(wh, [outcome.run_id]) == {outcome.run_id: None}
        con = catalog.connect(wh)
        outcomes[name] = [
            con.execute(f"SELECT count(*), sum(dur_ns) FROM {t}").fetchone() for t in ("kernels", "cpu_ops")
        ] + [con.execute("SELECT * FROM step_breakdown ORDER BY ALL").fetchall()]
        assert not list(wh.root.rglob("spill")) and not list(wh.root.rglob(".work-*"))
    assert outcomes["tiny"] == outcomes["default"]
    # The launch sites walk each distinct capture stack once, not once per replayed activity: at 100 MB the
    # view fits (80 MB did on this run); walked per activity (its 270k frame rows) it needed more than 120 MB.
    con = catalog.connect(
        Warehouse(tmp_path / "tiny"),
        lockdown=False,
        settings={"memory_limit": "100MB", "threads": "1", "temp_directory": str(tmp_path / "spill")},
    )
    replayed = con.execute("SELECT count(*) FROM kernel_sites WHERE array_length(stack) > 0").fetchone()[0]
    stacks = con.execute("SELECT count(DISTINCT stack) FROM kernel_sites").fetchone()[0]
    assert replayed > 100 * stacks  # the situation: many replays of few stacks
    con.execute(f"COPY (SELECT * FROM kernel_launch_site) TO '{tmp_path / 'sites.parquet'}' (FORMAT parquet)")


def test_ingest_out_of_memory_is_one_line_and_stores_nothing(tmp_path, monkeypatch):
    from tracehouse.ingest.load import ingest_paths
    from tracehouse.synth import write_scenario
    from tracehouse.warehouse.catalog import published_runs
    from tracehouse.warehouse.store import Warehouse

    trace = tmp_path / "run"
    write_scenario("serving-decode", trace, ranks=1, target_size=10_000_000, seed=3)
    monkeypatch.setenv("TRACEHOUSE_MEMORY_LIMIT", "1MB")  # nothing fits, and nothing may spill that far
    wh = Warehouse(tmp_path / "wh")
    (outcome,) = ingest_paths(wh, [trace], derive="none")
    assert not outcome.stored
    (problem,) = outcome.problems
    assert "\n" not in problem.message and "TRACEHOUSE_MEMORY_LIMIT=2MB" in problem.message, problem.message
    assert published_runs(wh) == []


def test_a_reader_out_of_memory_is_one_line_naming_the_setting(tmp_path):
    """A report computing an underived run's views, and an ad-hoc query, that run out of DuckDB's memory: one
    line naming the setting to raise (twice the limit), exit 1, no traceback."""
    from click.testing import CliRunner
    from tracehouse.ingest.load import ingest_paths
    from tracehouse.synth import write_scenario
    from tracehouse.warehouse.store import Warehouse

    from tracehouse.cli import main

    trace = tmp_path / "run"
    write_scenario("serving-decode", trace, ranks=1, seed=3)
    (outcome,) = ingest_paths(Warehouse(tmp_path / "wh"), [trace], derive="none")
    assert outcome.stored
    runs = {
        "report": (["report", "latest", "-o", str(tmp_path / "r.html")], "8MB", "=16MB"),
        "sql": (["sql", "SELECT length(list(i)) FROM range(20000000) t(i)"], "20MB", "=40MB"),
    }
    for command, (args, limit, raised) in runs.items():
        env = {"TRACEHOUSE_MEMORY_LIMIT": limit, "TRACEHOUSE_DERIVE": "none"}
        result = CliRunner().invoke(main, ["--warehouse", str(tmp_path / "wh"), *args], env=env)
        assert result.exit_code == 1, (command, result.output, result.exception)
        errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
        assert len(errors) == 1 and "Traceback" not in result.output, (command, result.output)
        assert (
            f"out of memory at the memory limit {limit}; raise it, e.g. TRACEHOUSE_MEMORY_LIMIT{raised}"
            in (errors[0])
        ), errors[0]


@pytest.mark.parametrize("text", ["640MB", "2GB"])
def test_duckdb_accepts_the_policys_settings(text):
    con = duckdb.connect()
    memory.apply(con, memory.settings(env={"TRACEHOUSE_MEMORY_LIMIT": text}))
    assert con.execute("SELECT current_setting('threads')").fetchone()[0] >= 1


@pytest.mark.parametrize("run_id", ["0123456789abcdef", "f390e2a31d96ad32"])
def test_a_table_is_planned_by_its_runs_files_not_its_zero_row_file(tmp_path, run_id):
    """DuckDB estimates a scan's rows from its first file: `run_id=_schema` (zero rows) sorts before a run id
    that starts with a letter, and the planner, taking the table for empty, built its joins on the whole table
    (the 1 GB run f390e2a31d96ad32 ran out of 640MB in the derive's first view; 0789ea... did not). The base
    views list the runs' files first, whatever the run id."""
    from tracehouse.warehouse.catalog import ROOT, base_view_sql
    from tracehouse.warehouse.store import SCHEMA_PARTITION

    con = duckdb.connect()
    con.execute(f"SET VARIABLE {ROOT} = ?", [str(tmp_path)])
    for table, rows in (("runs", 1), ("kernels", 50_000)):
        for part, n in ((SCHEMA_PARTITION, 0), (f"run_id={run_id}", rows)):
            (tmp_path / "tables" / table / part).mkdir(parents=True)
            target = tmp_path / "tables" / table / part / "rank-00000.parquet"
            con.execute(f"COPY (SELECT range AS kernel_id FROM range({n})) TO '{target}' (FORMAT parquet)")
        con.execute(base_view_sql(table))
    assert con.execute("SELECT count(*) FROM kernels").fetchone()[0] == 50_000
    plan = con.execute("EXPLAIN SELECT count(DISTINCT kernel_id) FROM kernels").fetchall()[0][1]
    estimates = [int(n.replace(",", "")) for n in re.findall(r"~([\d,]+) rows?", plan)]
    assert max(estimates) >= 50_000, plan  # the kernels' scan is estimated from their file
    assert "RIGHT_SEMI" not in plan  # the hash table is built on the runs, not on the kernels

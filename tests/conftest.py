"""Shared test fixtures: the real traces beside the checkout, and warehouses built from them."""

from __future__ import annotations

import bisect
import gzip
import json
import os
import re
import sys
from decimal import Decimal
from pathlib import Path

import pytest
from tier import listed as listed_slow
from warehouses import real, scenario, situation

# TRACEHOUSE_TEST_COUNT=FILE: each test phase's CPU seconds, ingests, derives and syntheses (tests/suite_counts.py)
pytest_plugins = ["suite_counts"]

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SHARED = ROOT.parent / "shared"
TRACES = SHARED / "traces"
ORACLES = SHARED / "oracles"

GPU_CATS = {
    "kernel": "kernel",
    "gpu_memcpy": "memcpy",
    "gpu_memset": "memset",
    "memcpy": "memcpy",
    "memset": "memset",
}


# the synthesized runs whose reports the tests check (golden Markdown, stored analyses)
REPORT_SCENARIOS = {
    "serving-decode": {"ranks": 2, "steps": 3, "layers": 2},
    "serving-prefill": {"ranks": 2, "steps": 2, "layers": 2},
    "training": {"ranks": 2, "steps": 3, "layers": 2},
}


@pytest.fixture(scope="session")
def warehouses(tmp_path_factory):
    """The session's warehouse factory (tests/warehouses.py): warehouses.get(sources, derived) builds a
    warehouse once per session and shares it read-only; warehouses.named({name: source}, derived) ->
    (Warehouse, {name: run id}, {name: ground truth})."""
    from warehouses import Warehouses

    return Warehouses(tmp_path_factory)


@pytest.fixture(scope="session")
def synth_warehouse(warehouses):
    """One warehouse with a run of each REPORT_SCENARIOS (seed 7), derived; returns (Warehouse, {scenario:
    run id})."""
    wh, runs, _ = warehouses.named(
        {name: scenario(name, seed=7, **opts) for name, opts in REPORT_SCENARIOS.items()}, derived=True
    )
    return wh, runs


@pytest.fixture
def own_synth_warehouse(synth_warehouse, tmp_path):
    """synth_warehouse copied for a test that changes it (other tests, maybe in other workers, read the
    shared one); returns (Warehouse, {scenario: run id})."""
    import shutil

    from tracehouse.warehouse.store import Warehouse

    wh, runs = synth_warehouse
    shutil.copytree(wh.root, tmp_path / "wh")
    return Warehouse(tmp_path / "wh"), runs


def pytest_terminal_summary(terminalreporter, config):
    """How many shared warehouses this session built and how long they took (tests/warehouses.py)."""
    factory = getattr(config, "_tmp_path_factory", None)
    log = factory.getbasetemp() / "shared-builds.log" if factory else None
    if log is not None and log.is_file():
        seconds = [float(line.split("\t")[0]) for line in log.read_text().splitlines() if line]
        terminalreporter.write_line(f"shared warehouses: {len(seconds)} built in {sum(seconds):.1f} s")


def pytest_report_header(config):
    import duckdb
    import pyarrow
    import sqlglot

    return f"duckdb {duckdb.__version__}, pyarrow {pyarrow.__version__}, sqlglot {sqlglot.__version__}"


# The fast tier (`make test-fast`: TRACEHOUSE_TEST_FAST=1, pytest -m "not slow") runs the synthesized
# situations and unit tests; `make test` (CI) runs everything. Slow: what SLOW_NEEDS below says (every test
# that asks for the real traces of ../shared also skips in the fast tier: require_shared).
FAST = os.environ.get("TRACEHOUSE_TEST_FAST") == "1"
# `tracehouse ingest` derives a run's rows before it returns by default; the tests' CLI ingests leave
# them to the first reader ('none'), so a test pays only for the views it reads (the fast tier: 133 s with
# 'wait', 99 s with 'none'). The kept rows are still tested:
# test_derived.py compares kept and computed rows (and ingest's own derive); the session warehouses
# (synth_warehouse, real_warehouse) are ingested through ingest_paths, which waits for them.
os.environ.setdefault("TRACEHOUSE_DERIVE", "none")
# What makes a test slow, by what it needs, in this one place (the tests carry no slow marks of their own):
# a module needing it whole, a fixture it asks for, or the test itself. pytest_collection_modifyitems marks
# every such test `slow`; `make test-fast` leaves them out, `make test` (CI) runs them.
SPARK = "Spark (a JVM)"
SLOW_NEEDS = {
    "the real traces of ../shared": {
        "modules": {"test_ingest_real", "test_timeline_oracles", "test_nsys", "test_diff"},
        "fixtures": {"real_warehouse", "real_runs"},  # (and a parameter that is a path: `needs_real`)
        "tests": {
            "test_first_contact::test_gpu_timeline_run_on_real_traces_matches_an_independent_union",
            "test_serving_views::test_no_kernel_exceeds_its_bound_over_the_corpus",
            "test_takeaway_bounds::test_real_host_bound_two_stream_trace_recommends_no_overlap",
            "test_step_path_truth::test_real_multistream_step_streams_families_and_components",
        },
    },
    SPARK: {
        "modules": {"test_spark", "test_spark_lists"},
        "fixtures": {"spark", "engines"},
        "tests": {
            "test_engine::test_the_seam_on_spark",
            "test_fusion_situations::test_fusion_match_same_rows_on_spark",
        },
    },
    "the browser (headless Chromium)": {"modules": {"test_pages"}, "fixtures": {"browser"}},
    "killed processes": {"modules": {"test_kill"}},
    "the README's commands, the demo's whole history": {
        "modules": {"test_demo"},
        "tests": {"test_readme::test_readme_commands_run_as_written"},
    },
    # whole reports, diffs, trends and Perfetto exports of whole runs end to end (tens of seconds each on
    # 2 cores); their modules' other tests stay in the fast tier
    "whole-run reports, diffs, trends and exports": {
        "modules": {
            "test_export",
            "test_run_report",
            "test_stored_analyses",
            "test_trend",
            "test_diff_honest",
        },
        "tests": {
            *(
                f"test_export_bounded::{t}"
                for t in (
                    "test_scoped_batches_give_the_views_rows",
                    "test_track_that_does_not_fit_is_left_out_and_said",
                    "test_idle_gaps_written_whole_or_not_at_all",
                    "test_data_quality_falls_back_to_each_rank",
                    "test_gpu_tracks_that_do_not_fit_fail_in_one_line_nothing_written",
                )
            ),
            "test_export_tiles::test_windows_cutting_through_gaps_and_comm",
            "test_step_path_truth::test_decode_report_says_moe_on_the_path_and_hidden_as_the_simulation",
            "test_export_tiles::test_tracks_cut_into_row_tiles_hold_the_same_slices",
            "test_capture_attribution::test_same_files_with_capture_are_another_run",
            "test_capture_attribution::test_synth_serving_decode_sites_equal_ground_truth",
            "test_capture_attribution::test_recorded_h200_replay_from_its_capture",
            "test_engine::test_a_report_connection_reads_stored_analyses_and_the_same_report",
            "test_whatif::test_report_carries_the_whatif_of_its_step",
            "test_diff_store::test_cli_diff_reads_the_store",
            "test_mcp::test_a_session_answers_as_the_cli",
            "test_hardening::test_broken_run_derives_cleanly",
            *(
                f"test_data_quality::{t}"
                for t in (
                    "test_report_withholds_takeaways_from_flagged_figures",
                    "test_cpu_only_report_says_so_in_one_line",
                    "test_eager_without_stacks_is_not_told_to_pass_capture_traces",
                    "test_flagged_figure_carries_marker_and_message_nearby",
                    "test_mtia_device_activity_is_counted_and_flagged",
                    "test_cpu_only_real_traces_say_so",
                )
            ),
            "test_warmup::test_no_takeaway_rests_on_the_setup",
        },
    },
}
# and the fast tier's time budget: every test whose call alone took 1 s or more in a measured fast-tier run
# (tests/slow_tests.txt, kept by tests/tier.py). Kept because without it ~190 such tests (whole critical
# paths, category and gap views of situations, hardening's broken runs) would join the fast tier.
SLOW_BY_TIME = listed_slow()


def needs_real(item) -> bool:
    """A test parametrized by a path of ../shared (a real trace)."""
    params = getattr(item, "callspec", None)
    return params is not None and any(
        isinstance(v, str) and (".json" in v or "/" in v) for v in params.params.values()
    )


def slow_need(item) -> str | None:
    """What of SLOW_NEEDS this test needs (None: nothing slow)."""
    module = item.module.__name__.rsplit(".", 1)[-1] if item.module else ""
    test = f"{module}::{getattr(item, 'originalname', item.name)}"
    for need, where in SLOW_NEEDS.items():
        if (
            module in where.get("modules", ())
            or test in where.get("tests", ())
            or set(where.get("fixtures", ())) & set(item.fixturenames)
        ):
            return need
    if needs_real(item):
        return "the real traces of ../shared"
    if item.nodeid in SLOW_BY_TIME:
        return "over the fast tier's budget"
    return None


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's own hook, which turns the group into the test's id
def pytest_collection_modifyitems(config, items):
    xdist = config.pluginmanager.hasplugin("xdist")
    for item in items:
        need = slow_need(item)
        if need:
            item.add_marker(pytest.mark.slow)
        if (
            need == SPARK and xdist
        ):  # one worker runs every Spark test (`--dist loadgroup`), in one JVM: `spark` below
            item.add_marker(pytest.mark.xdist_group("spark"))


@pytest.fixture(scope="session")
def spark():
    """The test session's one Spark session (local[2]), never stopped before the worker ends: a JVM takes
    ~15 s to start, and a session stopped by one module would be handed stopped to the next (getOrCreate)."""
    import shutil
    import subprocess

    pytest.importorskip("pyspark", reason="pyspark is not installed: pip install -e '.[spark]'")
    if shutil.which("java") is None:
        pytest.skip("no java on PATH: Spark needs Java 17+")
    try:
        java = subprocess.run(["java", "-version"], check=False, capture_output=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        java = None
    if java is None or java.returncode != 0:
        pytest.skip("`java -version` fails: Spark needs a working Java 17+")
    from tracehouse.warehouse.spark import SMALL_DATA_CONF, spark_session

    # the tests' runs are a few hundred rows: executed as small data (the rows do not depend on it)
    return spark_session("local[2]", app_name="tracehouse-tests", conf=SMALL_DATA_CONF)


def require_shared() -> Path:
    if FAST:
        pytest.skip(
            "the fast tier (make test-fast) leaves out the real traces of ../shared; make test runs them"
        )
    if not TRACES.is_dir():
        pytest.skip(
            f"../shared/traces not found at {TRACES}: the real-trace tests need the shared folder "
            "beside the checkout"
        )
    return TRACES


def real_trace_files() -> list[str]:
    """Every trace file under ../shared/traces, relative to it (empty when the folder is missing)."""
    if not TRACES.is_dir():
        return []
    files = []
    for p in sorted(TRACES.rglob("*")):
        if p.is_file() and p.name.endswith((".json", ".json.gz")) and p.name != "execution_details.json":
            files.append(str(p.relative_to(TRACES)))
    return files


def load_json(path: Path):
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rb") as f:
        return json.load(f, parse_float=Decimal)


def independent_gpu_summary(path: Path) -> dict:
    """Count GPU activities and sum their durations (exact ns) with a plain JSON pass, no tracehouse code."""
    doc = load_json(path)
    events = doc["traceEvents"] if isinstance(doc, dict) else doc
    runtime_corr = {
        e.get("args", {}).get("correlation")
        for e in events
        if e.get("ph") == "X" and str(e.get("cat", "")).lower() in ("cuda_runtime", "cuda_driver", "runtime")
    }
    count = linked = 0
    total_ns = 0
    for e in events:
        if e.get("ph") != "X" or str(e.get("cat", "")).lower() not in GPU_CATS:
            continue
        count += 1
        total_ns += max(0, int((Decimal(e.get("dur", 0)) * 1000).to_integral_value()))
        if e.get("args", {}).get("correlation") in runtime_corr:
            linked += 1
    return {"count": count, "dur_ns": total_ns, "linked": linked}


RUNTIME_CATS = ("cuda_runtime", "cuda_driver", "runtime", "driver")  # every version's spelling (lower case)
HOST_OP_CATS = ("cpu_op", "operator")
PROFILER_STEP = re.compile(r"^ProfilerStep#(\d+)")


def _ns(value) -> int:
    return int((Decimal(str(value)) * 1000).to_integral_value())


def independent_links(path: Path) -> dict:
    """What a plain JSON pass, no tracehouse code, says a correct ingest must find in one trace:
    `profiler_steps`: {N: (start_ns, end_ns)} of the ProfilerStep#N host ranges (any category but the
    GPU-side copy, gpu_user_annotation); `correlated`: GPU activities whose correlation names a runtime or
    driver call of the trace (a launch/activity pair); `with_op`: those whose launching call starts inside
    a host op (cpu_op; `Operator` in the 2021 spelling) on its own thread. Categories are matched in every
    spelling a Kineto version wrote (lower case)."""
    doc = load_json(path)
    events = doc["traceEvents"] if isinstance(doc, dict) else doc
    launches, ops, steps = {}, {}, {}
    for e in events:
        if e.get("ph") != "X" or "ts" not in e:
            continue
        cat = str(e.get("cat", "")).lower()
        thread = (str(e.get("pid")), str(e.get("tid")))
        if cat in RUNTIME_CATS and (e.get("args") or {}).get("correlation") is not None:
            launches[e["args"]["correlation"]] = (thread, _ns(e["ts"]))
        elif cat in HOST_OP_CATS:
            ops.setdefault(thread, []).append((_ns(e["ts"]), _ns(e["ts"]) + _ns(e.get("dur", 0))))
        match = PROFILER_STEP.match(str(e.get("name", "")))
        if match and cat != "gpu_user_annotation" and cat not in GPU_CATS:
            steps[int(match.group(1))] = (_ns(e["ts"]), _ns(e["ts"]) + _ns(e.get("dur", 0)))
    # per thread: op starts in order, and the latest end among the ops started so far
    reach = {}
    for thread, spans in ops.items():
        spans.sort()
        latest, ends = None, []
        for _, end in spans:
            latest = end if latest is None else max(latest, end)
            ends.append(latest)
        reach[thread] = ([s for s, _ in spans], ends, {s for s, end in spans if s == end})
    correlated = with_op = 0
    for e in events:
        if e.get("ph") != "X" or str(e.get("cat", "")).lower() not in GPU_CATS:
            continue
        launch = launches.get((e.get("args") or {}).get("correlation"))
        if launch is None:
            continue
        correlated += 1
        thread, t = launch
        if thread in reach:
            starts, ends, points = reach[thread]
            i = bisect.bisect_right(starts, t)
            with_op += bool(i and ends[i - 1] > t) or t in points
    return {"profiler_steps": steps, "correlated": correlated, "with_op": with_op}


@pytest.fixture(scope="session")
def cli_runner():
    from click.testing import CliRunner

    return CliRunner()


@pytest.fixture(scope="session")
def real_warehouse(warehouses):
    """One warehouse holding every real trace file as its own run, derived; returns (Warehouse, {relative
    path: run id})."""
    require_shared()
    wh, runs, _ = warehouses.named({rel: real(rel) for rel in real_trace_files()}, derived=True)
    return wh, runs


# the real folders read as one run each (their ranks, their captures), beside every real trace file
REAL_FOLDERS = ("inference/sglang_decode", "inference/vllm_decode_full", "multirank/sampled_2ranks")


@pytest.fixture(scope="session")
def real_runs(warehouses):
    """One warehouse holding every real trace file and each of REAL_FOLDERS as its own run, not derived
    (every view is computed by its reader); returns (Warehouse, {relative path: run id}). A test reads
    the runs it names on a connection focused on them (connect(wh, runs=...), RunFocused), which sees
    what a warehouse of those runs alone would."""
    require_shared()
    wh, runs, _ = warehouses.named({rel: real(rel) for rel in [*real_trace_files(), *REAL_FOLDERS]})
    return wh, runs


@pytest.fixture(scope="session")
def situation_warehouse(warehouses):
    """One warehouse holding every synthesized situation (synth/situations) as its own run, not derived;
    returns (Warehouse, {situation: run id}, {situation: its `expect` ground truth})."""
    from tracehouse.synth.situations import SITUATIONS

    wh, runs, truths = warehouses.named({name: situation(name) for name in sorted(SITUATIONS)})
    return wh, runs, {name: truth["expect"] for name, truth in truths.items()}


class RunFocused:
    """A connection over a warehouse of many runs that focuses each query on the runs its parameters
    name (warehouse.catalog.focus, as every command's connection does): a test asking about one run
    computes that run's per-run views (the critical path's sweep, window functions), not the whole
    warehouse's. A query that names no run id sees every run of `run_ids` (of a shared warehouse, the
    runs the test asked for). Other methods are the connection's."""

    def __init__(self, con, run_ids) -> None:
        self.con, self.run_ids = con, set(run_ids)

    def execute(self, sql: str, params=None):
        from tracehouse.warehouse.catalog import focus

        named = sorted({p for p in (params or []) if isinstance(p, str) and p in self.run_ids})
        focus(self.con, named or sorted(self.run_ids))
        return self.con.execute(sql, params or [])

    def __getattr__(self, name):
        return getattr(self.con, name)


def query_rows(con, sql: str, params=()) -> list[dict]:
    """A query's rows as dicts (column name -> value)."""
    cur = con.execute(sql, list(params or []))
    cols = [d[0] for d in cur.description]
    return [dict(zip(cols, r)) for r in cur.fetchall()]


@pytest.fixture(scope="module")
def sit(situation_warehouse):
    """(connection with every view, {situation: run id}, {situation: expect}) over the situations."""
    from tracehouse.warehouse.catalog import connect

    wh, runs, expect = situation_warehouse
    con = connect(wh)
    yield RunFocused(con, runs.values()), runs, expect
    con.close()

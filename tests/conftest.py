"""Shared test fixtures: the real traces beside the checkout, and warehouses built from them."""

from __future__ import annotations

import bisect
import fcntl
import gzip
import json
import os
import re
import sys
from decimal import Decimal
from pathlib import Path

import pytest
from tier import listed as listed_slow

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


def built_once(tmp_path_factory, name: str, build):
    """build(folder) -> a JSON-able result, run once per test session, also under pytest-xdist: the first
    worker to get here builds in a folder all workers share, the others wait for it and read its result.
    The folder's contents are then read-only for the tests (a test that changes a warehouse copies it)."""
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker is None:
        return build(tmp_path_factory.mktemp(name))
    folder = tmp_path_factory.getbasetemp().parent / f"shared-{name}"
    done = folder / "built.json"
    with open(folder.parent / f"shared-{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if not done.is_file():
            folder.mkdir(exist_ok=True)
            done.write_text(json.dumps(build(folder)))
    return json.loads(done.read_text())


@pytest.fixture(scope="session")
def synth_warehouse(tmp_path_factory):
    """One warehouse with a run of each REPORT_SCENARIOS (seed 7); returns (Warehouse, {scenario: run id})."""
    from warehouse.store import Warehouse

    def build(root: Path) -> dict:
        from ingest.load import ingest_paths
        from synth import write_scenario

        runs = {}
        for scenario, opts in REPORT_SCENARIOS.items():
            [outcome] = ingest_paths(
                Warehouse(root / "wh"), [write_scenario(scenario, root / scenario, seed=7, **opts)]
            )
            runs[scenario] = outcome.run_id
        return {"root": str(root / "wh"), "runs": runs}

    built = built_once(tmp_path_factory, "reports", build)
    return Warehouse(Path(built["root"])), built["runs"]


@pytest.fixture
def own_synth_warehouse(synth_warehouse, tmp_path):
    """synth_warehouse copied for a test that changes it (other tests, maybe in other workers, read the
    shared one); returns (Warehouse, {scenario: run id})."""
    import shutil

    from warehouse.store import Warehouse

    wh, runs = synth_warehouse
    shutil.copytree(wh.root, tmp_path / "wh")
    return Warehouse(tmp_path / "wh"), runs


def pytest_report_header(config):
    import duckdb
    import pyarrow
    import sqlglot

    return f"duckdb {duckdb.__version__}, pyarrow {pyarrow.__version__}, sqlglot {sqlglot.__version__}"


# The fast tier (`make test-fast`: TRACEHOUSE_TEST_FAST=1, pytest -m "not slow") runs the synthesized
# situations and unit tests in a few minutes; `make test` (CI) runs everything. Slow: the real traces of
# ../shared (every test that asks for them skips in the fast tier), Spark, the browser, killed processes,
# the demo's whole history, Perfetto exports of whole runs, whole reports, diffs and trends.
FAST = os.environ.get("TRACEHOUSE_TEST_FAST") == "1"
# `tracehouse ingest` derives a run's rows before it returns by default; the tests' CLI ingests leave
# them to the first reader ('none'), so a test pays only for the views it reads (the fast tier: 133 s with
# 'wait', 99 s with 'none'). The kept rows are still tested:
# test_derived.py compares kept and computed rows (and ingest's own derive); the session warehouses
# (synth_warehouse, real_warehouse) are ingested through ingest_paths, which waits for them.
os.environ.setdefault("TRACEHOUSE_DERIVE", "none")
SLOW_MODULES = {
    "test_spark",
    "test_pages",
    "test_kill",
    "test_demo",
    "test_export",
    "test_ingest_real",
    "test_timeline_oracles",
    "test_nsys",
    # whole reports, diffs and trends end to end (tens of seconds each on 2 cores)
    "test_run_report",
    "test_stored_analyses",
    "test_trend",
    "test_diff",
    "test_spark_lists",
}
# single end-to-end tests of otherwise fast modules (--durations=40 of the fast tier, 2026-12-02: 70-190 s
# each on the shared 2 cores): bounded Perfetto exports of a whole synthesized run, whole ingests of a
# scenario or a recorded trace with its capture
SLOW_TESTS = {
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
    "test_capture_attribution::test_same_files_with_capture_are_another_run",
    "test_capture_attribution::test_synth_serving_decode_sites_equal_ground_truth",
    "test_capture_attribution::test_recorded_h200_replay_from_its_capture",
    # the largest single tests left in the fast tier (CPU seconds, bench/results.md "test suite", 2026-12-02):
    # six windowed Perfetto exports of a 2-rank run (2.7-3.1 s each measured alone, plus each window's views;
    # 3 min of wall at load 18, the longest of the tier); a whole run report computed from the views and again
    # from the stored analyses (21.7 s); a whole diff from the views beside the CLI's stored one (11.2 s).
    # Their modules' other tests stay in the fast tier.
    "test_export_tiles::test_windows_cutting_through_gaps_and_comm",
    "test_engine::test_a_report_connection_reads_stored_analyses_and_the_same_report",
    "test_diff_store::test_cli_diff_reads_the_store",
}


# and every test whose call alone took the fast tier's budget (1 s) in a measured run: tests/tier.py
SLOW_BY_TIME = listed_slow()


def pytest_collection_modifyitems(config, items):
    for item in items:
        module = item.module.__name__.rsplit(".", 1)[-1] if item.module else ""
        params = getattr(item, "callspec", None)
        real = params is not None and any(
            isinstance(v, str) and (".json" in v or "/" in v) for v in params.params.values()
        )
        if (
            module in SLOW_MODULES
            or f"{module}::{getattr(item, 'originalname', item.name)}" in SLOW_TESTS
            or real
            or "real_warehouse" in item.fixturenames
            or item.nodeid in SLOW_BY_TIME
        ):
            item.add_marker(pytest.mark.slow)


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
def real_warehouse(tmp_path_factory):
    """One warehouse holding every real trace as its own run; returns (Warehouse, {relative path: run id})."""
    require_shared()
    from warehouse.store import Warehouse

    def build(root: Path) -> dict:
        from ingest.load import ingest_paths

        run_of = {}
        for rel in real_trace_files():
            outcomes = ingest_paths(Warehouse(root / "wh"), [TRACES / rel])
            assert not outcomes[0].problems, outcomes[0].problems
            run_of[rel] = outcomes[0].run_id
        return {"root": str(root / "wh"), "runs": run_of}

    built = built_once(tmp_path_factory, "real", build)
    return Warehouse(Path(built["root"])), built["runs"]


@pytest.fixture(scope="session")
def situation_warehouse(tmp_path_factory):
    """One warehouse holding every synthesized situation (synth/situations) as its own run, analyses
    not stored; returns (Warehouse, {situation: run id}, {situation: its `expect` ground truth})."""
    from warehouse.store import Warehouse

    def build(root: Path) -> dict:
        from ingest.load import ingest_paths
        from synth.situations import SITUATIONS, write_situation
        from synth.truth import load_truth

        runs, expect = {}, {}
        for name in sorted(SITUATIONS):
            out = write_situation(name, root / name)
            [outcome] = ingest_paths(Warehouse(root / "wh"), [out], analyse=False)
            assert not outcome.problems, (name, outcome.problems)
            runs[name] = outcome.run_id
            expect[name] = load_truth(out)["expect"]
        return {"root": str(root / "wh"), "runs": runs, "expect": expect}

    built = built_once(tmp_path_factory, "situations", build)
    return Warehouse(Path(built["root"])), built["runs"], built["expect"]


class RunFocused:
    """A connection over a warehouse of many runs that focuses each query on the runs its parameters
    name (warehouse.catalog.focus, as every command's connection does): a test asking about one run
    computes that run's per-run views (the critical path's sweep, window functions), not the whole
    warehouse's. A query that names no run id sees every run. Other methods are the connection's."""

    def __init__(self, con, run_ids) -> None:
        self.con, self.run_ids = con, set(run_ids)

    def execute(self, sql: str, params=None):
        from warehouse.catalog import focus

        named = sorted({p for p in (params or []) if isinstance(p, str) and p in self.run_ids})
        focus(self.con, named or None)
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
    from warehouse.catalog import connect

    wh, runs, expect = situation_warehouse
    con = connect(wh)
    yield RunFocused(con, runs.values()), runs, expect
    con.close()

"""Shared test fixtures: the real traces beside the checkout, and warehouses built from them."""

from __future__ import annotations

import gzip
import json
import sys
from decimal import Decimal
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SHARED = ROOT.parent / "shared"
TRACES = SHARED / "traces"
ORACLES = SHARED / "oracles"

GPU_CATS = {"kernel": "kernel", "gpu_memcpy": "memcpy", "gpu_memset": "memset",
            "memcpy": "memcpy", "memset": "memset"}


# the synthesized runs whose reports the tests check (golden Markdown, stored analyses)
REPORT_SCENARIOS = {"serving-decode": {"ranks": 2, "steps": 3, "layers": 2},
                    "serving-prefill": {"ranks": 2, "steps": 2, "layers": 2},
                    "training": {"ranks": 2, "steps": 3, "layers": 2}}


@pytest.fixture(scope="session")
def synth_warehouse(tmp_path_factory):
    """One warehouse with a run of each REPORT_SCENARIOS (seed 7); returns (Warehouse, {scenario: run id})."""
    from synth import write_scenario
    from warehouse.load import ingest_paths
    from warehouse.store import Warehouse

    root = tmp_path_factory.mktemp("reports")
    wh = Warehouse(root / "wh")
    runs = {}
    for scenario, opts in REPORT_SCENARIOS.items():
        [outcome] = ingest_paths(wh, [write_scenario(scenario, root / scenario, seed=7, **opts)])
        runs[scenario] = outcome.run_id
    return wh, runs


def pytest_report_header(config):
    import duckdb
    import pyarrow
    import sqlglot

    return f"duckdb {duckdb.__version__}, pyarrow {pyarrow.__version__}, sqlglot {sqlglot.__version__}"


def require_shared() -> Path:
    if not TRACES.is_dir():
        pytest.skip(f"../shared/traces not found at {TRACES}: the real-trace tests need the shared folder "
                    "beside the checkout")
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
    runtime_corr = {e.get("args", {}).get("correlation") for e in events
                    if e.get("ph") == "X" and str(e.get("cat", "")).lower() in ("cuda_runtime", "cuda_driver", "runtime")}
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


@pytest.fixture(scope="session")
def cli_runner():
    from click.testing import CliRunner

    return CliRunner()


@pytest.fixture(scope="session")
def real_warehouse(tmp_path_factory):
    """One warehouse holding every real trace as its own run; returns (Warehouse, {relative path: run id})."""
    require_shared()
    from warehouse.load import ingest_paths
    from warehouse.store import Warehouse

    wh = Warehouse(tmp_path_factory.mktemp("real") / "wh")
    run_of = {}
    for rel in real_trace_files():
        outcomes = ingest_paths(wh, [TRACES / rel])
        assert not outcomes[0].problems, outcomes[0].problems
        run_of[rel] = outcomes[0].run_id
    return wh, run_of


@pytest.fixture(scope="session")
def situation_warehouse(tmp_path_factory):
    """One warehouse holding every synthesized situation (synth/situations) as its own run, analyses
    not stored; returns (Warehouse, {situation: run id}, {situation: its `expect` ground truth})."""
    from synth.situations import SITUATIONS, write_situation
    from warehouse.load import ingest_paths
    from warehouse.store import Warehouse

    root = tmp_path_factory.mktemp("situations")
    wh = Warehouse(root / "wh")
    runs, expect = {}, {}
    for name in sorted(SITUATIONS):
        out = write_situation(name, root / name)
        [outcome] = ingest_paths(wh, [out], analyse=False)
        assert not outcome.problems, (name, outcome.problems)
        runs[name] = outcome.run_id
        expect[name] = json.loads((out / "ground_truth.json").read_text())["expect"]
    return wh, runs, expect


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
    yield con, runs, expect
    con.close()

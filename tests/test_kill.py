"""Crash safety: SIGKILL an ingest at random points 50 times; the catalogue shows only whole runs and the
next ingest succeeds. Concurrency: several ingests and queries at once on one warehouse."""

from __future__ import annotations

import gzip
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import ROOT
from tracehouse.ingest.load import ingest_paths
from tracehouse.warehouse.catalog import connect
from tracehouse.warehouse.store import Warehouse

KILLS = 50


@pytest.fixture(scope="module")
def base_run(tmp_path_factory) -> Path:
    from tracehouse.synth import write_scenario

    out = write_scenario(
        "serving-decode", tmp_path_factory.mktemp("kill") / "run", ranks=2, steps=4, layers=4, seed=11
    )
    (out / "ground_truth.json").unlink()
    return out


def _variant(base: Path, folder: Path, i: int) -> Path:
    """The base run with one more gzip member (i+1 spaces after the JSON) in rank 0: another run id."""
    shutil.copytree(base, folder)
    rank0 = min(folder.glob("*.json.gz"))
    with open(rank0, "ab") as f:
        f.write(gzip.compress(b" " * (i + 1), mtime=0))
    return folder


def _start(wh: Path, run: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, str(ROOT / "cli.py"), "--warehouse", str(wh), "ingest", str(run)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )


def _whole_runs_only(wh: Path) -> int:
    con = connect(Warehouse(wh))
    rows = con.execute("""
        SELECT r.run_id, r.n_kernels, (SELECT count(*) FROM kernels k WHERE k.run_id = r.run_id)
        FROM runs r""").fetchall()
    for run_id, n_kernels, seen in rows:
        assert n_kernels == seen, (run_id, n_kernels, seen)
    orphans = con.execute(
        "SELECT count(*) FROM kernels WHERE run_id NOT IN (SELECT run_id FROM runs)"
    ).fetchone()
    assert orphans[0] == 0
    return len(rows)


def test_fifty_random_kills_leave_only_whole_runs(base_run, tmp_path):
    wh = tmp_path / "wh"
    rng = random.Random(20240607)
    t0 = time.monotonic()  # one whole ingest, to know how long one takes
    proc = _start(wh, _variant(base_run, tmp_path / "v-full", 10_000))
    assert proc.wait(timeout=120) == 0
    # the shortest whole ingest seen so far: the first one also creates the warehouse and may meet a cold
    # disk cache, so it alone can be twice the others and would leave most kills after the end (CI: 15 of 50)
    full = time.monotonic() - t0
    killed = finished = 0
    for i in range(KILLS):
        started = time.monotonic()
        proc = _start(wh, _variant(base_run, tmp_path / f"v{i}", i))
        time.sleep(rng.uniform(0.0, full * 1.1))
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)  # the CLI and its rank workers
            killed += 1
        else:
            finished += 1
            proc.wait()
            full = min(full, time.monotonic() - started)
        proc.wait()
        shutil.rmtree(tmp_path / f"v{i}")
    assert killed >= KILLS // 2, (killed, finished)
    runs = _whole_runs_only(wh)
    assert runs >= 1 + finished
    # the next ingest succeeds, and leaves no staging folders of dead processes behind
    [outcome] = ingest_paths(Warehouse(wh), [_variant(base_run, tmp_path / "next", 20_000)])
    assert outcome.stored and not outcome.problems
    assert _whole_runs_only(wh) == runs + 1
    staging = Warehouse(wh).staging_dir
    assert not any(staging.iterdir()) if staging.is_dir() else True


def test_ingests_and_queries_at_once(base_run, tmp_path):
    wh = tmp_path / "wh"
    ingest_paths(Warehouse(wh), [_variant(base_run, tmp_path / "first", 30_000)])
    procs = [_start(wh, _variant(base_run, tmp_path / f"c{i}", 40_000 + i)) for i in range(3)]
    queries = 0
    while any(p.poll() is None for p in procs):
        _whole_runs_only(wh)  # a reader never sees a half-published run, and never fails
        queries += 1
    assert [p.wait() for p in procs] == [0, 0, 0]
    assert queries >= 1
    assert _whole_runs_only(wh) == 4

"""Crash safety: SIGKILL an ingest at random points 50 times; the catalogue shows only whole runs and the
next ingest succeeds. Interrupts: SIGINT and SIGTERM at random points of 2-rank ingests (to the process,
or to its group as a terminal's Ctrl-C does; ranks read in this process or in the pool's workers; the
derive included): exit 130, one line that says what was stored, no traceback, whole runs only, `check`
passes; and report, export, derive interrupted say one line and exit 130. Concurrency: several ingests
and queries at once on one warehouse."""

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


# the CLI with every rank read in the pool's worker processes (small files are read in the CLI's own)
POOLED = "import sys; import tracehouse.ingest.run as r; r.INLINE_BYTES = 0; from tracehouse.cli import entry; entry()"


def _start_cli(wh: Path, args: list[str], pooled: bool = False, derive: str = "none") -> subprocess.Popen:
    head = ["-c", POOLED] if pooled else [str(ROOT / "cli.py")]
    return subprocess.Popen(
        [sys.executable, *head, "--warehouse", str(wh), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        env={**os.environ, "PYTHONPATH": str(ROOT), "TRACEHOUSE_DERIVE": derive},
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


INTERRUPTS = 12
STARTED_S = 0.6  # the CLI's handlers are set once Python and click are loaded (tracehouse.cli.entry)


def _all_ranks(wh: Path) -> int:
    """Every run present has all its ranks: n_ranks = its files = the ranks of its kernels (2 here)."""
    con = connect(Warehouse(wh))
    rows = con.execute("""
        SELECT r.run_id, r.n_ranks, len(r.files), (SELECT count(DISTINCT rank) FROM kernels k
                                                    WHERE k.run_id = r.run_id)
        FROM runs r""").fetchall()
    con.close()
    for run_id, n_ranks, files, seen in rows:
        assert n_ranks == files == seen == 2, (run_id, n_ranks, files, seen)
    return len(rows)


def test_interrupts_at_random_points_store_only_whole_runs(base_run, tmp_path):
    wh = tmp_path / "wh"
    rng = random.Random(20261206)
    t0 = time.monotonic()
    first = _start_cli(wh, ["ingest", str(_variant(base_run, tmp_path / "v-full", 50_000))], derive="wait")
    assert first.wait(timeout=180) == 0, first.communicate()
    full = time.monotonic() - t0
    said = {"interrupted": 0, "finished": 0, "stored": 0, "underived": 0}
    for i in range(INTERRUPTS):
        run = _variant(base_run, tmp_path / f"i{i}", 60_000 + i)
        how = (signal.SIGINT, signal.SIGTERM)[i % 2]
        group = i % 4 < 2  # the terminal's Ctrl-C reaches the workers too
        before = set(Warehouse(wh).run_ids())
        proc = _start_cli(wh, ["ingest", str(run)], pooled=i % 3 == 0, derive=("wait", "none")[i % 5 == 4])
        time.sleep(rng.uniform(STARTED_S, full * 1.2))
        if proc.poll() is None:
            (os.killpg if group else os.kill)(proc.pid, how)
        out, err = proc.communicate(timeout=180)
        assert "Traceback" not in err, err
        stored = sorted(set(Warehouse(wh).run_ids()) - before)
        assert len(stored) <= 1, stored
        if proc.returncode == 0:
            said["finished"] += 1
            assert stored
            continue
        assert proc.returncode == 130, (proc.returncode, err)
        said["interrupted"] += 1
        last = err.strip().splitlines()[-1]
        assert last.startswith("interrupted: stored: "), err
        assert err.count("interrupted") == 1, err
        if stored:  # published whole before the signal was raised; said so
            said["stored"] += 1
            assert last.startswith(f"interrupted: stored: {stored[0]} (2 files in {run})"), last
            said["underived"] += "stored, not derived: run `tracehouse derive`" in last
        else:
            assert last == f"interrupted: stored: nothing; not stored: 2 files in {run}", last
        shutil.rmtree(run)
    assert said["interrupted"] >= INTERRUPTS // 2, said
    runs = _all_ranks(wh)
    assert runs == 1 + said["finished"] + said["stored"], said
    _whole_runs_only(wh)
    check = _start_cli(wh, ["check"])
    out, err = check.communicate(timeout=300)
    assert check.returncode == 0 and out.strip() == "all invariants hold", (out, err)
    # the next ingest and derive leave nothing of the interrupted ones: no staging folder, no derive's .tmp
    [outcome] = ingest_paths(Warehouse(wh), [_variant(base_run, tmp_path / "next", 70_000)])
    assert outcome.stored and not outcome.problems
    assert not any(Warehouse(wh).staging_dir.iterdir())
    assert not list((wh / "derived").rglob("*.tmp"))


@pytest.mark.parametrize(
    "args, how",
    [
        (["report", "latest", "--format", "html"], signal.SIGINT),
        (["export", "latest", "-o", "{tmp}/run.pftrace"], signal.SIGINT),
        (["derive"], signal.SIGTERM),
        (["trend", "--format", "html"], signal.SIGTERM),
    ],
)
def test_an_interrupted_command_says_one_line_and_exits_130(base_run, tmp_path, args, how):
    wh = tmp_path / "wh"
    ingest_paths(Warehouse(wh), [_variant(base_run, tmp_path / "run", 80_000)], derive="none")
    rng = random.Random(" ".join(args))
    proc = _start_cli(wh, [a.replace("{tmp}", str(tmp_path)) for a in args])
    time.sleep(rng.uniform(STARTED_S + 0.6, 2.5))
    if proc.poll() is None:
        proc.send_signal(how)
    _, err = proc.communicate(timeout=120)
    if proc.returncode != 0:  # (on a fast machine it may be done before the signal)
        assert (proc.returncode, err) == (130, "interrupted\n")
    assert not list(wh.rglob("*.tmp")) and not list(tmp_path.glob("*.pftrace.*"))

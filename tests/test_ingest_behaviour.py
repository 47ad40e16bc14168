"""Ingest's promises on small hand-made traces: bad input, idempotence, atomicity, concurrency."""

from __future__ import annotations

import gzip
import multiprocessing
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT
from tracebuilder import BASE_US, launch_pair, simple_events, write_trace
from tracehouse.ingest.load import ingest_paths
from tracehouse.ingest.naming import parse_trace_name
from tracehouse.warehouse.catalog import connect
from tracehouse.warehouse.store import Warehouse

from tracehouse.cli import main


def _ingest(runner, wh: Path, *args):
    return runner.invoke(main, ["--warehouse", str(wh), "ingest", *map(str, args)])


def test_ingest_prints_run_id_and_counts(tmp_path, cli_runner):
    trace = write_trace(tmp_path / "t.json.gz", simple_events())
    result = _ingest(cli_runner, tmp_path / "wh", trace)
    assert result.exit_code == 0, result.output
    run_id = result.stdout.split()[0]
    con = connect(Warehouse(tmp_path / "wh"))
    assert con.execute("SELECT run_id, n_kernels FROM runs").fetchone() == (run_id, 2)
    rows = con.execute(
        "SELECT name, start_ns, dur_ns, linked, launch_call FROM kernels ORDER BY start_ns"
    ).fetchall()
    assert rows == [
        ("void gemm_kernel<1>()", (BASE_US + 10) * 1000, 5250, True, "cudaLaunchKernel"),
        ("void rmsnorm_kernel()", (BASE_US + 16) * 1000, 875, True, "cudaLaunchKernel"),
    ]
    # the first launch sits inside aten::mm; the second one starts after it ended
    ops = con.execute(
        "SELECT k.name, o.name FROM kernels k LEFT JOIN cpu_ops o ON o.run_id = k.run_id "
        "AND o.rank = k.rank AND o.op_id = k.cpu_op_id ORDER BY k.start_ns"
    ).fetchall()
    assert ops == [("void gemm_kernel<1>()", "aten::mm"), ("void rmsnorm_kernel()", None)]


def test_same_files_twice_store_nothing_new(tmp_path, cli_runner):
    trace = write_trace(tmp_path / "t.json.gz", simple_events())
    first = _ingest(cli_runner, tmp_path / "wh", trace)
    files_before = sorted(p for p in (tmp_path / "wh" / "tables").rglob("*") if p.is_file())
    second = _ingest(cli_runner, tmp_path / "wh", trace)
    assert second.exit_code == 0
    assert first.stdout.split()[0] == second.stdout.split()[0]
    assert "already in the warehouse" in second.stdout
    assert sorted(p for p in (tmp_path / "wh" / "tables").rglob("*") if p.is_file()) == files_before


BAD_FILES = {
    # cut before the first event (a cut after some events keeps them: test_hardening)
    "truncated.json.gz": lambda good: good[:40],
    "empty.json": lambda good: b"",
    "not_a_trace.json": lambda good: b'{"hello": "world"}',
    # invalid JSON in the metadata (a bad byte inside the event array only costs that event: test_hardening)
    "invalid_json.json": lambda good: gzip.decompress(good).replace(
        b'"schemaVersion": 1', b'"schemaVersion": X', 1
    ),
    "corrupt_gzip.json.gz": lambda good: good[:20] + bytes(b ^ 0xFF for b in good[20:60]) + good[60:],
}


@pytest.mark.parametrize("bad_name", sorted(BAD_FILES))
def test_bad_file_is_reported_and_others_land(tmp_path, cli_runner, bad_name):
    good = write_trace(tmp_path / "in" / "good.json.gz", simple_events())
    bad = tmp_path / "in2" / bad_name
    bad.parent.mkdir()
    bad.write_bytes(BAD_FILES[bad_name](good.read_bytes()))
    result = _ingest(cli_runner, tmp_path / "wh", bad, tmp_path / "in")
    assert result.exit_code == 1
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and bad_name in errors[0]
    assert "Traceback" not in result.output
    con = connect(Warehouse(tmp_path / "wh"))
    assert con.execute("SELECT count(*) FROM runs").fetchone()[0] == 1
    assert con.execute("SELECT count(*) FROM kernels").fetchone()[0] == 2


def test_recoverable_oddities_are_repaired_and_counted(tmp_path):
    events = simple_events()
    events[1]["dur"] = -3.0  # a negative duration on the launch call
    events[2]["dur"] = -1.5  # and on a kernel
    events.append(
        {"ph": "s", "cat": "ac2g", "name": "ac2g", "id": 999, "pid": 1, "tid": 100, "ts": BASE_US + 40}
    )
    events.append(
        {"ph": "X", "cat": "weird_category", "name": "x", "pid": 1, "tid": 100, "ts": BASE_US + 41, "dur": 1}
    )
    events.append({"ph": "X", "cat": "cpu_op", "name": "no_ts", "pid": 1, "tid": 100, "dur": 1})
    events.append(dict(events[6]))  # a duplicate of the second kernel
    events.append(
        {
            "ph": "X",
            "cat": "kernel",
            "name": "str_fields",
            "pid": 0,
            "tid": 7,
            "ts": str(BASE_US + 60),
            "dur": 1,
            "args": {"stream": "7", "device": "zero", "correlation": "n/a"},
        }
    )
    wh = Warehouse(tmp_path / "wh")
    [outcome] = ingest_paths(wh, [write_trace(tmp_path / "odd.json.gz", events)])
    assert outcome.problems == []
    assert outcome.warnings == {
        "negative durations clamped to 0": 2,
        "flows without a partner": 1,
        "events of unknown category": 1,
        "events without a timestamp skipped": 1,
        "duplicate GPU activities dropped": 1,
    }
    con = connect(wh)
    assert con.execute("SELECT min(dur_ns) FROM kernels").fetchone()[0] == 0
    assert con.execute("SELECT stream, device FROM kernels WHERE name = 'str_fields'").fetchone() == (7, 0)
    assert con.execute("SELECT warnings['duplicate GPU activities dropped'] FROM runs").fetchone()[0] == 1


def test_a_crash_while_publishing_leaves_nothing_visible(tmp_path, monkeypatch):
    wh = Warehouse(tmp_path / "wh")
    trace = write_trace(tmp_path / "t.json.gz", simple_events())
    real_replace = os.replace
    moved = []

    def dying_replace(src, dst):
        if "runs" in str(dst):
            raise KeyboardInterrupt("killed before the commit marker")
        moved.append(dst)
        return real_replace(src, dst)

    monkeypatch.setattr(os, "replace", dying_replace)
    with pytest.raises(KeyboardInterrupt):
        ingest_paths(wh, [trace])
    monkeypatch.setattr(os, "replace", real_replace)
    assert moved, "the crash must come after some tables were moved"
    con = connect(wh)
    assert con.execute("SELECT count(*) FROM kernels").fetchone()[0] == 0
    assert con.execute("SELECT count(*) FROM runs").fetchone()[0] == 0
    [outcome] = ingest_paths(wh, [trace])
    assert outcome.stored
    con = connect(wh)
    assert con.execute("SELECT count(*) FROM kernels").fetchone()[0] == 2


def test_a_killed_ingest_process_leaves_nothing_and_the_next_succeeds(tmp_path):
    trace = write_trace(tmp_path / "t.json.gz", simple_events())
    wh = tmp_path / "wh"
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "cli.py"), "--warehouse", str(wh), "ingest", str(trace)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        proc.wait(timeout=0.5)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    con = connect(Warehouse(wh))
    runs = con.execute("SELECT count(*) FROM runs").fetchone()[0]
    kernels = con.execute("SELECT count(*) FROM kernels").fetchone()[0]
    assert kernels == 2 * runs  # whole or nothing
    [_outcome] = ingest_paths(Warehouse(wh), [trace])
    assert connect(Warehouse(wh)).execute("SELECT count(*) FROM kernels").fetchone()[0] == 2


def _ingest_in_process(args):
    wh, path = args
    return ingest_paths(Warehouse(wh), [Path(path)])[0].stored


def test_concurrent_ingests_both_land(tmp_path):
    paths = []
    for i in range(4):
        events = simple_events() + launch_pair(100 + i, 30.0, 40.0, 1.0 + i)
        paths.append(str(write_trace(tmp_path / f"t{i}.json.gz", events)))
    wh = str(tmp_path / "wh")
    with multiprocessing.get_context("spawn").Pool(4) as pool:
        stored = pool.map(_ingest_in_process, [(wh, p) for p in paths])
    assert stored == [True] * 4
    con = connect(Warehouse(wh))
    assert con.execute("SELECT count(*), count(DISTINCT run_id) FROM kernels").fetchone() == (12, 4)


def test_label_and_commit_are_stored(tmp_path, cli_runner):
    trace = write_trace(tmp_path / "t.json.gz", simple_events())
    result = _ingest(
        cli_runner,
        tmp_path / "wh",
        trace,
        "--label",
        "model=llama",
        "--label",
        "framework=vllm",
        "--commit",
        "abc123",
    )
    assert result.exit_code == 0, result.output
    con = connect(Warehouse(tmp_path / "wh"))
    assert con.execute("SELECT labels['model'], framework, commit FROM runs").fetchone() == (
        "llama",
        "vllm",
        "abc123",
    )


def test_bad_label_is_a_usage_error(tmp_path, cli_runner):
    trace = write_trace(tmp_path / "t.json.gz", simple_events())
    result = _ingest(cli_runner, tmp_path / "wh", trace, "--label", "novalue")
    assert result.exit_code == 2


@pytest.mark.parametrize(
    "name, expected",
    [
        ("1712345-TP-3-DECODE.trace.json.gz", {"tp": 3, "stage": "DECODE", "rank": None}),
        (
            "1712345-TP-1-DP-2-PP-0-EP-5-EXTEND.trace.json.gz",
            {"tp": 1, "dp": 2, "pp": 0, "ep": 5, "stage": "EXTEND"},
        ),
        ("rank-3.host_1234.1700000000.pt.trace.json.gz", {"rank": 3, "tp": None}),
        ("graph_capture_rank_0.1773709742341309550.pt.trace.json.gz", {"rank": 0}),
        ("trace.json.gz", {"rank": None, "tp": None, "stage": None}),
    ],
)
def test_file_names_are_parsed(name, expected):
    info = parse_trace_name(name)
    for key, value in expected.items():
        assert getattr(info, key) == value, key
    if expected.get("stage") == "DECODE":
        assert info.phase == "decode"


class _RecordedConnection:
    """A DuckDB connection that, when closed, records whether it would show DuckDB's progress bar."""

    def __init__(self, con, shown: list) -> None:
        self._con, self._shown, self._checked = con, shown, False

    def __getattr__(self, name):
        return getattr(self._con, name)

    def check(self) -> None:
        if not self._checked:
            self._checked = True
            self._shown.append(
                self._con.execute("SELECT current_setting('enable_progress_bar')").fetchone()[0]
            )

    def close(self) -> None:
        self.check()
        self._con.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def test_no_connection_of_an_ingest_prints_a_progress_bar(tmp_path, monkeypatch):
    """DuckDB's Python client prints a progress bar to standard output for a statement over two seconds,
    also into a pipe (`tracehouse ingest ... --format json | jq`). Every connection an ingest opens (the
    transforms and their decode cursors, the capture attribution, the runs row's writer, the derive's
    catalogue) has it off (warehouse/local_db.py); a cursor inherits it from its connection."""
    import duckdb

    from tracehouse import synth

    opened: list[_RecordedConnection] = []
    shown: list[bool] = []
    real_connect = duckdb.connect

    def recording_connect(*args, **kwargs):
        con = real_connect(*args, **kwargs)
        con.execute("SET enable_progress_bar = true")  # DuckDB's default, except under pytest
        opened.append(_RecordedConnection(con, shown))
        return opened[-1]

    monkeypatch.setattr(duckdb, "connect", recording_connect)
    synth.write_scenario(
        "serving-decode", tmp_path / "run", ranks=1, target_size=300_000
    )  # capture traces too
    ingest_paths(Warehouse(tmp_path / "wh"), [tmp_path / "run"], derive="wait")
    for con in opened:  # those still open
        con.check()
    assert len(shown) >= 4  # transforms, capture attribution, the runs row's writer, the derive
    assert not any(shown)

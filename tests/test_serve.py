"""The query server (issue 15: a question costs its query, not a process): `tracehouse sql` handed to a
warm server prints exactly what the CLI prints without one (stdout, stderr, exit code), declines what it
must leave to the CLI, sees runs published after it started, serves only its own identity, and uses no
folder another user could enter."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from tracebuilder import simple_events, write_trace

from tracehouse import client
from warehouse.catalog import view_files

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def serve_env(tmp_path, monkeypatch):
    """The environment of a user with query servers on, in a short private folder of this test's own."""
    folder = Path(tempfile.mkdtemp(prefix="ths", dir="/tmp"))  # a socket path must be short
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "TRACEHOUSE_SERVE": "on",
        "TRACEHOUSE_SERVE_DIR": str(folder),
        "TRACEHOUSE_SERVE_IDLE": "60",
        "TRACEHOUSE_DERIVE": "none",
    }
    for key in ("TRACEHOUSE_SERVE", "TRACEHOUSE_SERVE_DIR"):
        monkeypatch.setenv(key, env[key])
    yield env
    subprocess.run(
        [sys.executable, str(ROOT / "cli.py"), "serve", "--stop"], env=env, capture_output=True, check=False
    )
    shutil.rmtree(folder, ignore_errors=True)


def _cli(env, *args, stdin=None, off=False):
    run_env = {**env, "TRACEHOUSE_SERVE": "off"} if off else env
    proc = subprocess.run(
        [sys.executable, str(ROOT / "cli.py"), *args],
        input=stdin,
        capture_output=True,
        text=True,
        env=run_env,
        check=False,
    )
    return proc.returncode, proc.stdout, proc.stderr


def _wait_for_server(env, timeout=60.0):
    path = Path(env["TRACEHOUSE_SERVE_DIR"]) / f"{client.identity()}.sock"
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, "no query server came up"
        time.sleep(0.1)
    return path


def test_sql_requests_handed_over_and_those_left_to_the_cli(monkeypatch):
    monkeypatch.delenv("TRACEHOUSE_WAREHOUSE", raising=False)
    request = client._sql_request(["--warehouse", "/w", "sql", "--format", "csv", "select 1"])
    assert request["warehouse"] == "/w" and request["fmt"] == "csv" and request["query"] == "select 1"
    assert client._sql_request(["--warehouse=/w", "sql", "--format=json", "-"])["query"] is None
    assert client._sql_request(["sql", "select 1"])["warehouse"] == os.path.abspath("./tracehouse-data")
    monkeypatch.setenv("TRACEHOUSE_WAREHOUSE", "/env")
    assert client._sql_request(["sql", "select 1"])["warehouse_from_env"] is True
    for argv in (
        ["sql", "--engine", "spark", "select 1"],  # another engine
        ["--debug", "sql", "select 1"],  # tracebacks asked for
        ["sql", "--help"],
        ["sql", "--format", "md", "select 1"],  # a format sql does not have: click says so
        ["sql", "select 1", "select 2"],  # two arguments: click's usage error
        ["runs"],
        ["ingest", "x.json"],
        [],
    ):
        assert client._sql_request(argv) is None, argv


def test_server_answers_exactly_what_the_cli_prints(tmp_path, serve_env):
    trace = write_trace(tmp_path / "t.json.gz", simple_events())
    wh = str(tmp_path / "wh")
    code, _, err = _cli(serve_env, "--warehouse", wh, "ingest", str(trace), off=True)
    assert code == 0, err
    _cli(serve_env, "--warehouse", wh, "sql", "select 1")  # answers itself, then starts a server
    _wait_for_server(serve_env)
    cases = [
        (("sql", "select name, count(*) as n from kernels group by 1 order by 1"), None),
        (("sql", "--format", "csv", "select * from kernel_summary order by all"), None),
        (
            ("sql", "--format", "json", "-"),
            "select count(*) from runs; select * from gpu_timeline order by all",
        ),
        (("sql",), "select 1; drop table kernels;"),  # refused before anything runs: exit 1
        (("sql",), "   "),  # no statement: click's usage error (exit 2), from the CLI
        (("sql", "select * from nosuch"), None),
        (("sql", "select * from read_csv('/etc/passwd')"), None),
        (("sql", "select 1; select 2"), None),
        (("sql", "select 1/0 as x, 'a\nb' as y"), None),
    ]
    for args, stdin in cases:
        expected = _cli(serve_env, "--warehouse", wh, *args, stdin=stdin, off=True)
        assert _cli(serve_env, "--warehouse", wh, *args, stdin=stdin) == expected, args
    missing = ("--warehouse", str(tmp_path / "nope"), "sql", "select 1")
    assert _cli(serve_env, *missing) == _cli(serve_env, *missing, off=True)
    assert _cli(serve_env, *missing)[2].startswith("error: no warehouse")


def test_server_is_the_one_answering_and_sees_new_runs(tmp_path, serve_env, capsys):
    first = write_trace(tmp_path / "a.json.gz", simple_events())
    other = simple_events()
    other[0]["dur"] += 1  # another file: another run
    second = write_trace(tmp_path / "b.json.gz", other)
    wh = str(tmp_path / "wh")
    assert _cli(serve_env, "--warehouse", wh, "ingest", str(first))[0] == 0  # ingest starts a server
    _wait_for_server(serve_env)
    assert (
        client.ask_server(["--warehouse", wh, "sql", "--format", "csv", "select count(*) as n from runs"])
        == 0
    )
    assert capsys.readouterr().out.splitlines() == ["n", "1"]
    assert _cli(serve_env, "--warehouse", wh, "ingest", str(second), off=True)[0] == 0
    assert (
        client.ask_server(["--warehouse", wh, "sql", "--format", "csv", "select count(*) as n from runs"])
        == 0
    )
    assert capsys.readouterr().out.splitlines() == ["n", "2"]  # published after the server opened it
    # declined: the CLI answers (no warehouse there)
    assert client.ask_server(["--warehouse", str(tmp_path / "nope"), "sql", "select 1"]) is None
    code, out, _ = _cli(serve_env, "serve", "--stop")
    assert code == 0 and out.strip() == "stopped"
    deadline = time.monotonic() + 10
    while (Path(serve_env["TRACEHOUSE_SERVE_DIR"]) / f"{client.identity()}.sock").exists():
        assert time.monotonic() < deadline, "the server did not leave"
        time.sleep(0.1)
    assert client.ask_server(["--warehouse", wh, "sql", "select 1"]) is None  # none running: the CLI answers


def test_identity_follows_the_settings_and_code(tmp_path, monkeypatch):
    monkeypatch.delenv("TRACEHOUSE_SITE_RULES", raising=False)
    base = client.identity()
    rules = tmp_path / "rules.csv"
    rules.write_text("x\n")
    monkeypatch.setenv("TRACEHOUSE_SITE_RULES", str(rules))
    with_rules = client.identity()
    assert with_rules != base
    rules.write_text("x, edited\n")
    assert client.identity() != with_rules  # the file's content (its size and mtime) counts
    monkeypatch.delenv("TRACEHOUSE_SITE_RULES")
    assert client.identity() == base
    view = view_files()["kernel_summary"]
    stat = view.stat()
    try:
        os.utime(view, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))
        assert client.identity() != base  # an edited view never reaches an old server
    finally:
        os.utime(view, ns=(stat.st_atime_ns, stat.st_mtime_ns))


def test_no_server_in_a_folder_others_can_enter(tmp_path, monkeypatch):
    shared = tmp_path / "open"
    shared.mkdir()
    shared.chmod(0o777)
    monkeypatch.setenv("TRACEHOUSE_SERVE_DIR", str(shared))
    assert client.socket_path() is None
    monkeypatch.setenv("TRACEHOUSE_SERVE", "off")
    assert not client.serving_enabled()

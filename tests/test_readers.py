"""The long-lived readers (issue 15): `tracehouse sql` reading a script from stdin, `tracehouse shell` on a
pipe, the Python Session holding one connection; the read-only check on DuckDB's parser; a reader process
that imports neither sqlglot nor pyarrow; the quick exit (entry)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from tracebuilder import simple_events, write_trace

from tracehouse.cli import main

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def wh(tmp_path_factory):
    from click.testing import CliRunner

    root = tmp_path_factory.mktemp("readers")
    trace = write_trace(root / "t.json.gz", simple_events())
    result = CliRunner().invoke(
        main, ["--warehouse", str(root / "wh"), "ingest", "--no-analyses", str(trace)]
    )
    assert result.exit_code == 0, result.output
    return root / "wh"


def _run(cli_runner, wh, args, stdin=None):
    return cli_runner.invoke(main, ["--warehouse", str(wh), *args], input=stdin)


# ---- tracehouse sql, from stdin ------------------------------------------------------------------------


def test_sql_reads_several_statements_from_stdin(wh, cli_runner):
    script = (
        "select count(*) as n from kernels;\n"
        "-- a comment; with a semicolon\n"
        "select name from kernels order by start_ns;\n"
        "select ';' as semi;"
    )
    result = _run(cli_runner, wh, ["sql", "--format", "csv"], stdin=script)
    assert result.exit_code == 0, result.output
    assert result.stdout.split("\n\n") == [
        "n\n2",
        "name\nvoid gemm_kernel<1>()\nvoid rmsnorm_kernel()",
        "semi\n;\n",
    ]
    dash = _run(cli_runner, wh, ["sql", "-", "--format", "csv"], stdin=script)
    assert dash.stdout == result.stdout


def test_sql_script_json_is_one_document_per_query(wh, cli_runner):
    result = _run(cli_runner, wh, ["sql", "--format", "json"], stdin="select 1 as a; select 2 as b;")
    assert result.exit_code == 0, result.output
    assert [json.loads(part) for part in result.stdout.split("\n\n")] == [[{"a": 1}], [{"b": 2}]]


@pytest.mark.parametrize(
    "script",
    [
        "select 1 as first; drop view kernels; select 2 as last;",
        "select 1 as first; select * from read_csv('/etc/passwd');",
        "select 1 as first; copy kernels to 'x.csv';",
        "select 1 as first; selct oops;",
    ],
)
def test_sql_script_with_a_write_runs_nothing(wh, cli_runner, script):
    result = _run(cli_runner, wh, ["sql"], stdin=script)
    assert result.exit_code == 1
    assert result.stdout == ""  # not even the first, harmless query ran
    assert result.stderr.startswith("error: ") and len(result.stderr.strip().splitlines()) == 1
    after = _run(cli_runner, wh, ["sql", "select count(*) as n from kernels", "--format", "csv"])
    assert after.stdout.splitlines() == ["n", "2"]


def test_sql_empty_stdin_is_a_usage_error(wh, cli_runner):
    result = _run(cli_runner, wh, ["sql"], stdin="  \n-- nothing\n")
    assert result.exit_code == 2
    assert "no query given" in result.stderr


# ---- tracehouse shell, on a pipe ---------------------------------------------------------------------


def test_shell_on_a_pipe(wh, cli_runner):
    script = (
        "select count(*) as n\n  from kernels;\n"
        ".tables\n"
        "select nope from kernels;\n"
        "drop view kernels;\n"
        "select 7 as after_errors;\n"
        ".quit\n"
        "select 8 as never;\n"
    )
    result = _run(cli_runner, wh, ["shell", "--format", "csv"], stdin=script)
    assert result.exit_code == 1  # some query failed: a script's caller is told
    out = result.stdout
    assert out.startswith("n\n2\n")
    assert "kernel_summary,VIEW" in out and "kernels,VIEW" in out
    assert out.rstrip().endswith("after_errors\n7") and "never" not in out
    errors = result.stderr.strip().splitlines()
    assert len(errors) == 2 and all(e.startswith("error: ") for e in errors)
    assert "DROP" in errors[1]
    assert (
        _run(cli_runner, wh, ["sql", "select count(*) as n from kernels", "--format", "csv"]).stdout
        == "n\n2\n"
    )


def test_shell_on_a_pipe_all_good_exits_0(wh, cli_runner):
    result = _run(cli_runner, wh, ["shell", "--format", "csv"], stdin="select 1 as a; select 2 as b;\n")
    assert result.exit_code == 0, result.output
    assert result.stdout == "a\n1\nb\n2\n"


def test_shell_last_query_without_semicolon_is_said(wh, cli_runner):
    result = _run(cli_runner, wh, ["shell"], stdin="select 1 as a")
    assert result.exit_code == 1 and "no `;`" in result.stderr


def test_shell_refuses_a_missing_warehouse(tmp_path, cli_runner):
    result = cli_runner.invoke(main, ["--warehouse", str(tmp_path / "nope"), "shell"], input="select 1;")
    assert result.exit_code == 1 and result.stderr.startswith("error: no warehouse")
    assert not (tmp_path / "nope").exists()


# ---- the Python API -----------------------------------------------------------------------------------


def test_session_answers_many_questions_on_one_connection(wh):
    from tracehouse.warehouse.session import Session

    with Session(wh) as th:
        con = th.con
        columns, rows = th.sql("select name, dur_ns from kernels order by start_ns")
        assert columns == ["name", "dur_ns"]
        assert rows == [("void gemm_kernel<1>()", 5250), ("void rmsnorm_kernel()", 875)]
        table = th.arrow("select name from kernels where dur_ns > ? order by name", [1000])
        assert table.column("name").to_pylist() == ["void gemm_kernel<1>()"]
        assert th.con is con  # one connection for all of them


def test_session_refuses_what_sql_refuses(wh):
    from tracehouse.warehouse.session import Session

    from tracehouse.errors import QueryError, QueryRefused

    with Session(wh) as th:
        for bad in (
            "drop view kernels",
            "select * from read_parquet('/etc/*')",
            "select 1; select 2",
            "set enable_external_access = true",
        ):
            with pytest.raises(QueryRefused):
                th.sql(bad)
            with pytest.raises(QueryRefused):
                th.arrow(bad)
        with pytest.raises(QueryError):
            th.sql("select nope from kernels")
        with pytest.raises(QueryError):
            th.arrow("select nope from kernels")
        assert th.sql("select count(*) from kernels")[1] == [(2,)]  # still usable after errors


def test_session_sees_a_run_ingested_after_it_opened(tmp_path):
    from tracehouse.ingest.load import ingest_paths
    from tracehouse.warehouse.session import Session
    from tracehouse.warehouse.store import Warehouse

    store = Warehouse(tmp_path / "wh")
    first = write_trace(tmp_path / "a" / "a.json.gz", simple_events())
    [a] = ingest_paths(store, [first], analyse=False)
    with Session(store) as th:
        assert th.sql("select run_id from runs")[1] == [(a.run_id,)]
        events = simple_events()
        events[0]["dur"] = 16.0  # another file, another run
        second = write_trace(tmp_path / "b" / "b.json.gz", events)
        [b] = ingest_paths(store, [second], analyse=False)
        assert b.run_id != a.run_id
        assert sorted(th.sql("select run_id from runs")[1]) == sorted([(a.run_id,), (b.run_id,)])
        assert th.sql("select count(*) from kernels")[1] == [(4,)]


def test_session_of_no_warehouse(tmp_path):
    from tracehouse.warehouse.session import Session

    from tracehouse.errors import TracehouseError

    with pytest.raises(TracehouseError, match="no warehouse"):
        Session(tmp_path / "nope")
    assert not (tmp_path / "nope").exists()


def test_split_statements():
    from tracehouse.warehouse.session import split_statements

    assert split_statements("") == [] and split_statements(" -- only a comment\n") == []
    assert [s.rstrip(";") for s in split_statements("select 1; select ';' ;\n/* ; */ select 2")] == [
        "select 1",
        "select ';' ",
        "/* ; */ select 2",
    ]


# ---- the read-only check (DuckDB's parser) ------------------------------------------------------------


@pytest.mark.parametrize(
    "query",
    [
        "with t as (select * from read_csv('/etc/passwd')) select * from t",
        "select * from kernels where name in (select name from read_text('/etc/passwd'))",
        "select (select count(*) from glob('/*')) as n",
        "select * from kernels, lateral (select * from parquet_metadata('/x.parquet'))",
        "explain select * from read_blob('/etc/passwd')",
        'select * from "/tmp/x.parquet"',
        "explain drop view kernels",
        "explain analyze select 1",
        "pivot kernels on kind using sum(dur_ns)",
        "SET spark.sql.ansi.enabled = true",
    ],
)
def test_read_only_check_refuses(query):
    from tracehouse.warehouse.query import check_read_only

    from tracehouse.errors import QueryRefused

    with pytest.raises(QueryRefused):
        check_read_only(query)


def test_read_only_check_keeps_a_syntax_error_a_syntax_error():
    from tracehouse.warehouse.query import check_read_only

    from tracehouse.errors import QueryError, QueryRefused

    with pytest.raises(QueryError, match='near "selct"') as err:
        check_read_only("selct * from kernels")
    assert not isinstance(err.value, QueryRefused)


def test_user_rule_variables_are_the_modules():
    from tracehouse.warehouse.catalog import USER_RULE_ENVS
    from tracehouse.warehouse.peaks import USER_PEAKS_ENV
    from tracehouse.warehouse.site_rules import USER_SITE_RULES_ENV

    assert set(USER_RULE_ENVS) == {USER_PEAKS_ENV, USER_SITE_RULES_ENV}


# ---- the reader process -------------------------------------------------------------------------------


def test_sql_process_imports_neither_sqlglot_nor_pyarrow(wh):
    """What made `tracehouse sql` of a simple query cost 0.23 s: sqlglot (the read-only check, the view
    order) and pyarrow (the declared schema, the rule files) are for building, not for reading."""
    code = (
        "import sys; from tracehouse.cli import main\n"
        "try:\n    main(['--warehouse', sys.argv[1], 'sql', 'select count(*) from kernels'])\n"
        "except SystemExit:\n    pass\n"
        "print(sorted(m for m in ('sqlglot', 'pyarrow', 'numpy', 'jinja2') if m in sys.modules))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, str(wh)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**__import__("os").environ, "PYTHONPATH": str(ROOT)},
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "[]"


def test_sql_process_imports_its_own_command_only(wh):
    """A command's module is imported when it runs: `sql` neither imports the other commands' modules nor
    what they call (ingest/, reports/, synth/)."""
    code = (
        "import sys; from tracehouse.cli import main\n"
        "try:\n    main(['--warehouse', sys.argv[1], 'sql', 'select count(*) from kernels'])\n"
        "except SystemExit:\n    pass\n"
        "print(sorted(m for m in sys.modules if m.startswith(('tracehouse.commands.', 'ingest', 'reports', "
        "'synth'))))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, str(wh)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**__import__("os").environ, "PYTHONPATH": str(ROOT)},
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "['tracehouse.commands.common', 'tracehouse.commands.sql']"


def test_sigint_cancels_the_running_query_and_exits_130(wh):
    """Ctrl-C during a long query: DuckDB stops it (the process exits at once, not when the query would
    have ended: a cross join of 10^11 rows runs for minutes), one line on stderr, no traceback, exit 130."""
    import os
    import signal
    import time

    proc = subprocess.Popen(
        [
            sys.executable,
            str(ROOT / "cli.py"),
            "--warehouse",
            str(wh),
            "sql",
            "select sum(a.range * b.range) from range(100000) a, range(1000000) b",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    time.sleep(3)  # imported, connected and inside the query (on a loaded machine too)
    assert proc.poll() is None, proc.communicate()
    sent = time.monotonic()
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert time.monotonic() - sent < 20
    assert proc.returncode == 130, err
    assert err.strip() == "interrupted: the query was cancelled" and out == ""


def test_entry_exits_with_the_commands_code_and_flushes(wh, tmp_path):
    env = {**__import__("os").environ, "PYTHONPATH": str(ROOT)}
    ok = subprocess.run(
        [
            sys.executable,
            str(ROOT / "cli.py"),
            "--warehouse",
            str(wh),
            "sql",
            "--format",
            "csv",
            "select range as i from range(20000)",
        ],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.splitlines()[0] == "i" and ok.stdout.splitlines()[-1] == "19999"  # all of it, flushed
    bad = subprocess.run(
        [sys.executable, str(ROOT / "cli.py"), "--warehouse", str(tmp_path / "nope"), "sql", "select 1"],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert (
        bad.returncode == 1 and bad.stderr.startswith("error: no warehouse") and "Traceback" not in bad.stderr
    )
    usage = subprocess.run(
        [sys.executable, str(ROOT / "cli.py"), "--warehouse", str(wh), "sql", "--format", "nope"],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert usage.returncode == 2

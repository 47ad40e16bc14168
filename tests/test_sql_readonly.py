"""Ad-hoc SQL is read-only: it cannot change the warehouse or read files outside it."""

from __future__ import annotations

import pytest
from tracebuilder import simple_events, write_trace

from tracehouse.cli import main


@pytest.fixture(scope="module")
def warehouse(tmp_path_factory):
    from click.testing import CliRunner

    root = tmp_path_factory.mktemp("ro")
    trace = write_trace(root / "t.json.gz", simple_events())
    result = CliRunner().invoke(main, ["--warehouse", str(root / "wh"), "ingest", str(trace)])
    assert result.exit_code == 0, result.output
    return root / "wh"


def _sql(runner, wh, query, *extra):
    return runner.invoke(main, ["--warehouse", str(wh), "sql", query, *extra])


REFUSED = [
    "insert into kernels select * from kernels",
    "update kernels set name = 'x'",
    "delete from kernels",
    "create table x as select 1",
    "drop view kernels",
    "copy kernels to 'out.csv'",
    "copy (select 1) to '/tmp/x.csv'",
    "attach '/tmp/other.duckdb' as other",
    "detach other",
    "install httpfs",
    "load httpfs",
    "set enable_external_access = true",
    "pragma version",
    "export database '/tmp/dump'",
    "select * from read_csv('/etc/passwd')",
    "select * from read_text('/etc/passwd')",
    "select * from read_blob('/etc/passwd')",
    "select * from '/etc/passwd'",
    "select * from glob('/*')",
    "select * from read_parquet('/tmp/*.parquet')",
    "select 1; drop table kernels",
    "call pragma_version()",
    "vacuum",
    "checkpoint",
    "use memory",
]


@pytest.mark.parametrize("query", REFUSED)
def test_refused(warehouse, cli_runner, query):
    result = _sql(cli_runner, warehouse, query)
    assert result.exit_code == 1, result.output
    assert result.stderr.startswith("error: ")
    assert "Traceback" not in result.output
    # and the warehouse is untouched
    after = _sql(cli_runner, warehouse, "select count(*) as n from kernels", "--format", "csv")
    assert after.stdout.splitlines() == ["n", "2"]


@pytest.mark.parametrize(
    "query",
    [
        "select count(*) from kernels",
        "with k as (select * from kernels) select name from k order by name",
        "show tables",
        "describe kernels",
        "summarize kernels",
        "explain select * from kernels",
        "select run_id, labels from runs",
    ],
)
def test_allowed(warehouse, cli_runner, query):
    result = _sql(cli_runner, warehouse, query)
    assert result.exit_code == 0, result.output


def test_formats(warehouse, cli_runner):
    import json

    result = _sql(
        cli_runner, warehouse, "select name, dur_ns from kernels order by start_ns", "--format", "json"
    )
    assert json.loads(result.stdout) == [
        {"name": "void gemm_kernel<1>()", "dur_ns": 5250},
        {"name": "void rmsnorm_kernel()", "dur_ns": 875},
    ]
    result = _sql(
        cli_runner, warehouse, "select name, dur_ns from kernels order by start_ns", "--format", "csv"
    )
    assert result.stdout.splitlines() == [
        "name,dur_ns",
        "void gemm_kernel<1>(),5250",
        "void rmsnorm_kernel(),875",
    ]


def test_bad_query_is_one_line(warehouse, cli_runner):
    result = _sql(cli_runner, warehouse, "select nope from kernels")
    assert result.exit_code == 1
    assert len(result.stderr.strip().splitlines()) == 1

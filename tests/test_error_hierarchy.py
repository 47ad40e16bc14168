"""Expected failures are TracehouseErrors: the CLI prints them as one line and exits 1.

SparkUnavailable (no pyspark, no Java) and the synthesizer's unknown-argument errors were outside the
hierarchy (RuntimeError, ValueError): a caller other than the CLI's own wrapper got a traceback.
"""

from __future__ import annotations

import builtins

import pytest
from click.testing import CliRunner
from tracehouse.synth import write_scenario
from tracehouse.synth.situations import write_situation
from tracehouse.warehouse import spark
from tracehouse.warehouse.store import Warehouse

from tracehouse import cli
from tracehouse.errors import InvalidArgument, SparkUnavailable, TracehouseError


def test_spark_unavailable_is_an_expected_error(monkeypatch):
    assert issubclass(SparkUnavailable, TracehouseError) and SparkUnavailable.hint
    assert spark.SparkUnavailable is SparkUnavailable  # the name callers already import from warehouse.spark
    real_import = builtins.__import__

    def no_pyspark(name, *args, **kwargs):
        if name.startswith("pyspark"):
            raise ImportError(f"No module named {name!r}")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_pyspark)
    with pytest.raises(SparkUnavailable, match="pyspark is not installed"):
        spark.spark_session()


def test_cli_prints_spark_unavailable_as_one_line(monkeypatch, tmp_path):
    def refuse(*args, **kwargs):
        raise SparkUnavailable("pyspark is not installed: pip install 'tracehouse[spark]' (needs Java 17+)")

    monkeypatch.setattr(spark, "spark_session", refuse)
    wh = tmp_path / "wh"
    Warehouse(wh).init()
    result = CliRunner().invoke(cli.main, ["--warehouse", str(wh), "sql", "--engine", "spark", "select 1"])
    assert result.exit_code == 1, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    expected = (
        "error: pyspark is not installed: pip install 'tracehouse[spark]' (needs Java 17+) "
        "(or use --engine duckdb)"
    )
    assert lines == [expected], result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda out: write_scenario("no-such-scenario", out), "unknown scenario"),
        (lambda out: write_scenario("training", out, vendor="intel"), "unknown vendor"),
        (lambda out: write_scenario("training", out, ranks=0), ">= 1"),
        (lambda out: write_situation("no-such-situation", out), "unknown situation"),
    ],
)
def test_synth_argument_errors_are_expected_errors(tmp_path, call, message):
    with pytest.raises(InvalidArgument, match=message) as info:
        call(tmp_path / "out")
    assert isinstance(info.value, TracehouseError) and isinstance(info.value, ValueError)
    assert not (tmp_path / "out").exists()  # refused before anything is written

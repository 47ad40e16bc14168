"""tracehouse diff reads each run's figures (warehouse.diff_facts.run_facts) from views kept per run
(`materialized: per_run`, derived after ingest: warehouse.derived). The kept path gives the same bytes as
computing every figure from the tables, in every format."""

from __future__ import annotations

import pytest
from tracehouse.reports.diff import build_diff, render_diff
from tracehouse.warehouse.catalog import connect, is_kept, per_run_views
from tracehouse.warehouse.diff_facts import FACT_VIEWS, run_facts


def test_the_diffs_facts_are_kept_per_run(synth_warehouse):
    """Every view run_facts reads is kept per run, and a derived run's facts read them kept."""
    wh, runs = synth_warehouse
    assert set(FACT_VIEWS) <= set(per_run_views())
    for run_id in runs.values():
        con = connect(wh, runs=[run_id])
        assert all(is_kept(con, view, run_id) for view in FACT_VIEWS)
        facts = run_facts(con, run_id)
        assert facts["run_id"] == run_id and facts["rank_steps"] > 0 and facts["kernels"]
        assert facts == run_facts(connect(wh, runs=[run_id], kept=False), run_id)


@pytest.fixture(scope="module")
def decode_vs_prefill(synth_warehouse):
    """The diff of decode and prefill built twice, once with every figure computed from the tables and once
    from the kept rows: built once for the module, each format's test renders both."""
    wh, runs = synth_warehouse
    a, b = runs["serving-decode"], runs["serving-prefill"]
    direct = build_diff(connect(wh, kept=False), a, b)  # every figure from the tables
    kept = build_diff(connect(wh), a, b)
    return direct, kept


@pytest.mark.parametrize("fmt", ["md", "html", "json"])
def test_kept_diff_is_byte_identical_to_the_diff_computed_from_the_tables(decode_vs_prefill, fmt):
    direct, kept = (render_diff(diff, fmt) for diff in decode_vs_prefill)
    assert kept == direct
    assert "GEMM" in direct or "gemm" in direct  # a real diff, not two empty pages


def test_cli_diff_of_derived_runs(synth_warehouse, cli_runner):
    from tracehouse import cli

    wh, runs = synth_warehouse
    a, b = runs["serving-decode"], runs["training"]
    expected = render_diff(build_diff(connect(wh, kept=False), a, b), "json")
    res = cli_runner.invoke(cli.main, ["--warehouse", str(wh.root), "diff", a, b, "--format", "json"])
    assert res.exit_code == 0, res.output
    assert res.stdout == expected

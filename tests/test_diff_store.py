"""tracehouse diff reads each run's figures from the diff store (warehouse.diff_facts.stored_facts): stored at
ingest (with the report's analyses) or by the first diff, then read back. The stored path gives the same
bytes as computing on the connection (the diff as it was before the store), in every format."""

from __future__ import annotations

import json
import shutil

import pytest

from reports.diff import build_diff, render_diff
from warehouse import diff_facts as diff_module
from warehouse.catalog import connect
from warehouse.diff_facts import facts_dir, run_facts, stored_facts


def test_ingest_stores_each_runs_diff_facts(synth_warehouse):
    wh, runs = synth_warehouse
    for run_id in runs.values():
        facts = json.loads((facts_dir(wh) / f"{run_id}.json").read_text())
        assert facts["run_id"] == run_id and facts["rank_steps"] > 0 and facts["kernels"]


@pytest.fixture(scope="module")
def decode_vs_prefill(synth_warehouse):
    """The diff of decode and prefill built twice, once with every figure from the views on a connection
    and once from the diff store: built once for the module, each format's test renders both."""
    wh, runs = synth_warehouse
    con = connect(wh)
    a, b = runs["serving-decode"], runs["serving-prefill"]
    direct = build_diff(con, a, b)  # every figure from the views, on con
    stored = build_diff(con, a, b, warehouse=wh)
    con.close()
    return direct, stored


@pytest.mark.parametrize("fmt", ["md", "html", "json"])
def test_stored_diff_is_byte_identical_to_the_diff_computed_on_the_connection(decode_vs_prefill, fmt):
    direct, stored = (render_diff(diff, fmt) for diff in decode_vs_prefill)
    assert stored == direct
    assert "GEMM" in direct or "gemm" in direct  # a real diff, not two empty pages


def test_stored_facts_equal_the_views_and_a_stored_run_is_not_recomputed(own_synth_warehouse, monkeypatch):
    wh, runs = own_synth_warehouse
    shutil.rmtree(facts_dir(wh))  # as a run ingested with --no-analyses
    run_id = runs["training"]
    con = connect(wh, runs=[run_id])
    expected = json.loads(json.dumps(run_facts(con, run_id), default=diff_module._plain))
    assert stored_facts(wh, run_id) == expected  # computed (focused, steps materialized), stored
    assert (facts_dir(wh) / f"{run_id}.json").is_file()

    def no_compute(*args, **kwargs):
        raise AssertionError("a stored run's facts were computed again")

    monkeypatch.setattr(diff_module, "run_facts", no_compute)
    assert stored_facts(wh, run_id) == expected


def test_cli_diff_reads_the_store(own_synth_warehouse, cli_runner, monkeypatch):
    from tracehouse import cli

    wh, runs = own_synth_warehouse
    a, b = runs["serving-decode"], runs["training"]
    expected = render_diff(build_diff(connect(wh), a, b), "json")

    def no_compute(*args, **kwargs):
        raise AssertionError("the CLI computed a diff fact of a run whose facts are stored")

    monkeypatch.setattr(diff_module, "run_facts", no_compute)
    res = cli_runner.invoke(cli.main, ["--warehouse", str(wh.root), "diff", a, b, "--format", "json"])
    assert res.exit_code == 0, res.output
    assert res.stdout == expected


def test_a_killed_writers_partial_file_is_removed_and_never_read(own_synth_warehouse):
    wh, runs = own_synth_warehouse
    run_id = runs["training"]
    folder = facts_dir(wh)
    (folder / f"{run_id}.json").unlink()
    dead = folder / f".{run_id}.999999999.tmp"  # no such process
    dead.write_text("{not json")
    facts = stored_facts(wh, run_id)
    assert facts["run_id"] == run_id and not dead.exists()
    assert json.loads((folder / f"{run_id}.json").read_text()) == facts
    assert not list(folder.glob(".*"))

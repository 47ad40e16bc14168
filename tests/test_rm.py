"""`tracehouse rm RUN...` (issue 36 item 3): a run removed whole (tables, runs row, derived rows, its lock
and log), asked first on a terminal, refused without one unless --yes, nothing removed when a RUN is
unknown; and a removal killed midway leaves the run whole or gone, never part of it."""

from __future__ import annotations

import os

import pytest
from tracehouse.warehouse.catalog import connect, derived_root
from tracehouse.warehouse.remove import remove_runs
from tracehouse.warehouse.store import TABLES

from tracehouse.cli import main


def _cli(cli_runner, wh, *args, input=None):
    return cli_runner.invoke(main, ["--warehouse", str(wh.root), *args], input=input)


def _runs_by_age(wh) -> list[str]:
    con = connect(wh)
    rows = con.execute("SELECT run_id FROM runs ORDER BY ingested_at DESC, run_id DESC").fetchall()
    con.close()
    return [r[0] for r in rows]


def _files(wh) -> list[str]:
    return sorted(str(p.relative_to(wh.root)) for p in wh.root.rglob("*") if p.is_file())


def _left_of(wh, run_id: str) -> list:
    """Every folder or file of the warehouse that names the run (tables, derived rows, lock, log)."""
    return [p for p in wh.root.rglob(f"*{run_id}*")]


def test_rm_latest_removes_the_run_whole_and_latest_moves_back(own_synth_warehouse, cli_runner):
    wh, _ = own_synth_warehouse
    latest, before = _runs_by_age(wh)[:2]
    con = connect(wh)
    trend_runs = con.execute("SELECT count(DISTINCT run_id) FROM run_metrics").fetchone()[0]
    ranks = con.execute("SELECT n_ranks FROM runs WHERE run_id = ?", [latest]).fetchone()[0]
    rows = sum(
        con.execute(f"SELECT count(*) FROM {t} WHERE run_id = ?", [latest]).fetchone()[0] for t in TABLES
    )
    con.close()
    kept = list(derived_root(wh).glob(f"*/*/run_id={latest}"))
    assert kept, "the shared warehouse is derived: the run has kept rows to remove"

    result = _cli(cli_runner, wh, "rm", "latest", "--yes")

    assert result.exit_code == 0, result.output
    line = result.stdout.strip()
    assert line.startswith(f"removed {latest}\t{ranks} rank(s), {rows + 1} row(s) in "), line
    assert line.endswith(f", {len(kept)} derived view(s)")
    assert _left_of(wh, latest) == []
    assert latest not in _runs_by_age(wh)
    assert _cli(cli_runner, wh, "runs", "--format", "csv").stdout.count(latest[:12]) == 0
    con = connect(wh)
    assert (
        con.execute("SELECT run_id FROM runs ORDER BY ingested_at DESC, run_id DESC").fetchone()[0] == before
    )
    assert con.execute("SELECT count(DISTINCT run_id) FROM run_metrics").fetchone()[0] == trend_runs - 1
    assert con.execute("SELECT count(*) FROM kernels WHERE run_id = ?", [latest]).fetchone()[0] == 0
    con.close()
    check = _cli(cli_runner, wh, "check")
    assert check.exit_code == 0 and "all invariants hold" in check.output


def test_rm_of_an_unknown_run_changes_nothing(own_synth_warehouse, cli_runner):
    wh, _ = own_synth_warehouse
    files = _files(wh)
    # one known run and one unknown: every RUN is found before anything goes
    result = _cli(cli_runner, wh, "rm", "latest", "ffff0000", "--yes")
    assert result.exit_code == 1
    assert result.output.strip().splitlines() == [
        "error: no run 'ffff0000' in the warehouse (list runs with `tracehouse runs`)"
    ]
    assert _files(wh) == files


def test_rm_without_a_terminal_needs_yes(own_synth_warehouse, cli_runner):
    wh, _ = own_synth_warehouse
    files = _files(wh)
    result = _cli(cli_runner, wh, "rm", "latest")
    assert result.exit_code == 1
    [line] = result.output.strip().splitlines()
    assert line.startswith("error: rm removes run ") and line.endswith(
        "add --yes to do it without a terminal"
    )
    assert _files(wh) == files


def test_rm_asks_on_a_terminal(own_synth_warehouse, cli_runner, monkeypatch):
    wh, _ = own_synth_warehouse
    monkeypatch.setattr("tracehouse.commands.rm.on_terminal", lambda: True)
    latest = _runs_by_age(wh)[0]
    files = _files(wh)
    no = _cli(cli_runner, wh, "rm", "latest", input="n\n")
    assert no.exit_code == 1 and "nothing removed" in no.output and _files(wh) == files
    yes = _cli(cli_runner, wh, "rm", "latest", input="y\n")
    assert yes.exit_code == 0, yes.output
    assert f"remove run {latest}?" in yes.output and f"removed {latest}\t" in yes.output
    assert latest not in _runs_by_age(wh)


@pytest.mark.parametrize("dies_at", [1, 3])
def test_a_removal_killed_midway_leaves_the_run_whole_or_gone(own_synth_warehouse, monkeypatch, dies_at):
    """Killed at the first rename (the runs row): the run is whole; at a later one: the run is gone for
    readers, and the next removal (or publish) deletes what was left."""
    wh, _ = own_synth_warehouse
    latest, other = _runs_by_age(wh)[:2]
    real_replace = os.replace
    calls = []

    def dying_replace(src, dst):
        calls.append(dst)
        if len(calls) == dies_at:
            raise KeyboardInterrupt("killed midway")
        return real_replace(src, dst)

    monkeypatch.setattr(os, "replace", dying_replace)
    with pytest.raises(KeyboardInterrupt):
        remove_runs(wh, [latest])
    monkeypatch.setattr(os, "replace", real_replace)
    con = connect(wh)
    n_ranks, seen = con.execute(
        "SELECT n_ranks, (SELECT count(DISTINCT rank) FROM kernels k WHERE k.run_id = r.run_id) "
        "FROM runs r WHERE run_id = ?",
        [latest],
    ).fetchone() or (None, None)
    con.close()
    if dies_at == 1:
        assert n_ranks == seen and n_ranks >= 2  # whole
    else:
        assert n_ranks is None  # gone
    remove_runs(wh, [other])  # the next removal cleans what the killed one left
    if dies_at > 1:
        assert _left_of(wh, latest) == []
    assert not any(wh.staging_dir.iterdir())

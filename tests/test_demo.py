"""`tracehouse demo`, the README's main command, end to end."""

from __future__ import annotations

from pathlib import Path

from tracehouse.synth.history import commit_sha
from tracehouse.warehouse.catalog import connect
from tracehouse.warehouse.store import Warehouse

from tracehouse.cli import main
from tracehouse.demo import REGRESSION_AT


def test_demo_builds_a_warehouse_and_reports(tmp_path, cli_runner):
    folder = tmp_path / "demo"
    result = cli_runner.invoke(main, ["demo", str(folder)])
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert f"warehouse: {folder / 'warehouse'}" in out
    reports = [line.split(None, 1)[1] for line in out.splitlines() if line.startswith("report:")]
    assert any(r.endswith(".md") and "run-" in r for r in reports)
    assert any(r.endswith(".html") and "run-" in r for r in reports)
    for report in reports:
        assert (folder / "reports").is_dir() and Path(report).read_text()
    con = connect(Warehouse(folder / "warehouse"))
    assert con.execute("SELECT count(*), count(DISTINCT series) FROM runs").fetchone() == (24, 2)
    # the demo leaves a derived warehouse: every run's kept rows are there for the commands that follow
    from tracehouse.warehouse.derived import is_derived

    run_ids = [r for (r,) in con.execute("SELECT run_id FROM runs").fetchall()]
    assert all(is_derived(Warehouse(folder / "warehouse"), r) for r in run_ids)
    assert con.execute("SELECT count(*) FROM invariant_violations").fetchone()[0] == 0
    assert commit_sha(REGRESSION_AT) in out  # the summary names the commit of the injected regression

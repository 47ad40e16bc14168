"""Every finding of the run report, in HTML and in Markdown, names its window (rank, step, start–end in the
trace's own time base) and the export command that opens exactly it (issue 18)."""

from __future__ import annotations

import html

import pytest
from tracehouse.reports.run import build_run_report
from tracehouse.warehouse.engine import open as open_connection


@pytest.fixture(scope="module")
def stall(warehouses):
    from warehouses import situation

    built = warehouses.get([situation("dataloader-stall")], derived=True)
    wh, run_id = built.warehouse, built.run_ids[0]
    con = open_connection(wh, runs=[run_id])
    report = build_run_report(con, run_id)
    con.close()
    return wh, run_id, report


def _window_text(w) -> str:
    who = "every rank" if w.rank is None else f"rank {w.rank}"
    step = "" if w.step is None else f", step {w.step}"
    return f"window: {who}{step}, {w.start_ns}–{w.end_ns} ns (trace time); open it: "


@pytest.mark.parametrize("fmt", ["md", "html"])
def test_every_finding_names_its_window_and_command(stall, fmt, cli_runner, tmp_path):
    from tracehouse.cli import main

    wh, run_id, report = stall
    findings = (
        [t.where for t in report.takeaways]
        + [q.where for q in report.quality]
        + [report.step.window, report.step.gap_window]
    )
    assert report.takeaways and report.quality and all(f is not None for f in findings)
    out = tmp_path / f"r.{fmt}"
    result = cli_runner.invoke(
        main, ["--warehouse", str(wh.root), "report", "--run", run_id, "--format", fmt, "-o", str(out)]
    )
    assert result.exit_code == 0, result.output
    text = out.read_text()
    for f in findings:
        shown = _window_text(f) + (
            f"<code>{html.escape(f.command, quote=False)}</code>" if fmt == "html" else f"`{f.command}`"
        )
        if fmt == "html":
            shown = shown.replace("–", "–")
        assert shown in text or html.escape(shown, quote=True) in text, (f, fmt)
        # exactly the window: a step, a --window START:END, or (a rank's or the run's findings) the whole rank / run
        # (that it opens exactly those slices: test_export's test_report_findings_name_their_window_and_...)
        if "--step" in f.command:
            assert f.step is not None and f"--step {f.step}" in f.command
        elif "--window" in f.command:
            assert f"--window {f.start_ns}:{f.end_ns}" in f.command
        assert f"--rank {f.rank}" in f.command if f.rank is not None else "--rank" not in f.command

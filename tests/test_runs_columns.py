"""`tracehouse runs` prints each figure column with fixed decimals, so the decimal points line up and a long
step keeps its µs: 12920.244 ms (a float printed as 12920.2, to 100 µs) over 5.980; GPU busy 100.0 over
89.4. JSON keeps the plain numbers."""

from __future__ import annotations

import json
import re
from datetime import datetime
from decimal import Decimal

import pytest
from tracehouse.reports.runs_table import Headline, narrow_rows


def _run(run_id: str) -> dict:
    return {
        "run_id": run_id,
        "ingested_at": datetime(2026, 1, 2, 3, 4),
        "framework": "pytorch",
        "model": None,
        "hardware": "NVIDIA A100-SXM4-80GB",
        "n_ranks": 1,
        "warnings": {},
        "phase": None,
        "commit": None,
        "labels": {},
        "files": [],
    }


def test_figures_have_fixed_decimals_and_line_up(capsys):
    from tracehouse.output import print_rows

    runs = [_run("a" * 16), _run("b" * 16)]
    figures = {
        "a" * 16: Headline("unknown", 1, 12920.244, 0.5, "memory 84%"),
        "b" * 16: Headline("unknown", 6, 5.98, 100.0, "gemm 60%"),
    }
    names, rows = narrow_rows(runs, figures)
    assert rows[0][names.index("step_ms")] == Decimal("12920.244")
    assert (
        rows[1][names.index("step_ms")] == Decimal("5.980")
        and str(rows[1][names.index("step_ms")]) == "5.980"
    )
    assert str(rows[1][names.index("busy_%")]) == "100.0"
    print_rows(names, rows, "table", max_width=22)
    lines = capsys.readouterr().out.splitlines()
    header, first, second = lines[0], lines[2], lines[3]
    end = header.index("step_ms") + len("step_ms")  # right-aligned: the header ends where values do
    assert first[:end].endswith(" 12920.244") and second[:end].endswith("     5.980")
    end = header.index("busy_%") + len("busy_%")
    assert first[:end].endswith("   0.5") and second[:end].endswith(" 100.0")


def test_a_run_without_figures_leaves_them_empty():
    names, rows = narrow_rows([_run("c" * 16)], {})
    assert rows[0][names.index("step_ms")] is None and rows[0][names.index("busy_%")] is None


def test_runs_fits_in_120_columns_on_the_real_traces(real_warehouse, cli_runner):
    """Issue 17: `tracehouse runs` fits in 120 columns on the shared corpus (one run per trace file)."""
    from tracehouse import cli

    wh, runs = real_warehouse
    res = cli_runner.invoke(cli.main, ["--warehouse", str(wh.root), "runs"])
    assert res.exit_code == 0, res.output
    lines = res.stdout.splitlines()
    listed = [line for line in lines if not line.startswith("(values")]  # the note of values cut to fit
    assert len(listed) == len(set(runs.values())) + 3  # header, rule, one line a run, the count
    assert max(len(line) for line in lines) <= 120, max(lines, key=len)


# ---- what tells runs apart (issue 36 item 8) ------------------------------------------------------------

NOTE = "note=the-same-long-note-on-every-run-of-this-listing-so-that-it-fills-the-column"


@pytest.fixture(scope="module")
def three_runs(tmp_path_factory):
    """Three runs of one trace file name, told apart only by a label (b: series=y) or the commit (c: c2);
    every run carries a long constant label whose key sorts before `series`."""
    from tracebuilder import simple_events, write_trace

    root = tmp_path_factory.mktemp("runs-apart")
    wh, ids = str(root / "wh"), {}
    for name, series, commit in (("a", "x", "c1"), ("b", "y", "c1"), ("c", "x", "c2")):
        trace = write_trace(root / name / "rank0-of-a-long-profile-file-name.json.gz", simple_events())
        args = ["--warehouse", wh, "ingest", str(trace.parent), "--commit", commit]
        res = _cli(args + ["--label", NOTE, "--label", f"series={series}"])
        assert res.exit_code == 0, res.output
        ids[name] = res.stdout.split()[0]
    return wh, ids


def _cli(args: list[str]):
    from click.testing import CliRunner

    from tracehouse.cli import main

    return CliRunner().invoke(main, args)


def test_runs_differing_only_in_a_label_or_the_commit_read_differently_in_120_columns(three_runs):
    wh, ids = three_runs
    res = _cli(["--warehouse", wh, "runs"])
    assert res.exit_code == 0, res.output
    lines = res.stdout.splitlines()
    assert max(len(line) for line in lines) <= 120, max(lines, key=len)
    header = lines[0].split()
    assert header[:7] == ["run", "ingested", "what", "ranks", "commit", "labels", "files"], header
    start = lines[0].index("what")  # past the run id and the time: what is left must tell the runs apart
    by_run = {
        name: next(line for line in lines if line.startswith(run_id[:12])) for name, run_id in ids.items()
    }
    told = {name: line[start:] for name, line in by_run.items()}
    assert len(set(told.values())) == 3, told
    assert "series=y" in told["b"] and "series=x" in told["a"]  # the label that differs comes first
    assert " c2 " in told["c"] and " c1 " in told["a"]
    assert "rank0-of-a" in told["a"]  # the file's name, cut at its end


def test_runs_wide_and_scripts_keep_every_value_whole(three_runs):
    wh, ids = three_runs
    wide = _cli(["--warehouse", wh, "runs", "--wide"]).stdout
    assert NOTE.split("=", 1)[1] in wide and "rank0-of-a-long-profile-file-name.json.gz" in wide
    assert "…" not in wide
    lines = _cli(["--warehouse", wh, "runs", "--format", "ndjson"]).stdout.splitlines()
    records = [json.loads(line) for line in lines]
    assert [r["run_id"] for r in records] == list(ids.values())
    assert records[1]["labels"]["series"] == "y" and records[2]["commit"] == "c2"
    assert records[0]["labels"]["note"] == NOTE.split("=", 1)[1]
    assert records[0]["files"][0]["name"] == "rank0-of-a-long-profile-file-name.json.gz"
    assert {"steps", "step_time_median_ms", "gpu_busy_pct"} <= set(records[0])  # with the figures


def test_runs_md_is_a_markdown_table(three_runs):
    wh, ids = three_runs
    lines = _cli(["--warehouse", wh, "runs", "--format", "md"]).stdout.splitlines()
    assert len(lines) == 2 + len(ids)
    cells = [re.split(r"(?<!\\)\|", line)[1:-1] for line in lines]
    assert all(line.startswith("| ") and line.endswith(" |") for i, line in enumerate(lines) if i != 1), lines
    assert len({len(row) for row in cells}) == 1, cells
    assert re.fullmatch(r"\|(---:?\|)+", lines[1]), lines[1]
    assert all("…" not in line for line in lines)
    assert NOTE in lines[2] and lines[2].startswith(f"| {ids['a'][:12]} |")


def test_fitting_cuts_the_widest_flexible_column_but_keeps_values_apart():
    from tracehouse.output import fit_widths

    cells = [["a" * 40 + "1", "z" * 30], ["a" * 40 + "2", "z" * 30]]
    widths = fit_widths(["what", "files"], [41, 30], 51, ("what", "files"), cells)
    assert widths == [41, 8]  # files has nothing that tells lines apart: cut to its minimum first
    widths = fit_widths(["what", "files"], [41, 30], 50, ("what", "files"), cells)
    assert widths == [40, 8]  # then, to fit, what too (its values no longer apart)
    widths = fit_widths(["what", "files"], [41, 30], 30, ("what", "files"), cells)
    assert sum(widths) + 2 <= 30 and widths[1] == 8

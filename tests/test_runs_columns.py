"""`tracehouse runs` prints each figure column with fixed decimals, so the decimal points line up and a long
step keeps its µs: 12920.244 ms (a float printed as 12920.2, to 100 µs) over 5.980; GPU busy 100.0 over
89.4. JSON keeps the plain numbers."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal

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
    assert len(lines) == len(set(runs.values())) + 3  # header, rule, one line a run, the count
    assert max(len(line) for line in lines) <= 120, max(lines, key=len)

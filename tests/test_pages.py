"""The HTML pages as a reader sees them: rendered by headless Chromium at 1400 px and measured
(bench/screenshots.py's probe). The first screen holds the headline figures and the takeaways, no
number cell wraps (every folded section opened), nothing overflows sideways, and the page is a few
screens tall with its details folded, also for the largest real trace."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.conftest import TRACES, require_shared

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
import screenshots

SCREENS = 4


@pytest.fixture(scope="module")
def browser():
    path = screenshots.chromium()
    if not path:
        pytest.skip("headless Chromium not installed (Debian package `chromium`, or set CHROMIUM)")
    return path


def _check_layout(m: dict, first_screen: list[str]) -> None:
    assert m["viewport"] == screenshots.WIDTH
    assert m["scroll_width"] <= screenshots.WIDTH, "the page scrolls sideways"
    assert m["open_scroll_width"] <= screenshots.WIDTH, "an opened section makes the page scroll sideways"
    assert m["height"] <= SCREENS * screenshots.SCREEN, f"{m['height']} px folded: over {SCREENS} screens"
    assert m["wrapped_numbers"] == [], f"number cells wrap: {m['wrapped_numbers'][:5]}"
    for part in first_screen:
        assert m[part] is not None, f"no {part} on the page"
        assert m[part]["top"] < screenshots.SCREEN, f"{part} starts below the first screen"
    assert m["open_height"] >= m["height"]  # opening the details shows more


def test_run_diff_trend_pages_read_at_a_glance(synth_warehouse, browser, tmp_path):
    wh, runs = synth_warehouse
    pages = screenshots.build_pages(wh.root, runs["serving-decode"], runs["training"], tmp_path, {})
    by_name = {p.stem: p for p in pages}
    run = screenshots.measure(by_name["run"], browser, tmp_path)
    _check_layout(run, ["cards", "takeaways"])
    assert run["cards"]["bottom"] < screenshots.SCREEN / 2  # the headline figures are the top of the page
    assert run["number_cells"] > 30  # the measure saw the tables (kernels, streams, gaps ...)
    diff = screenshots.measure(by_name["diff"], browser, tmp_path)
    _check_layout(diff, ["headline", "first_table"])
    trend = screenshots.measure(by_name["trend"], browser, tmp_path)
    _check_layout(trend, ["regressions"])


def test_the_largest_real_trace_report_is_a_few_screens(browser, tmp_path):
    require_shared()
    from click.testing import CliRunner

    from tracehouse.cli import main

    largest = max(
        (
            p
            for p in TRACES.rglob("*.json*")
            if p.is_file() and p.name != "execution_details.json" and "capture_traces" not in p.parts
        ),
        key=lambda p: p.stat().st_size,
    )
    wh = tmp_path / "wh"
    out = tmp_path / "run.html"
    result = CliRunner().invoke(main, ["--warehouse", str(wh), "ingest", str(largest), "--no-analyses"])
    assert result.exit_code == 0, result.output
    result = CliRunner().invoke(
        main, ["--warehouse", str(wh), "report", "--run", "latest", "--format", "html", "-o", str(out)]
    )
    assert result.exit_code == 0, result.output
    m = screenshots.measure(out, browser, tmp_path)
    _check_layout(m, ["cards", "takeaways"])

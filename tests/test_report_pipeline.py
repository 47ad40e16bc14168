"""One report pipeline (issue 16): each report (run, diff, trend) is `build(connection, params) -> typed
context` plus templates from the one Jinja environment (reports/render.py); `--template-dir` overrides a
shipped template of the same name for all three commands, every other name falls back; every HTML page
extends base.html.j2, so its Content-Security-Policy holds on every page."""

from __future__ import annotations

import dataclasses
import re

import pytest
from tracehouse.reports import diff as diff_report
from tracehouse.reports import run as run_report
from tracehouse.reports import trend as trend_report
from tracehouse.reports.render import TEMPLATES, environment, render
from tracehouse.warehouse.store import Warehouse

from tracehouse.cli import main

CSP = '<meta http-equiv="Content-Security-Policy" content="default-src \'none\';'
PAGES = sorted(
    p.name for p in TEMPLATES.glob("*.html.j2") if not p.name.startswith("_") and p.name != "base.html.j2"
)


def test_the_three_reports_have_html_pages():
    assert PAGES == ["diff.html.j2", "run.html.j2", "trend.html.j2"]


@pytest.mark.parametrize("page", PAGES)
def test_every_html_page_extends_the_base_layout(page):
    text = (TEMPLATES / page).read_text(encoding="utf-8")
    first = next(line for line in text.splitlines() if line.strip())
    assert first == '{% extends "base.html.j2" %}', f"{page} must extend base.html.j2 first (its CSP)"
    # nothing of the page is outside a block of the base (it would be dropped or bypass the layout)
    assert "<html" not in text and "<head" not in text and "http-equiv" not in text


def _diff() -> diff_report.DiffReport:
    base = diff_report.RunInfo("a" * 16, "a", None, "pytorch", None, None, 2, 1, 1000.0, 0)
    target = diff_report.RunInfo("b" * 16, "b", "H100 <b>", None, None, None, 2, 1, 2000.0, 0)
    k = diff_report.KernelRow(
        "added",
        "other",
        "<script>x()</script>",
        [],
        ["<script>x()</script>"],
        0.0,
        200.0,
        200.0,
        None,
        0.0,
        1.0,
        False,
    )
    return diff_report.DiffReport(
        base,
        target,
        1000.0,
        2000.0,
        1000.0,
        2.0,
        [],
        [k],
        [k],
        [],
        [],
        {
            "names_added_exact": 1,
            "names_removed_exact": 0,
            "names_appeared": 0,
            "names_vanished": 0,
            "rows_exact": 0,
            "rows_normalized": 0,
            "rows_category": 0,
            "rows_added": 1,
            "rows_removed": 0,
        },
    )


def _trend() -> trend_report.TrendReport:
    # no rows: the trend of nothing, with the rule's parameters read from sql/trend_params
    return trend_report.build_trend_from_tables(None, None, where={"series": "<i>s</i>"})


@pytest.mark.parametrize("context,name", [(_diff, "diff"), (_trend, "trend")])
def test_diff_and_trend_pages_carry_the_base_csp(context, name):
    html = render(name, context(), "html")
    assert html.startswith("<!doctype html>") and CSP in html
    assert "<script>x()</script>" not in html and "<i>s</i>" not in html  # trace strings escaped


def test_json_is_the_context_as_data():
    import json

    doc = json.loads(render("diff", _diff(), "json"))
    assert doc["target"]["hardware"] == "H100 <b>" and doc["kernels"][0]["match"] == "added"
    with pytest.raises(ValueError, match="unknown report format"):
        render("diff", _diff(), "pdf")


def test_one_environment_per_kind_and_folder(tmp_path):
    assert environment(True) is environment(True) and environment(False) is environment(False)
    assert environment(True) is not environment(False)
    assert environment(True, tmp_path) is environment(True, str(tmp_path))
    assert environment(True, tmp_path) is not environment(True)


def test_compiled_templates_are_kept_and_follow_their_source(tmp_path, monkeypatch):
    """A process compiles a template once for every later process (the cache folder), per autoescape
    setting; an edited template is compiled again (Jinja checks the source), and a cache folder that
    cannot be written only costs the compile."""
    from tracehouse.reports.render import _environment

    user = tmp_path / "templates"
    user.mkdir()
    monkeypatch.setenv("TRACEHOUSE_CACHE", str(tmp_path / "cache"))
    _environment.cache_clear()
    try:
        (user / "diff.md.j2").write_text("first {{ r.base.run_id }}\n")
        assert render("diff", _diff(), "md", user) == f"first {'a' * 16}\n"
        assert render("diff", _diff(), "html") == render("diff", _diff(), "html")
        assert list((tmp_path / "cache" / "templates" / "text").iterdir())
        assert list((tmp_path / "cache" / "templates" / "html").iterdir())
        _environment.cache_clear()  # as a new process: the kept code, unless the source changed
        (user / "diff.md.j2").write_text("second {{ r.base.run_id }}\n")
        assert render("diff", _diff(), "md", user) == f"second {'a' * 16}\n"
        (tmp_path / "ro").write_text("a file where the cache folder would be")
        monkeypatch.setenv("TRACEHOUSE_CACHE", str(tmp_path / "ro"))
        _environment.cache_clear()
        assert render("diff", _diff(), "md", user) == f"second {'a' * 16}\n"
    finally:
        monkeypatch.undo()
        _environment.cache_clear()


def test_each_report_is_build_connection_params_to_a_dataclass():
    for module, params in (
        (run_report, run_report.RunParams),
        (diff_report, diff_report.DiffParams),
        (trend_report, trend_report.TrendParams),
    ):
        assert dataclasses.is_dataclass(params)
        assert list(module.build.__code__.co_varnames[:2]) == ["con", "params"]
        returned = module.build.__annotations__["return"]
        assert re.fullmatch(r"(Run|Diff|Trend)Report", str(returned)), returned


def test_template_dir_overrides_by_name_and_falls_back(tmp_path):
    user = tmp_path / "templates"
    user.mkdir()
    (user / "diff.md.j2").write_text("custom diff {{ r.base.run_id }} -> {{ r.target.run_id }}\n")
    # a user base layout: the shipped diff page still renders, inside the user's base
    shipped_base = (TEMPLATES / "base.html.j2").read_text(encoding="utf-8")
    (user / "base.html.j2").write_text(shipped_base.replace("<body>", '<body data-user-base="1">'))
    assert render("diff", _diff(), "md", user) == f"custom diff {'a' * 16} -> {'b' * 16}\n"
    html = render("diff", _diff(), "html", user)
    assert 'data-user-base="1"' in html and "<h1>Diff <code>" in html and CSP in html
    # a name the folder does not hold falls back to the shipped template
    assert render("trend", _trend(), "md", user) == render("trend", _trend(), "md")
    assert render("diff", _diff(), "md") != render("diff", _diff(), "md", user)


@pytest.fixture(scope="module")
def situation_runs(tmp_path_factory):
    """A warehouse with two situations' runs (report-step-figures, then dataloader-stall); returns
    (Warehouse, [run ids])."""
    from tracehouse.ingest.load import ingest_paths
    from tracehouse.synth.situations import write_situation

    root = tmp_path_factory.mktemp("pipeline")
    wh = Warehouse(root / "wh")
    ids = []
    for name in ("report-step-figures", "dataloader-stall"):
        [outcome] = ingest_paths(wh, [write_situation(name, root / name)], analyse=False)
        ids.append(outcome.run_id)
    from tracehouse.warehouse.derived import derive

    assert derive(wh) == dict.fromkeys(sorted(ids))  # derived, as `tracehouse derive` leaves runs: one batch
    return wh, ids


def test_template_dir_on_report_diff_and_trend(situation_runs, tmp_path, cli_runner):
    wh, (a, b) = situation_runs
    user = tmp_path / "mine"
    user.mkdir()
    (user / "run.md.j2").write_text("run {{ r.run_id }} other {{ r.other_share | pct }}\n")
    (user / "diff.md.j2").write_text("diff {{ r.base.run_id }} {{ r.total_base_ns | ns }} per step\n")
    (user / "trend.md.j2").write_text("trend {{ r.series | length }} series\n")
    common = ["--warehouse", str(wh.root)]
    cases = [
        (["report", "--run", a], f"run {a} other 3.7 %\n"),
        (["diff", a, b], f"diff {a} 234.5 µs per step\n"),
        (["trend"], "trend "),
    ]
    for args, want in cases:
        res = cli_runner.invoke(main, [*common, *args, "--template-dir", str(user)])
        assert res.exit_code == 0, res.output
        assert res.output.startswith(want), (args, res.output)
        # the HTML page is not in the folder: the shipped one renders
        res = cli_runner.invoke(main, [*common, *args, "--template-dir", str(user), "--format", "html"])
        assert res.exit_code == 0 and CSP in res.output, res.output[-400:]


def test_template_dir_must_exist(situation_runs, tmp_path, cli_runner):
    wh, (a, b) = situation_runs
    res = cli_runner.invoke(
        main, ["--warehouse", str(wh.root), "diff", a, b, "--template-dir", str(tmp_path / "no")]
    )
    assert res.exit_code == 2 and "does not exist" in res.output and "Traceback" not in res.output


def test_cli_help_names_the_option():
    from click.testing import CliRunner

    for command in ("report", "diff", "trend"):
        res = CliRunner().invoke(main, [command, "--help"])
        assert "--template-dir DIR" in res.output, command

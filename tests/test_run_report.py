"""The run report: golden Markdown on synthesized runs, every real trace in every format, JSON schema,
escaping of hostile names, and the HTML page in headless Chromium."""

from __future__ import annotations

import json
import os
import shutil
import subprocess

import pytest
from conftest import REPORT_SCENARIOS, ROOT, real_trace_files
from tracebuilder import launch_pair, simple_events, write_trace
from tracehouse.ingest.load import ingest_paths
from tracehouse.reports.run import build_run_report, render_run_report, report_json
from tracehouse.warehouse.catalog import connect
from tracehouse.warehouse.engine import open as open_connection
from tracehouse.warehouse.store import Warehouse
from warehouses import replay_only_and_mapping

GOLDEN = ROOT / "tests" / "golden"
SCHEMA = json.loads((ROOT / "reports" / "run_report.schema.json").read_text())


def _validate(data: dict) -> None:
    jsonschema = pytest.importorskip(
        "jsonschema", reason="jsonschema is a test dependency (pip install -e .[test])"
    )
    jsonschema.validate(data, SCHEMA)


@pytest.mark.parametrize("scenario", sorted(REPORT_SCENARIOS))
def test_markdown_matches_golden(synth_warehouse, scenario):
    """Regenerate with UPDATE_GOLDEN=1 after a deliberate change, and review the diff."""
    wh, runs = synth_warehouse
    text = render_run_report(
        build_run_report(open_connection(wh, runs=[runs[scenario]]), runs[scenario]), "md"
    )
    golden = GOLDEN / f"run_{scenario}.md"
    if os.environ.get("UPDATE_GOLDEN"):
        golden.write_text(text)
    assert golden.is_file(), f"missing {golden}: run with UPDATE_GOLDEN=1 once"
    assert text == golden.read_text()


def test_decode_report_has_every_section(synth_warehouse):
    wh, runs = synth_warehouse
    report = build_run_report(open_connection(wh, runs=[runs["serving-decode"]]), runs["serving-decode"])
    assert [p.phase for p in report.phases] == ["decode"]
    assert report.step is not None and report.step.layer_period and report.step.streams
    assert any(s.critical for s in report.step.streams)
    assert report.step.critical_path
    assert report.rank_skew and report.fusion
    s = report.step
    # step_breakdown splits gpu_queued_ns (the first activity launched and waiting on the GPU) out of
    # host_setup_ns; the report does not show it yet, so the identity reads it from the view
    [(queued,)] = (
        connect(wh)
        .execute(
            "SELECT gpu_queued_ns FROM step_breakdown WHERE run_id = ? AND rank = ? AND step = ?",
            [runs["serving-decode"], s.rank, s.step],
        )
        .fetchall()
    )
    assert (
        s.host_setup_ns
        + queued
        + s.compute_ns
        + s.exposed_comm_ns
        + s.exposed_memory_ns
        + s.gpu_idle_ns
        + s.host_tail_ns
        == s.wall_ns
    )
    _validate(report_json(report))


def test_fusion_statuses_follow_the_synthesizer(synth_warehouse):
    """Eager prefill launches add and RMSNorm separately; decode runs the fused kernel."""
    wh, runs = synth_warehouse
    con = connect(wh)
    decode = {f.pattern_name: f.status for f in build_run_report(con, runs["serving-decode"]).fusion}
    prefill = {f.pattern_name: f.status for f in build_run_report(con, runs["serving-prefill"]).fusion}
    assert any("RMSNorm" in name and status == "Fused" for name, status in decode.items()), decode
    assert any("RMSNorm" in name and status == "Confirmed" for name, status in prefill.items()), prefill


@pytest.mark.parametrize("rel", real_trace_files() or ["<no shared traces>"])
def test_every_real_trace_renders_in_every_format(real_warehouse, rel):
    wh, run_of = real_warehouse
    report = build_run_report(open_connection(wh, runs=[run_of[rel]]), run_of[rel])
    for fmt in ("md", "html", "json"):
        assert render_run_report(report, fmt)
    _validate(json.loads(render_run_report(report, "json")))


HOSTILE = "<script>alert(1)</script>"


@pytest.fixture(scope="module")
def hostile_html(tmp_path_factory):
    root = tmp_path_factory.mktemp("hostile")
    events = (
        simple_events()
        + launch_pair(50, 30.0, 40.0, 3.0, name=HOSTILE)
        + launch_pair(51, 35.0, 45.0, 2.0, name="a | b ` c")
    )
    trace = write_trace(root / "evil<img src=x onerror=alert(2)>.json.gz", events)
    wh = Warehouse(root / "wh")
    [outcome] = ingest_paths(wh, [trace], {"model": "<b>bold</b>"})
    con = connect(wh)
    report = build_run_report(con, outcome.run_id)
    html = render_run_report(report, "html")
    path = root / "report.html"
    path.write_text(html)
    return report, html, path


def test_html_escapes_hostile_names(hostile_html):
    report, html, _ = hostile_html
    assert HOSTILE not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "<img src=x" not in html and "<b>bold</b>" not in html
    # the one script is the page's own (sorting, filters), allowed by its hash under the CSP; no other
    from tracehouse.reports.render import PAGE_JS, PAGE_JS_HASH

    assert html.lower().count("<script") == 1 and f"<script>{PAGE_JS}</script>" in html
    assert f"script-src '{PAGE_JS_HASH}'" in html and "unsafe-inline'; img-src" in html
    md = render_run_report(report, "md")
    assert "a \\| b ' c" in md  # a pipe cannot break a Markdown table


def _chromium() -> str:
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if not path:
        pytest.skip("headless Chromium not installed (Debian package `chromium`; .ci/run installs it)")
    return path


CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--enable-logging=stderr",
    "--v=0",
]


def test_html_report_in_headless_chromium(hostile_html, synth_warehouse, tmp_path):
    chromium = _chromium()
    wh, runs = synth_warehouse
    page = tmp_path / "decode.html"
    page.write_text(
        render_run_report(
            build_run_report(open_connection(wh, runs=[runs["serving-decode"]]), runs["serving-decode"]),
            "html",
        )
    )
    for html_file in (page, hostile_html[2]):
        profile = tmp_path / f"profile-{html_file.stem}"
        shot = tmp_path / f"{html_file.stem}.png"
        dom = subprocess.run(
            [chromium, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "--dump-dom", html_file.as_uri()],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert dom.returncode == 0, dom.stderr[-2000:]
        console_errors = [line for line in dom.stderr.splitlines() if "CONSOLE" in line and "rror" in line]
        assert console_errors == []
        subprocess.run(
            [
                chromium,
                *CHROMIUM_FLAGS,
                f"--user-data-dir={profile}",
                f"--screenshot={shot}",
                "--window-size=1280,2000",
                html_file.as_uri(),
            ],
            capture_output=True,
            timeout=120,
            check=False,
        )
        assert shot.is_file() and shot.stat().st_size > 10_000  # a blank page compresses to a few kB
        if html_file == page:
            assert dom.stdout.count("<svg") >= 3  # category shares, step timeline, layer pattern
            assert "step-timeline" in dom.stdout and "layer-strip" in dom.stdout
        else:
            assert "&lt;script&gt;alert(1)&lt;/script&gt;" in dom.stdout  # shown as text, never run


def test_mapping_mode_takes_sites_from_a_graph_off_run(tmp_path):
    """A graph replay without capture traces only knows the replay call; the mapping run (eager) knows the
    model's lines, matched by (kernel name, ordinal within the step)."""
    wh, target_id, mapping_id = replay_only_and_mapping(tmp_path)
    con = connect(wh)
    plain = build_run_report(con, target_id)
    mapped = build_run_report(con, target_id, mapping_run=mapping_id)
    assert plain.mode == "single-trace" and mapped.mode == "mapping/formal"
    graph_kernels = [k for k in plain.phases[0].kernels if k.launch_call == "cudaGraphLaunch"]
    assert graph_kernels and all("replay" in (k.python_site or "") for k in graph_kernels)
    by_name = {k.name: k for k in mapped.phases[0].kernels}
    truth = {k.name: k.python_site for k in build_run_report(con, mapping_id).phases[0].kernels}
    for k in graph_kernels:
        assert by_name[k.name].python_site == truth[k.name]
    assert "Python locations from run" in render_run_report(mapped, "md")

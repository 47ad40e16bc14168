"""An honest diff (issue 36 item 4): a comparability verdict first; per launch, and said so, when a run has
no step markers; per kernel the change of time per launch and of launch count apart; both runs' flags.

Checked against the synthesized before/after pairs (synth/situations/diff_pair.py: the after trace holds
fewer iterations and one kernel got 41 % slower per launch, with and without step markers; the truth comes
from their parameters), and on the real Nsight pair mfu_2gpu_before/after (skipped without ../shared),
whose numbers an independent sqlite3 read of the two files gives.
"""

from __future__ import annotations

import json
import sqlite3

import pytest
from conftest import TRACES, require_shared
from warehouses import real, situation

PAIRS = {
    "marked": ("diff-fewer-iterations-before", "diff-fewer-iterations-after"),
    "unmarked": ("diff-fewer-iterations-before-unmarked", "diff-fewer-iterations-after-unmarked"),
}


@pytest.fixture(scope="module")
def pairs(warehouses):
    """{kind: (DiffReport, its truth, the target's run truth, the base's run truth)} of both pairs."""
    from tracehouse.reports.diff import build_diff
    from tracehouse.warehouse.catalog import connect

    names = [n for pair in PAIRS.values() for n in pair]
    wh, runs, truths = warehouses.named({n: situation(n) for n in names})
    con = connect(wh)
    out = {}
    for kind, (before, after) in PAIRS.items():
        truth = truths[after]["expect"]["diff"]
        assert truth["base"] == before
        out[kind] = (
            build_diff(con, runs[before], runs[after]),
            truth,
            truths[after]["expect"],
            truths[before]["expect"],
        )
    yield out
    con.close()


@pytest.mark.parametrize("kind", list(PAIRS))
def test_verdict_basis_and_unit_follow_the_step_markers(pairs, kind):
    report, truth, _, _ = pairs[kind]
    v = report.verdict
    assert v.status == truth["status"] and v.basis == truth["basis"] and report.unit == truth["unit"]
    steps = next(c for c in v.checks if c.what == "steps")
    assert [int(steps.base), int(steps.target)] == truth["steps"]
    hardware = next(c for c in v.checks if c.what == "hardware")
    assert hardware.outcome == "same"
    if kind == "unmarked":
        assert "step markers" in v.reason and "whole trace window" in v.reason
    else:
        assert v.reason == "" and any("different number of steps (10 → 9)" in c for c in v.caveats)


@pytest.mark.parametrize("kind", list(PAIRS))
def test_each_kernel_splits_its_change_into_per_launch_and_count(pairs, kind):
    report, truth, _, _ = pairs[kind]
    rows = {r.label: r for r in report.kernels}
    assert set(rows) == set(truth["kernels"])
    for name, want in truth["kernels"].items():
        r = rows[name]
        assert r.match == "exact"
        for key, value in want.items():
            got = {"base_launches": r.base_launches, "target_launches": r.target_launches}.get(key)
            got = getattr(r, key) if got is None else got
            assert got == pytest.approx(value, rel=1e-9, abs=1e-6), (name, key)
        assert r.per_launch_effect_ns + r.count_effect_ns == pytest.approx(r.delta_ns, abs=1e-6)
    assert report.total_delta_ns == pytest.approx(truth["total_delta_ns"])
    assert report.per_launch_ratio == pytest.approx(truth["per_launch_ratio"], rel=1e-9)
    assert report.base_ns_per_launch == pytest.approx(truth["base_ns_per_launch"], rel=1e-9)
    # the real change rises to the top: the kernel that got slower per launch, not the count-only movers
    assert report.top_movers[0].label == truth["slower_per_launch"]


def test_unmarked_pair_looks_faster_per_window_but_says_per_launch(pairs):
    """The defect: per window the after run is faster (fewer iterations); the headline is per launch."""
    report, truth, _, _ = pairs["unmarked"]
    assert truth["total_delta_ns"] < 0 < truth["per_launch_ratio"] - 1  # the situation is the defect's
    md = _md(report)
    head = md.split("## By category", 1)[0]
    assert head.index("**Verdict: not comparable per step**") < head.index("| | base | target |")
    assert "GPU time per step changed by" not in md and "Per step: withheld" in md
    assert f"GPU time per launch changed **× {truth['per_launch_ratio']:.3f}**" in md
    assert "| GPU time per rank window |" in md and "base / rank window" in md
    html = _html(report)
    assert html.index('id="verdict"') < html.index('id="headline"') and "Not comparable per step" in html
    assert "change per step" not in html.split('id="headline"', 1)[1].split("</div>\n", 1)[0]
    doc = json.loads(_json(report))
    assert next(iter(doc)) == "verdict" and doc["verdict"]["basis"] == "per_launch"


def test_marked_pair_headline_is_per_step_and_qualified(pairs):
    report, truth, _, _ = pairs["marked"]
    md = _md(report)
    assert "**Verdict: comparable with caveats**" in md
    assert report.total_base_ns == pytest.approx(truth["total_base_ns"])
    assert "GPU time per step changed by" in md and "(comparable with caveats: see the checks above)" in md
    # per step only the send/recv changed: no count effect anywhere
    assert report.count_effect_ns == pytest.approx(0.0, abs=1e-6)


@pytest.mark.parametrize("kind", list(PAIRS))
def test_both_runs_flags_are_listed_in_every_format(pairs, kind):
    report, _, _, _ = pairs[kind]
    v = report.verdict
    assert v.base_flags and v.target_flags
    flags = {f.flag for f in v.base_flags}
    assert ("no_step_markers" in flags) == (kind == "unmarked")
    md, html, doc = _md(report), _html(report), json.loads(_json(report))
    assert "## Data quality" in md and 'id="flags"' in html
    for side, listed in (("base", v.base_flags), ("target", v.target_flags)):
        for f in listed:
            assert f"- {side}: **{f.flag}** ({f.severity}" in md
        assert [f["flag"] for f in doc["verdict"][f"{side}_flags"]] == [f.flag for f in listed]


def test_run_views_give_the_generation_parameters(pairs, warehouses):
    """run_comparability, run_step_time and step_kernel_time of each synthesized run, against its truth."""
    from conftest import query_rows
    from tracehouse.warehouse.catalog import connect

    names = [n for pair in PAIRS.values() for n in pair]
    wh, runs, truths = warehouses.named({n: situation(n) for n in names})
    con = connect(wh)
    for name in names:
        expect = truths[name]["expect"]
        [comp] = query_rows(con, "SELECT * FROM run_comparability WHERE run_id = ?", [runs[name]])
        assert {k: comp[k] for k in expect["run_comparability"]} == expect["run_comparability"], name
        [st] = query_rows(con, "SELECT * FROM run_step_time WHERE run_id = ?", [runs[name]])
        for key, value in expect["run_step_time"].items():
            assert st[key] == pytest.approx(value), (name, key)
        kernels = query_rows(
            con, "SELECT name, launches, ns_per_launch FROM step_kernel_time WHERE run_id = ?", [runs[name]]
        )
        got = {k["name"]: {"launches": k["launches"], "ns_per_launch": k["ns_per_launch"]} for k in kernels}
        assert got == expect["kernels"], name
    con.close()


def _md(report):
    from tracehouse.reports.diff import render_diff

    return render_diff(report, "md")


def _html(report):
    from tracehouse.reports.diff import render_diff

    return render_diff(report, "html")


def _json(report):
    from tracehouse.reports.diff import render_diff

    return render_diff(report, "json")


# ---- the real Nsight pair ----------------------------------------------------------------------------

REAL = ("nsys/mfu_2gpu_before.sqlite", "nsys/mfu_2gpu_after.sqlite")
SENDRECV = "ncclDevKernel_SendRecv%"


def _sqlite_read(rel: str) -> dict:
    """Independent of tracehouse: the send/recv kernel's launches and time, and every GPU activity's."""
    con = sqlite3.connect(f"file:{TRACES / rel}?mode=ro", uri=True)
    try:
        n, ns = con.execute(
            'SELECT count(*), sum(k."end" - k.start) FROM CUPTI_ACTIVITY_KIND_KERNEL AS k '
            "JOIN StringIds AS s ON s.id = k.demangledName WHERE s.value LIKE ?",
            [SENDRECV],
        ).fetchone()
        launches = sum(
            con.execute(f"SELECT count(*) FROM {t}").fetchone()[0]
            for t in (
                "CUPTI_ACTIVITY_KIND_KERNEL",
                "CUPTI_ACTIVITY_KIND_MEMCPY",
                "CUPTI_ACTIVITY_KIND_MEMSET",
            )
        )
        markers = con.execute(
            "SELECT count(*) FROM NVTX_EVENTS AS e LEFT JOIN StringIds AS s ON s.id = e.textId "
            "WHERE coalesce(e.text, s.value) LIKE 'ProfilerStep%'"
        ).fetchone()[0]
    finally:
        con.close()
    return {"sendrecv_launches": n, "sendrecv_ns": ns, "launches": launches, "markers": markers}


@pytest.fixture(scope="module")
def real_pair(warehouses):
    require_shared()
    from tracehouse.reports.diff import build_diff
    from tracehouse.warehouse.catalog import connect

    wh, runs, _ = warehouses.named({rel: real(rel) for rel in REAL})
    con = connect(wh)
    yield build_diff(con, runs[REAL[0]], runs[REAL[1]]), [_sqlite_read(rel) for rel in REAL]
    con.close()


def test_real_nsys_pair_is_compared_per_launch_and_sendrecv_leads(real_pair):
    """Hand-checked by sqlite3: no ProfilerStep range in either file; the send/recv kernel 66 launches,
    25.40 ms before (384.9 us each) and 62, 33.74 ms after (544.2 us each): × 1.414 per launch; the windows
    hold 5299 and 4733 GPU activities (× 0.893). Per window the after run looked 23.5 ms faster."""
    report, (before, after) = real_pair
    assert before["markers"] == after["markers"] == 0
    v = report.verdict
    assert v.status == "not comparable per step" and v.basis == "per_launch" and report.unit == "rank window"
    steps = next(c for c in v.checks if c.what == "steps")
    assert f"{before['launches']} and {after['launches']} launches" in steps.note
    want = (after["sendrecv_ns"] / after["sendrecv_launches"]) / (
        before["sendrecv_ns"] / before["sendrecv_launches"]
    )
    assert want == pytest.approx(1.414, abs=1e-3)
    top = report.top_movers[0]
    assert top.label.startswith("ncclDevKernel_SendRecv") and top.per_launch_ratio == pytest.approx(want)
    # per rank window: two ranks, so each side's launches are half the file's
    assert top.base_launches == before["sendrecv_launches"] / 2
    assert top.target_launches == after["sendrecv_launches"] / 2
    assert top.per_launch_effect_ns > 0 > top.count_effect_ns
    # every other kernel's change is mostly count: none moves per launch by as much as the send/recv
    assert all(abs(r.per_launch_effect_ns) < top.per_launch_effect_ns for r in report.kernels if r is not top)
    assert report.total_delta_ns < 0 and report.per_launch_ratio > 1  # faster per window, not per launch
    flags = {f.flag for f in v.base_flags} & {f.flag for f in v.target_flags}
    assert {"no_step_markers", "few_steps"} <= flags
    md = _md(report)
    assert "GPU time per step changed by" not in md and "Per step: withheld" in md


@pytest.mark.parametrize("kind", list(PAIRS))
def test_run_takeaways_name_the_whole_window_where_no_step_is_marked(warehouses, kind):
    """A trace without step markers has one step, the whole profiled window: a takeaway's share "of step 0"
    would read as a per-iteration figure. The run report's takeaways name the window instead (and a marked
    run's name its step): the idle share and the what-if gain both fire on these runs (host-bound gaps,
    GEMM 60 % of GPU time)."""
    from tracehouse.reports.run import build_run_report
    from tracehouse.warehouse.engine import open as open_connection

    before = PAIRS[kind][0]
    wh, runs, _ = warehouses.named({before: situation(before)})
    report = build_run_report(open_connection(wh, runs=[runs[before]]), runs[before])
    texts = [t.text for t in report.takeaways]
    idle = next(t for t in texts if t.startswith("The GPU idles"))
    gain = next(t for t in texts if "(what-if)" in t)
    if kind == "unmarked":
        assert "no_step_markers" in {q.flag for q in report.quality}
        assert all("of step" not in t and "of the step" not in t for t in texts), texts
        assert "of the whole trace window (no step markers)" in idle
        assert "of the GPU span of the whole trace window (no step markers) (what-if)" in gain
    else:
        assert f"% of step {report.step.step}, mostly" in idle
        assert f"of the GPU span of step {report.step.step} (what-if)" in gain

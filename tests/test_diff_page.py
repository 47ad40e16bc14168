"""The diff page items of issue 17, on a hand-built DiffReport (no warehouse): no `None` for what a trace
lacks, a bounded list of names where a category pairs 58 names with 23, a 1 → 1 rename said as one,
every trace string escaped in HTML."""

from __future__ import annotations

from tracehouse.reports.diff import DiffReport, KernelRow, RunInfo, render_diff


def _report() -> DiffReport:
    base = RunInfo("a" * 16, "a", None, "pytorch", None, None, 6, 1, 1000.0, 0)
    target = RunInfo("b" * 16, "b", "Tesla V100", None, None, None, 6, 1, 2000.0, 0)
    gemm = KernelRow(
        "category",
        "gemm",
        "gemm",
        [f"ampere_sgemm_{i}" for i in range(58)],
        [f"volta_sgemm_{i}" for i in range(23)],
        800.0,
        1500.0,
        700.0,
        1.875,
        58.0,
        23.0,
        True,
    )
    rename = KernelRow(
        "normalized",
        "embedding",
        "split_embedding_kernel",
        ["split_embedding_kernel_a"],
        ["split_embedding_kernel_b"],
        200.0,
        300.0,
        100.0,
        1.5,
        1.0,
        1.0,
        True,
    )
    evil = KernelRow(
        "added",
        "other",
        "<script>alert(1)</script>",
        [],
        ["<script>alert(1)</script>"],
        0.0,
        200.0,
        200.0,
        None,
        0.0,
        1.0,
        False,
    )
    kernels = [gemm, rename, evil]
    return DiffReport(
        base,
        target,
        1000.0,
        2000.0,
        1000.0,
        2.0,
        [],
        kernels,
        kernels,
        ["<script>alert(1)</script>"],
        [],
        {
            "names_added_exact": 1,
            "names_removed_exact": 0,
            "names_appeared": 1,
            "names_vanished": 0,
            "rows_exact": 0,
            "rows_normalized": 1,
            "rows_category": 1,
            "rows_added": 1,
            "rows_removed": 0,
        },
    )


def test_markdown_says_what_is_missing_and_bounds_long_name_lists():
    md = render_diff(_report(), "md")
    assert "None" not in md
    assert "| framework / model | pytorch / – | – / – |" in md and "| commit | – | – |" in md
    assert "| ranks × steps | 1 rank, 6 rank-steps | 1 rank, 6 rank-steps |" in md
    assert "gemm (changed: 58 → 23 names)" in md
    assert "split_embedding_kernel (renamed)" in md
    line = next(x for x in md.splitlines() if x.startswith("- **gemm**"))
    assert "ampere_sgemm_4," in line and "ampere_sgemm_5," not in line and "… and 53 more" in line
    assert "volta_sgemm_4," in line and "… and 18 more" in line


def test_json_keeps_every_name():
    import json

    data = json.loads(render_diff(_report(), "json"))
    assert len(data["kernels"][0]["base_names"]) == 58 and len(data["kernels"][0]["target_names"]) == 23


def test_html_escapes_trace_strings_and_folds_name_lists():
    html = render_diff(_report(), "html")
    assert "<script>alert(1)</script>" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert ">None<" not in html and " None " not in html
    assert "58 names: ampere_sgemm_0, …" in html  # the cell is short; the whole list on hover / click
    movers = html.split("Top movers", 1)[1].split("</table>", 1)[0]
    assert "(58 → 23 names)</span>" in movers and "(renamed)</span>" in movers
    assert 'title="ampere_sgemm_0, ampere_sgemm_1,' in movers

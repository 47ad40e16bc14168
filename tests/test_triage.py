"""`tracehouse report --format triage`: the skill's three tables (kernel, overlap, fuse) per stage, with its
column headers, only rows at or above the 1 % bar, figures equal to the views' read here independently, in
the skill's order; mapping mode takes graph replays' sites from a graph-off run; a bad run is one line."""

from __future__ import annotations

import gzip
import json
from collections import defaultdict

import pytest
from conftest import REPORT_SCENARIOS, TRACES, require_shared
from tracehouse.warehouse.catalog import connect
from warehouses import real, replay_only_and_mapping, scenario

from tracehouse.cli import main

# the skill's headers, as its triage script prints them (the contract a reader of its output parses)
KERNEL_HEADER = "| Kernel | Category | GPU time | Share | Launches | Python location (site share) | CPU op |"
OVERLAP_HEADER = "| Priority | Verdict | Kernel | Python scope | Formal signal | Dep risk | Recommendation |"
FUSE_HEADER = (
    "| Pattern | Confidence | Related GPU time | Share | Evidence kernels | Current kernel Python location "
    "| Candidate fused Python path | Rationale |"
)
TITLES = {
    "Kernel Table": KERNEL_HEADER,
    "Overlap Opportunity Table": OVERLAP_HEADER,
    "Fuse Opportunity Table": FUSE_HEADER,
}
SGLANG_DECODE = "inference/sglang_decode/sglang_Qwen3-8B_decode.json.gz"


def parse(text: str) -> dict[str, dict[str | None, list[list[str]]]]:
    """{table title: {stage heading (None: none): [row cells]}}, checking each block's header line."""
    tables: dict[str, dict[str | None, list[list[str]]]] = {}
    title = stage = None
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line in TITLES:
            title, stage = line, None
            tables[title] = {}
        elif line.startswith("##### "):
            stage = line.removeprefix("##### ")
        elif line.startswith("| ") and title:
            if line == TITLES[title]:
                assert lines[i + 1].startswith("| --- |"), lines[i + 1]
                tables[title][stage] = []
            elif not line.startswith("| --- |"):
                cells = [c.strip() for c in line.strip("|").split(" | ")]
                assert len(cells) == TITLES[title].count(" | ") + 1, line
                tables[title][stage].append(cells)
    return tables


def triage(cli_runner, wh, *args) -> str:
    result = cli_runner.invoke(main, ["--warehouse", str(wh.root), "report", *args, "--format", "triage"])
    assert result.exit_code == 0, result.output
    return result.output


@pytest.fixture(scope="module")
def decode(warehouses):
    """The synthesized serving-decode run of the report tests (2 ranks, two streams a rank), derived."""
    wh, runs, truths = warehouses.named(
        {"decode": scenario("serving-decode", seed=7, **REPORT_SCENARIOS["serving-decode"])}, derived=True
    )
    return wh, runs["decode"], truths["decode"]


@pytest.fixture(scope="module")
def decode_tables(decode, cli_runner_module):
    wh, run, _ = decode
    text = triage(cli_runner_module, wh, run)
    return text, parse(text)


@pytest.fixture(scope="module")
def cli_runner_module():
    from click.testing import CliRunner

    return CliRunner()


def rows(con, query: str, params: list) -> list[dict]:
    cursor = con.execute(query, params)
    names = [d[0] for d in cursor.description]
    return [dict(zip(names, r)) for r in cursor.fetchall()]


def ms(ns) -> str:
    return f"{int(ns) / 1e6:.2f} ms"


def pct(share) -> str:
    return f"{100 * share:.1f}%"


def skill_location(site: str) -> str:
    """`file(line): function` as the skill writes a location: `file:line function`."""
    where, _, func = site.rpartition("): ")
    file, _, line = where.rpartition("(")
    return f"{file}:{line} {func}"


def test_three_tables_per_stage_with_the_skill_headers(decode_tables):
    text, tables = decode_tables
    lines = text.splitlines()
    assert lines[0] == "Triage View" and lines[1] == "Mode: single-trace" and lines[2] == "Framework: SGLang"
    assert list(tables) == list(TITLES)  # the three tables, in the skill's order
    for title, blocks in tables.items():
        assert list(blocks) == ["decode"], title  # one stage, under the skill's heading
        assert blocks["decode"], f"{title}: the synthesized decode run has rows in every table"


def test_kernel_rows_are_kernel_summary_at_or_above_the_bar(decode, decode_tables):
    wh, run, _ = decode
    con = connect(wh, runs=[run])
    every = rows(
        con,
        "SELECT name, category, gpu_time_ns, share, launches FROM kernel_summary WHERE run_id = ? AND phase = 'decode' "
        "ORDER BY gpu_time_ns DESC, name",
        [run],
    )
    expected = [r for r in every if r["share"] >= 0.01]
    assert 0 < len(expected) < len(every), "the run has kernels on both sides of the 1 % bar"
    got = decode_tables[1]["Kernel Table"]["decode"]
    assert [c[:5] for c in got] == [
        [r["name"], r["category"], ms(r["gpu_time_ns"]), pct(r["share"]), str(r["launches"])]
        for r in expected
    ]


def test_kernel_sites_and_ops_from_the_launches(decode, decode_tables):
    """The location cell starts with the kernel's site of most GPU time, with its share when the kernel has
    more than one; the CPU op is the launching host op (else the launch call), read from the tables."""
    wh, run, _ = decode
    con = connect(wh, runs=[run])
    per_site: dict[str, dict[str | None, int]] = defaultdict(lambda: defaultdict(int))
    ops: dict[tuple, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for name, site, dur, op, call in con.execute(
        """
        SELECT k.name, s.site, k.dur_ns, o.name, k.launch_call FROM kernels AS k
        LEFT JOIN kernel_launch_site AS s ON s.run_id = k.run_id AND s.rank = k.rank AND s.kernel_id = k.kernel_id
        LEFT JOIN cpu_ops AS o ON o.run_id = k.run_id AND o.rank = k.rank AND o.op_id = k.cpu_op_id
        WHERE k.run_id = ? AND k.phase = 'decode'""",
        [run],
    ).fetchall():
        per_site[name][site] += dur
        if op or call:
            ops[(name, site)][op or call] += 1
    checked = 0
    for cells in decode_tables[1]["Kernel Table"]["decode"]:
        name = cells[0]
        known = {s: t for s, t in per_site[name].items() if s is not None}
        top = min(known, key=lambda s: (-known[s], s))
        first = cells[5].split("<br>")[0]
        share = known[top] / sum(per_site[name].values())
        expect = skill_location(top) + (
            f" (site share {100 * share:.0f}%)" if len(per_site[name]) > 1 else ""
        )
        assert first == expect, name
        counts = ops[(name, top)]
        assert cells[6].split("<br>")[0] == min(counts, key=lambda o: (-counts[o], o)), name
        checked += 1
    assert checked > 5


def test_kernel_locations_are_the_synthesized_launch_sites(decode, decode_tables):
    """Against the synthesizer's ground truth: each activity's launch site as simulated (truth's per-step
    launch-site templates, in stream and time order), weighted by its GPU time; the first location of each
    kernel row is the site with the most of the kernel's time, with its share when it has more than one."""
    wh, run, truth = decode
    con = connect(wh, runs=[run])
    acts: dict[tuple, list] = defaultdict(list)
    for rank, step, name, dur in con.execute(
        "SELECT rank, step, name, dur_ns FROM kernels WHERE run_id = ? AND phase = 'decode' "
        "ORDER BY rank, step, stream, start_ns, kernel_id",
        [run],
    ).fetchall():
        acts[(rank, step)].append((name, dur))
    per_site: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for step in truth["steps"]:
        expected = truth["launch_site_templates"][step["launch_sites"]]
        ours = acts.pop((step["rank"], step["step"]), [])
        assert [n for n, _ in ours] == [e[0] for e in expected]
        for (name, file, line, function), (_, dur) in zip(expected, ours):
            per_site[name][f"{file}:{line} {function}"] += dur
    assert not acts, "every decode activity is in a simulated step"
    got = decode_tables[1]["Kernel Table"]["decode"]
    for cells in got:
        sites = per_site[cells[0]]
        top = min(sites, key=lambda s: (-sites[s], s))
        share = sites[top] / sum(sites.values())
        expect = top + (f" (site share {100 * share:.0f}%)" if len(sites) > 1 else "")
        assert cells[5].split("<br>")[0] == expect, cells[0]
    assert any("(site share" in cells[5] for cells in got), "some kernel runs from two sites"


def test_overlap_rows_in_the_skill_order(decode, decode_tables):
    """Headroom rows first (most exclusive time first), then low-roi-hidden (most hidden time first); only
    reportable rows at or above the bar; the formal signal's figures are the view's."""
    wh, run, _ = decode
    con = connect(wh, runs=[run])
    view = rows(
        con,
        """
        SELECT name, verdict, priority, dependency_risk, recommendation, gpu_time_ns, share, exclusive_ns,
               hidden_ns, exclusive_ratio, hidden_ratio, reportable
        FROM overlap_opportunity WHERE run_id = ? AND phase = 'decode'""",
        [run],
    )
    shown = [r for r in view if r["reportable"] and r["share"] >= 0.01]
    head = sorted(
        (r for r in shown if r["verdict"] == "headroom"), key=lambda r: (-r["exclusive_ns"], r["name"])
    )
    hidden = sorted(
        (r for r in shown if r["verdict"] == "low-roi-hidden"), key=lambda r: (-r["hidden_ns"], r["name"])
    )
    assert head and hidden, "the synthesized run has both verdicts"
    got = decode_tables[1]["Overlap Opportunity Table"]["decode"]
    expected = [
        [
            r["priority"],
            r["verdict"],
            r["name"],
            (
                f"{r['gpu_time_ns'] / 1e3:.1f} us, share {100 * r['share']:.1f}%, "
                f"excl {100 * r['exclusive_ratio']:.1f}% / hid {100 * r['hidden_ratio']:.1f}%"
            ),
            r["dependency_risk"],
            r["recommendation"],
        ]
        for r in head + hidden
    ]
    assert [c[:3] + c[4:] for c in got] == expected


def test_fuse_rows_are_fusion_match_at_or_above_the_bar(decode, decode_tables):
    wh, run, _ = decode
    con = connect(wh, runs=[run])
    view = rows(
        con,
        """
        SELECT pattern_name, pattern_framework, status, related_gpu_time_ns, share FROM fusion_match
        WHERE run_id = ? AND phase = 'decode' AND coalesce(framework_match, true)""",
        [run],
    )
    expected = sorted(
        (r for r in view if r["share"] is not None and r["share"] >= 0.01),
        key=lambda r: (-r["related_gpu_time_ns"], r["pattern_name"], r["pattern_framework"]),
    )
    assert expected
    got = decode_tables[1]["Fuse Opportunity Table"]["decode"]
    assert [c[:4] for c in got] == [
        [r["pattern_name"], r["status"], ms(r["related_gpu_time_ns"]), pct(r["share"])] for r in expected
    ]
    for cells in got:  # every evidence kernel shown is at or above the bar, with its phase share
        for part in cells[4].split("<br>"):
            if part != "-":
                assert float(part.rsplit("(", 1)[1].rstrip("%)")) >= 1.0, part


def test_unknown_run_is_one_line(decode, cli_runner):
    wh, _, _ = decode
    result = cli_runner.invoke(
        main, ["--warehouse", str(wh.root), "report", "nosuchrun", "--format", "triage"]
    )
    assert result.exit_code != 0
    assert len(result.output.strip().splitlines()) == 1 and result.output.startswith("error:"), result.output
    assert "Traceback" not in result.output


def test_phase_not_in_the_run_is_one_line(decode, cli_runner):
    wh, run, _ = decode
    args = ["--warehouse", str(wh.root), "report", run, "--format", "triage", "--phase", "prefill"]
    result = cli_runner.invoke(main, args)
    assert result.exit_code != 0 and len(result.output.strip().splitlines()) == 1, result.output
    assert "no prefill phase" in result.output


def test_mapping_mode_takes_graph_replay_sites_from_a_graph_off_run(tmp_path, cli_runner):
    """Without capture traces a graph replay's site is the replay call; with --mapping the kernel table and
    the overlap table show the mapping run's site (same name, same ordinal in the step)."""
    wh, target_id, mapping_id = replay_only_and_mapping(tmp_path)
    plain = parse(triage(cli_runner, wh, target_id))["Kernel Table"]["decode"]
    text = triage(cli_runner, wh, target_id, "--mapping", mapping_id)
    assert "Mode: mapping-formal" in text.splitlines()
    mapped = {c[0]: c for c in parse(text)["Kernel Table"]["decode"]}
    con = connect(wh, runs=[mapping_id])
    truth = dict(
        con.execute(
            "SELECT name, python_site FROM kernel_summary WHERE run_id = ? AND phase = 'decode'",
            [mapping_id],
        ).fetchall()
    )
    replays = [c for c in plain if "replay" in c[5]]
    assert replays
    for cells in replays:
        assert mapped[cells[0]][5].split(" (site share")[0] == skill_location(truth[cells[0]]), cells[0]
    result = cli_runner.invoke(
        main,
        [
            "--warehouse",
            str(wh.root),
            "report",
            target_id,
            "--format",
            "triage",
            "--mapping",
            target_id,
        ],
    )
    assert result.exit_code != 0 and "--mapping names the run itself" in result.output


@pytest.mark.parametrize("rel", [SGLANG_DECODE])
def test_sglang_decode_trace(rel, warehouses, cli_runner):
    """The real SGLang decode trace (../shared): the three tables with the skill's headers; its largest
    kernel's GPU time and launches as read from the JSON itself."""
    require_shared()
    wh, runs, _ = warehouses.named({"decode": real(rel)}, derived=True)
    tables = parse(triage(cli_runner, wh, runs["decode"]))
    assert list(tables) == list(TITLES)
    assert "decode" in tables["Kernel Table"]
    with gzip.open(TRACES / rel, "rt") as f:
        events = json.load(f)["traceEvents"]
    total: dict[str, float] = defaultdict(float)
    count: dict[str, int] = defaultdict(int)
    for e in events:
        if e.get("cat") == "kernel" and e.get("ph") == "X":
            total[e["name"]] += float(e["dur"])
            count[e["name"]] += 1
    top = max(total, key=total.get)
    first = tables["Kernel Table"]["decode"][0]
    assert first[0] == top  # 36 launches of the largest GEMM, 2417.659 µs: "2.42 ms"
    assert first[2] == f"{total[top] / 1e3:.2f} ms" == "2.42 ms" and first[4] == str(count[top]) == "36"


def test_stage_headings_and_empty_tables_as_the_skill_lays_them_out():
    """A run whose only phase is unknown (the skill's `all`) has no stage heading; a table without rows is one
    row saying why, the other cells `-`; a second phase brings the headings back."""
    from tracehouse.reports.triage import TriageKernel, TriageStage, TriageView, render_triage

    kernel = TriageKernel("k", "gemm", 2_000_000, 0.5, 3, [])
    view = TriageView("r1", "pytorch", None, ["a.json"], 0.01, [TriageStage("unknown", [kernel], [], [])], 1)
    tables = parse(render_triage(view))
    assert list(tables["Kernel Table"]) == [None]
    assert tables["Kernel Table"][None] == [["k", "gemm", "2.00 ms", "50.0%", "3", "unresolved", "-"]]
    [[overlap]] = tables["Overlap Opportunity Table"].values()
    assert overlap[:2] == ["-", "-"] and "stream" in overlap[2] and overlap[3:] == ["-"] * 4
    [[fuse]] = tables["Fuse Opportunity Table"].values()
    assert fuse[1:] == ["-"] * 7
    view.stages.insert(0, TriageStage("prefill", [kernel], [], []))
    assert list(parse(render_triage(view))["Kernel Table"]) == ["extend/prefill", "all"]


def test_locations_in_the_skill_forms():
    from tracehouse.reports.triage import fusion_location, location

    site = "/srv/sglang/srt/layers/linear.py(405): forward"
    assert location(site) == "/srv/sglang/srt/layers/linear.py:405 forward"
    assert fusion_location(site) == "forward @ /srv/sglang/srt/layers/linear.py:405"
    assert location("<built-in method mm>") == "<built-in method mm>" and location(None) == "unresolved"
    assert fusion_location(None) == "-"

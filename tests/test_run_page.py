"""The run page read in ten seconds (issue 36 item 7): no 19-digit window or export command inline, names cut
at their end and never two alike, a timeline legend of at most 8 entries with the critical path in its own
palette, idle shading on every lane, the serving section on serving runs only, and the header's
parallelism from the ranks' names and process groups, with the versions the trace names."""

from __future__ import annotations

import copy
import gzip
import json
import re
import shutil
from html import unescape

import pytest
from conftest import TRACES, require_shared
from tracehouse.ingest.load import ingest_paths
from tracehouse.reports import svg
from tracehouse.reports.names import distinct_short, name_id, short_name, short_site
from tracehouse.reports.run import build_run_report, render_run_report
from tracehouse.reports.run_header import parallelism, versions
from tracehouse.synth import write_scenario
from tracehouse.warehouse.catalog import connect
from tracehouse.warehouse.engine import open as open_connection
from tracehouse.warehouse.rules import CATEGORIES
from tracehouse.warehouse.store import Warehouse

NINETEEN = re.compile(r"\d{19}")


@pytest.fixture(scope="module")
def reports(synth_warehouse):
    wh, runs = synth_warehouse
    out = {}
    for name, run in runs.items():
        con = open_connection(wh, runs=[run])
        out[name] = build_run_report(con, run)
        con.close()
    return out


def _section(md: str, heading: str) -> str:
    start = md.index(f"## {heading}")
    end = md.find("\n## ", start + 3)
    return md[start : end if end > 0 else None]


def test_takeaways_carry_no_window_numbers_or_commands_inline(reports):
    report = reports["serving-decode"]
    assert report.takeaways and all(t.where for t in report.takeaways)
    md = render_run_report(report, "md")
    takeaways = _section(md, "Takeaways")
    assert not NINETEEN.search(takeaways) and "tracehouse export" not in takeaways
    assert "(#open-a-finding-in-perfetto)" in takeaways
    # the windows and commands are still on the page, once, at its end
    windows = _section(md, "Open a finding in Perfetto")
    for t in report.takeaways:
        assert f"`{t.where.command}`" in windows
    html = render_run_report(report, "html")
    items = re.search(r'<ul class="takeaways">(.*?)</ul>', html, re.DOTALL).group(1)
    folded = re.sub(r'<details class="window">.*?</details>', "", items, flags=re.DOTALL)
    assert not NINETEEN.search(folded) and "tracehouse export" not in folded
    assert items.count('<details class="window">') == len(report.takeaways)


GEMMS = [
    f"void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_256x128_64x3_tn_align8_{tail}>"
    "(cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_256x128_64x3_tn_align8::Params)"
    for tail in ("stage3_warpsize2x2x1_ffma", "stage3_warpsize2x2x1_hmma", "stage4_warpsize2x2x1_hmma")
]


def test_names_are_cut_at_their_end_and_never_read_the_same():
    shown = distinct_short(GEMMS, 64)
    assert len(set(shown.values())) == len(GEMMS)
    for name, text in shown.items():
        assert text.startswith("cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm")  # the start is kept
        assert text.endswith(f"#{name_id(name)}")
    assert distinct_short(["a_kernel", "b_kernel"], 64) == {"a_kernel": "a_kernel", "b_kernel": "b_kernel"}
    assert short_name("Memset (Device)") == "Memset (Device)"
    site = "/home/user/projects/some/very/deep/package/path/models/llama/modeling_llama.py(312): forward"
    assert (
        short_site(site, 48).endswith("modeling_llama.py(312): forward") and len(short_site(site, 48)) == 48
    )


def test_two_gemms_differing_at_the_end_render_distinct_in_md_and_html(reports):
    report = copy.deepcopy(reports["serving-decode"])
    kernels = report.phases[0].kernels[:3]
    for k, name in zip(kernels, GEMMS):
        k.name = name
    md = render_run_report(report, "md")
    rows = [line.split(" | ")[0] for line in _section(md, "Kernels").splitlines() if "s16816gemm" in line]
    assert len(rows) == 3 and len(set(rows)) == 3
    html = render_run_report(report, "html")
    cells = re.findall(
        r'<td class="name" title="([^"]*s16816gemm[^"]*)"[^>]*><span class="nm">([^<]*)<', html
    )
    shown = {unescape(full): unescape(text) for full, text in cells}
    assert len(shown) == 3 and len(set(shown.values())) == 3  # the full name on hover, distinct short text
    assert all(text.startswith("cutlass::Kernel2<") for text in shown.values())


def test_no_serving_section_on_a_training_run(reports):
    training, decode = reports["training"], reports["serving-decode"]
    assert training.serving is None
    for fmt, heading in (("md", "## Serving"), ("html", "<h2>Serving")):
        assert heading not in render_run_report(training, fmt)
        assert heading in render_run_report(decode, fmt)


def _lanes_categories(step) -> None:
    """Give the step's activities every category of the vocabulary (round robin): a busy legend."""
    acts = [a for lane in step.timeline for a in lane.activities]
    for i, a in enumerate(acts):
        a.category = CATEGORIES[i % len(CATEGORIES)]


def test_timeline_legend_has_at_most_eight_entries_and_the_path_its_own_palette(reports):
    step = copy.deepcopy(reports["serving-decode"].step)
    _lanes_categories(step)
    assert len({a.category for lane in step.timeline for a in lane.activities}) == len(CATEGORIES)
    legend = str(svg.timeline_legend(step))
    lanes = re.search(r'<div class="legend lanes">(.*?)</div>', legend).group(1)
    assert 3 <= lanes.count('class="key"') <= svg.MAX_LEGEND
    assert "other (" in lanes  # the minor categories grouped
    drawing = str(svg.step_timeline(step))
    lane_fills = set(
        re.findall(r'<rect x="[^"]*" y="[^"]*" width="[^"]*" height="20" fill="([^"]*)"', drawing)
    )
    legend_fills = set(re.findall(r"background:(#[0-9a-f]{6})", lanes))
    assert lane_fills <= legend_fills  # every colour drawn in the lanes is in the legend
    path = re.search(r'<div class="legend path">(.*?)</div>', legend).group(1)
    path_fills = set(re.findall(r"background:(#[0-9a-f]{6})", path))
    assert path_fills and not path_fills & set(svg.PALETTE)  # no path kind reads as a category


def test_every_lane_shows_its_idle_time(reports):
    step = reports["serving-decode"].step
    drawing = str(svg.step_timeline(step))
    shaded = set(re.findall(r'<rect class="lane-idle" x="[^"]*" y="(\d+)"', drawing))
    assert len(step.timeline) >= 2 and len(shaded) == len(step.timeline)


@pytest.fixture(scope="module")
def tp_pp_runs(tmp_path_factory):
    """An 8-rank training run in Megatron's layout (files TP-x-PP-y, TP 4 × PP 2 in the ground truth, the
    process groups described): the whole world; its rank 0 alone; rank 0 alone with the groups undescribed."""
    root = tmp_path_factory.mktemp("tp_pp")
    folder = write_scenario("training", root / "all", ranks=8, steps=1, layers=1, seed=3, naming="megatron")
    truth = json.loads((folder / "ground_truth.json").read_text())
    first = truth["files"]["0"]
    one, bare = root / "one", root / "bare"
    one.mkdir()
    bare.mkdir()
    shutil.copy(folder / first, one)
    with gzip.open(folder / first) as f:
        trace = json.load(f)
    info = trace["distributedInfo"]
    info["pg_config"] = [g for g in info["pg_config"] if g["pg_desc"] == "default_pg"]
    with gzip.open(bare / first, "wt") as f:
        json.dump(trace, f)
    wh = Warehouse(root / "wh")
    rows = {"truth": truth["parallel"]}
    con = connect(wh)
    for key, path in (("whole", folder), ("alone", one), ("bare", bare)):
        [outcome] = ingest_paths(wh, [path], {})
        cursor = con.execute("SELECT * FROM runs WHERE run_id = ?", [outcome.run_id])
        rows[key] = dict(zip([d[0] for d in cursor.description], cursor.fetchone()))
    return rows


def test_header_parallelism_from_the_ranks_names_and_groups(tp_pp_runs):
    tp, pp = tp_pp_runs["truth"]["tp"], tp_pp_runs["truth"]["pp"]
    assert (tp, pp) == (4, 2)
    assert tp_pp_runs["whole"]["files"][0]["name"].startswith("TP-")
    assert parallelism(tp_pp_runs["whole"]) == f"8 ranks of 8: TP {tp} × PP {pp}"
    # one TP-0-PP-0 file of a world of 8: its process groups say the sizes (Megatron's descriptions) ...
    assert tp_pp_runs["alone"]["n_ranks"] == 1
    assert parallelism(tp_pp_runs["alone"]) == f"rank 0 of 8: TP {tp} × PP {pp}"
    # ... and without them nothing says the sizes: never `TP 1`
    bare = parallelism(tp_pp_runs["bare"])
    assert bare == "rank 0 of 8 (how the world is split is not in the trace)"
    # a group whose description names two dimensions gives neither
    row = dict(tp_pp_runs["bare"])
    meta = json.loads(row["metadata"])
    next(iter(meta.values()))["distributedInfo"]["pg_config"].append(
        {"pg_name": "3", "pg_desc": "TENSOR_AND_DATA_PARALLEL_GROUP", "pg_size": 4, "ranks": [0, 1, 2, 3]}
    )
    row["metadata"] = json.dumps(meta)
    assert parallelism(row) == bare


def test_header_versions_from_the_trace(tp_pp_runs):
    # synth/scenario.py writes cuda_runtime_version 12080 and NCCL 2.27.3 into every rank's head
    assert versions(tp_pp_runs["whole"]) == "CUDA 12.8, NCCL 2.27.3"


def test_header_of_real_traces():
    """Hand-read from the files: the B200 trace is rank 0 of 8 with no group description naming a dimension
    (so no split), CUDA runtime 12090 and NCCL 2.27.5; the H100 trace's metadata names torch 2.6.0+cu124."""
    traces = require_shared()
    with gzip.open(traces / "nvidia/b200_eager_rank0.json.gz") as f:
        b200 = json.load(f)
    info = b200["distributedInfo"]
    assert (info["rank"], info["world_size"]) == (0, 8)
    meta = {k: v for k, v in b200.items() if k not in ("traceEvents", "deviceProperties")}
    row = {"files": [{"name": "b200_eager_rank0.json.gz", "rank": 0}], "n_ranks": 1, "world_size": 8}
    row["metadata"] = json.dumps({"b200_eager_rank0.json.gz": meta})
    assert parallelism(row) == "rank 0 of 8 (how the world is split is not in the trace)"
    assert versions(row) == "CUDA 12.9, NCCL 2.27.5"
    with gzip.open(TRACES / "nvidia/h100_qwen1.5-0.5b.json.gz") as f:
        h100 = json.load(f)
    meta = {k: v for k, v in h100.items() if k not in ("traceEvents", "deviceProperties")}
    assert versions({"metadata": json.dumps({"f": meta})}).startswith("torch 2.6.0+cu124, CUDA 12.4")


def _union(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[list[int]] = []
    for a, b in sorted(spans):
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return [(a, b) for a, b in out]


def _minus(spans, holes) -> int:
    """Total length of `spans` outside `holes` (both unions)."""
    total = 0
    for a, b in spans:
        cut = sum(max(0, min(b, d) - max(a, c)) for c, d in holes)
        total += (b - a) - cut
    return total


def test_other_steps_work_is_drawn_in_the_lanes_not_left_blank(warehouses):
    """steps-interleaved (synth/situations/steps_interleave.py): step 1's wall holds 150 µs in which only step
    0's GEMMs run (hand-computed there), and step 2's all-reduce starts inside it. The lanes draw those activities as other steps' work, and what they
    cover outside step 1's own activities, inside its GPU span, is that 150 µs (step_breakdown.other_steps_ns)."""
    from warehouses import situation

    built = warehouses.get([situation("steps-interleaved")], derived=True)
    con = open_connection(built.warehouse, runs=[built.run_ids[0]])
    report = build_run_report(con, built.run_ids[0])
    con.close()
    step = report.step
    assert step.step == 1 and step.other_steps_ns == 150_000
    others = [a for lane in step.timeline for a in lane.others]
    # step 0's GEMMs, and step 2's all-reduce (its host starts at 600 µs, inside step 1's wall)
    assert {a.name.split(":")[0] for a in others} == {"step 0", "step 2"}
    own = _union([(a.start_ns, a.end_ns) for lane in step.timeline for a in lane.activities])
    span = (own[0][0], own[-1][1])
    inside = _union(
        [(max(a.start_ns, span[0]), min(a.end_ns, span[1])) for a in others if a.end_ns > span[0]]
    )
    assert _minus(inside, own) == step.other_steps_ns
    drawing = str(svg.step_timeline(step))
    assert 'class="other-steps"' in drawing
    assert "other steps&#x27; work" in str(svg.timeline_legend(step)) or "other steps' work" in str(
        svg.timeline_legend(step)
    )

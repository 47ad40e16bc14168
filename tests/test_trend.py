"""Trend and regression detection (issue 7): the end-to-end trend command over synthesized histories, and
the regression rule's false-flag rate on pure noise.

What the trend and regression views conclude from given figures is checked by their view cases, rows in,
rows out (tests/views/trend/, tests/views/regression/; issue 16): the baseline and noise windows, the
history that a judgement needs, the Student-t band at each history length, the threshold, the
materiality rules, the first commit of a lasting shift and the flags while the baseline lags it.

Here, two histories (synth seeds 2 and 5: every run has its own seed, so every kernel duration is
redrawn, ±2.5 %, like run-to-run jitter of real serving runs), each of 30 runs of `serving-decode`
(2 ranks, 3 steps, 2 layers; no capture traces: a small run ingests in well under a second), ordered by
commit_time:
  c00 .. c09            as synthesized
  c10 .. SHIFT_AT - 1   every nvjet GEMM +1 % (inside the noise: must not be flagged)
  SHIFT_AT ..           the MLA attention kernel family +8 % (the regression)
Seed 2 shifts at c20 (the baseline has caught up by the last run), seed 5 at c27 (its last run is still
flagged: `--fail-on-regression` fails on it alone). Ingested, then read by `tracehouse trend`, the
attention family must be flagged at SHIFT_AT and the runs right after it, naming SHIFT_AT as the first
commit, and nothing else over the whole history.
"""

from __future__ import annotations

import json
import random
from datetime import datetime, timedelta, timezone

import pyarrow as pa
import pytest
from tracehouse.synth.history import commit_sha, write_history
from warehouses import built_once

N_RUNS, DRIFT_FROM = 30, 10
SHIFT_AT = {2: 20, 5: 27}  # seed -> index of the regressed commit
SEEDS = sorted(SHIFT_AT)
ATTN = "BatchMLAPagedAttention"
ATTN_FAMILY = {
    "category.attention_ns_per_step",
    "kernel.flashinfer::mla::BatchMLAPagedAttentionKernel_ns_per_step",
}
LAST_RUN_REGRESSED = "decode-seed5"  # shift 3 runs before the end: the last run is still flagged


def _series(seed: int) -> str:
    return f"decode-seed{seed}"


@pytest.fixture(scope="module")
def history(tmp_path_factory):
    """(the warehouse of SEEDS' histories, derived; {seed: its runs}), built once per test session."""
    return built_once(tmp_path_factory, "trend-history", _history)


def _history(root):
    import tracehouse.ingest.run  # noqa: F401
    from tracehouse.ingest.load import ingest_paths
    from tracehouse.warehouse.store import Warehouse

    from tracehouse import ingest

    wh = Warehouse(root / "wh")
    runs = {}
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(ingest.run.os, "cpu_count", lambda: 1)  # in-process ingest: no pool to spawn per run
        for seed in SEEDS:
            runs[seed] = write_history(
                root / "traces",
                commits=N_RUNS,
                series=((_series(seed), 2),),
                regression_at=SHIFT_AT[seed],
                slow_kernel=(ATTN, 1.08),
                drift=(DRIFT_FROM, "nvjet", 1.01),
                steps=3,
                layers=2,
                seed=seed,
                captures=False,
            )
            for run in runs[seed]:
                out = ingest_paths(
                    wh, [run.path], labels=run.labels, analyse=False
                )  # trend reads no report views
                assert out[0].run_id and not out[0].problems, out[0].problems
    # derived, as `tracehouse ingest` leaves runs: the trend reads each run's kept run_metrics (a run not
    # derived is computed by its reader with the same rows: tests/test_derived.py)
    from tracehouse.warehouse.derived import derive

    assert not any(derive(wh).values())
    return wh, runs


def _noise_tables(lines: int, runs: int, seed: int):
    """`lines` metrics of pure noise (normal, 5 % sd: the threshold never decides) over `runs` runs."""
    rng = random.Random(seed)
    t0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
    run_rows, metric_rows = [], []
    for i in range(runs):
        run_id = f"r{i:04d}"
        run_rows.append(
            {
                "run_id": run_id,
                "ingested_at": t0,
                "labels": [("series", "noise")],
                "framework": "x",
                "model": "m",
                "hardware": "h",
                "commit": f"c{i:04d}",
                "commit_time": (t0 + timedelta(hours=i)).strftime("%Y-%m-%dT%H:%M:%SZ"),
                "series": "noise",
            }
        )
        for m in range(lines):
            metric_rows.append(
                {
                    "run_id": run_id,
                    "rank": None,
                    "phase": "decode",
                    "metric": f"noise{m:03d}",
                    "value": rng.gauss(1000.0, 50.0),
                    "better": "lower",
                    "spread": 0.0,
                }
            )
    runs_t = pa.Table.from_pylist(
        run_rows,
        schema=pa.schema(
            [
                ("run_id", pa.string()),
                ("ingested_at", pa.timestamp("us", tz="UTC")),
                ("labels", pa.map_(pa.string(), pa.string())),
                ("framework", pa.string()),
                ("model", pa.string()),
                ("hardware", pa.string()),
                ("commit", pa.string()),
                ("commit_time", pa.string()),
                ("series", pa.string()),
            ]
        ),
    )
    rows_t = pa.Table.from_pylist(
        metric_rows,
        schema=pa.schema(
            [
                ("run_id", pa.string()),
                ("rank", pa.int32()),
                ("phase", pa.string()),
                ("metric", pa.string()),
                ("value", pa.float64()),
                ("better", pa.string()),
                ("spread", pa.float64()),
            ]
        ),
    )
    return runs_t, rows_t


def test_band_is_a_three_sigma_test_on_pure_noise():
    """On unchanged runs, "worse by more than 3 x noise" must let through about the one-sided 3-sigma
    share (0.135 %), also while the noise rests on a few runs. A plain 3 x 1.4826 x MAD of the history
    lets through ~1.5 % (4 % at 6 runs of history): one chance flag in every third line of 32 runs."""
    from tracehouse.reports.trend import evaluate

    con = evaluate(*_noise_tables(lines=300, runs=32, seed=1))
    judged, flagged, early, naive = con.execute(
        "SELECT count(*) FILTER (WHERE n_history >= 5), count(*) FILTER (WHERE flagged), "
        "count(*) FILTER (WHERE flagged AND n_history < 10), "
        "count(*) FILTER (WHERE n_history >= 5 AND value - baseline > 3 * noise * sqrt(1 + 1.5708 / n_baseline)) "
        "FROM regression"
    ).fetchone()
    assert judged == 300 * 27
    assert flagged <= 0.00135 * judged * 2, (flagged, judged)  # ~0.08 % expected: 6 of 8,100
    assert early <= 0.00135 * 300 * 5 * 2  # the 5 first judged runs of each line
    assert naive > 0.01 * judged  # what the widening removes


def test_cli_trend_formats_and_fail_on_regression(history, cli_runner, tmp_path):
    from tracehouse.cli import main

    wh, runs = history
    base = ["--warehouse", str(wh.root), "trend"]
    res = cli_runner.invoke(main, base + ["--fail-on-regression", "--format", "json"])
    assert res.exit_code == 3, res.output
    doc = json.loads(res.stdout)
    assert {g["series"] for g in doc["failing"]} == {LAST_RUN_REGRESSED}
    assert {g["first_commit"] for g in doc["failing"]} == {commit_sha(SHIFT_AT[5])}
    assert {g["metric"] for g in doc["failing"]} == ATTN_FAMILY
    assert {(g["series"], g["first_commit"]) for g in doc["regressions"]} == {
        (_series(s), commit_sha(SHIFT_AT[s])) for s in SEEDS
    }
    # over the whole history nothing but the attention family is flagged (not the +1 % GEMM drift), only at
    # the shift and in the runs right after it (while the baseline of the previous 5 runs still lags: at
    # most the 2 after it), and both metrics of the family are flagged at the shift
    assert {g["metric"] for g in doc["regressions"]} == ATTN_FAMILY
    for seed in SEEDS:
        flagged = [g for g in doc["regressions"] if g["series"] == _series(seed)]
        assert {g["commit"] for g in flagged} <= {
            commit_sha(i) for i in range(SHIFT_AT[seed], SHIFT_AT[seed] + 3)
        }
        assert {(g["metric"], g["commit"]) for g in flagged} >= {
            (m, commit_sha(SHIFT_AT[seed])) for m in ATTN_FAMILY
        }
        [at] = [
            g
            for g in flagged
            if g["metric"] == "category.attention_ns_per_step" and g["commit"] == commit_sha(SHIFT_AT[seed])
        ]
        assert 5 < at["change_pct"] < 11  # the +8 % of the family, seen in the category
    # every run of a history is a point of each line
    assert all(
        len(m["points"]) == N_RUNS for s in doc["series"] for m in s["metrics"] if m["metric"] == "steps"
    )

    res = cli_runner.invoke(
        main,
        base
        + [
            "--where",
            f"series={_series(2)}",
            "--metric",
            "category.gemm*",
            "--metric",
            "step_time_median_ns",
            "--fail-on-regression",
            "--last",
            "10",
        ],
    )
    assert res.exit_code == 0, res.output
    assert "category.gemm_ns_per_step" in res.stdout and "attention" not in res.stdout
    assert any(ch in res.stdout for ch in "▁▂▃▄▅▆▇█")  # sparklines

    since = runs[2][N_RUNS - 7].commit_time[:10]
    out = tmp_path / "trend.html"
    res = cli_runner.invoke(
        main, base + ["--where", f"series={_series(2)}", "--since", since, "--format", "html", "-o", str(out)]
    )
    assert res.exit_code == 0, res.output
    html = out.read_text()
    assert (
        "<svg" in html
        and "<polygon" in html
        and "http://" not in html.replace("http://www.w3.org/2000/svg", "")
    )
    assert "flashinfer::mla::BatchMLAPagedAttentionKernel" in html and "<script" not in html
    shown = sum(1 for r in runs[2] if r.commit_time >= since)
    res = cli_runner.invoke(
        main, base + ["--where", f"series={_series(2)}", "--since", since, "--format", "json"]
    )
    doc = json.loads(res.stdout)
    assert all(
        len(m["points"]) == shown for s in doc["series"] for m in s["metrics"] if m["metric"] == "steps"
    )

    res = cli_runner.invoke(main, base + ["--where", "series=nothing-here"])  # matching nothing is an error
    assert res.exit_code == 1 and "no run matches --where series=nothing-here" in res.stderr


def _shifted_tables(runs: int, shift_at: int | None):
    """One metric over `runs` runs: 1000 ± 0.5 (a quiet line), +10 % from run `shift_at` on."""
    runs_t, metrics_t = _noise_tables(lines=1, runs=runs, seed=3)
    values = [1000.0 + (i % 3 - 1) * 0.5 for i in range(runs)]
    if shift_at is not None:
        values = [v * (1.10 if i >= shift_at else 1.0) for i, v in enumerate(values)]
    metrics_t = metrics_t.set_column(
        metrics_t.schema.get_field_index("value"), "value", pa.array(values, pa.float64())
    )
    return runs_t, metrics_t


def test_too_few_runs_are_said_and_the_gate_cannot_pass():
    """Under min_history + 1 runs the rule cannot judge the last run: the report says so ('3 runs: need at
    least 6 to flag a regression'), not 'No regression flagged', and the gate exits 1 with that line, even
    on a +10 % change."""
    from tracehouse.reports.trend import build_trend_from_tables, gate, render_trend

    report = build_trend_from_tables(*_shifted_tables(runs=3, shift_at=2))
    [series] = report.series
    assert not series.judged and series.too_few_runs == "3 runs: need at least 6 to flag a regression"
    assert report.regressions == [] and report.unjudged == [series]
    code, lines = gate(report)
    assert code == 1 and lines == ["cannot judge noise decode: 3 runs: need at least 6 to flag a regression"]
    md = render_trend(report, "md")
    assert "**Not judged.**" in md and "No regression flagged" not in md
    judged = build_trend_from_tables(*_shifted_tables(runs=8, shift_at=None))
    assert judged.series[0].judged and gate(judged) == (0, [])
    assert "No regression flagged." in render_trend(judged, "md")


def test_a_shift_is_listed_once_at_the_commit_where_it_starts():
    """A lasting +10 % shift is flagged at its first run and again while the baseline (the median of the
    previous 5 runs) still lags; the regression table lists it once, at the commit where it starts, with
    how many runs were flagged."""
    from tracehouse.reports.trend import build_trend_from_tables

    report = build_trend_from_tables(*_shifted_tables(runs=12, shift_at=8))
    [shift] = report.regressions
    assert shift.first_commit == "c0008" and shift.commit == "c0008"
    assert shift.flagged_runs >= 2  # c0008 and c0009 at least: the baseline lags for 2 runs
    points = report.series[0].metrics[0].points
    assert shift.flagged_runs == sum(p.flagged for p in points)
    assert shift.in_last_run == points[-1].flagged


def test_the_chart_does_not_turn_a_small_change_into_a_cliff():
    """Two runs 0.2 % apart: the y axis spans at least 10 % of the value (charts.MIN_RELATIVE_SPAN), so
    the two points sit within a few pixels, not at the top and bottom of the plot."""
    import re

    from tracehouse.reports.charts import line_chart

    svg = str(line_chart([{"value": 1000.0, "x_label": "a"}, {"value": 1002.0, "x_label": "b"}]))
    ys = [float(y) for y in re.findall(r'<circle cx="[\d.]+" cy="([\d.]+)"', svg)]
    plot_height = 150 - 10 - 30
    assert len(ys) == 2 and abs(ys[0] - ys[1]) < 0.03 * plot_height, ys
    steep = str(line_chart([{"value": 1000.0, "x_label": "a"}, {"value": 1500.0, "x_label": "b"}]))
    ys = [float(y) for y in re.findall(r'<circle cx="[\d.]+" cy="([\d.]+)"', steep)]
    assert abs(ys[0] - ys[1]) > 0.7 * plot_height  # a real +50 % still fills the chart


# ---------------------------------------------------------------- the trend of one CUDA-graph node (issue 38)
# A history of 12 runs of serving-decode with Kineto's graph node ids (synth/graph_nodes.py): from commit 8
# on, one node of the replayed decode graph (the body's 25th activity: layer 1's MLA attention; layer 0's
# runs the same kernel as another node) runs 1.5x longer (synth Cfg.slow_node). The truth names the node by
# its id (ground_truth.json anomalies.slow_node). `trend --graph-nodes` must list that node, at commit 8,
# and no other node.

NODE_RUNS, NODE_SHIFT, NODE_INDEX = 12, 8, 25


@pytest.fixture(scope="module")
def node_history(tmp_path_factory):
    """(the warehouse of a history whose graph node slows at NODE_SHIFT, derived; its runs; the node),
    built once per test session."""
    return built_once(tmp_path_factory, "trend-node-history", _node_history)


def _node_history(root):
    import tracehouse.ingest.run  # noqa: F401
    from tracehouse.ingest.load import ingest_paths
    from tracehouse.synth import write_scenario
    from tracehouse.synth.truth import load_truth
    from tracehouse.warehouse.store import Warehouse

    from tracehouse import ingest

    wh = Warehouse(root / "wh")
    runs = write_history(
        root / "traces",
        commits=NODE_RUNS,
        series=(("decode-nodes", 2),),
        regression_at=NODE_SHIFT,
        slow_kernel=None,
        slow_node=(NODE_INDEX, 1.5),
        steps=3,
        layers=2,
        seed=7,
        captures=False,
    )
    plain = write_scenario("serving-decode", root / "plain", ranks=1, steps=2, layers=1)  # no node ids
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(ingest.run.os, "cpu_count", lambda: 1)
        for run in runs:
            out = ingest_paths(wh, [run.path], labels=run.labels, analyse=False)
            assert out[0].run_id and not out[0].problems, out[0].problems
        out = ingest_paths(wh, [plain], labels={"series": "plain"}, analyse=False)
        assert out[0].run_id
    from tracehouse.warehouse.derived import derive

    assert not any(derive(wh).values())  # derived, as `tracehouse derive` leaves runs (one batch)
    slow_node, factor = load_truth(runs[-1].path)["anomalies"]["slow_node"]
    assert factor == 1.5 and load_truth(runs[0].path)["anomalies"]["slow_node"] is None
    return wh, runs, slow_node


def test_graph_node_trend_names_the_node_at_the_commit_where_it_slowed(node_history, cli_runner):
    from tracehouse.reports.graph_node_trend import metric_name

    from tracehouse.cli import main
    from tracehouse.mcp_server import Reader, trend

    wh, runs, slow_node = node_history
    base = ["--warehouse", str(wh.root), "trend", "--where", "series=decode-nodes"]
    res = cli_runner.invoke(main, base + ["--graph-nodes", "--format", "json", "--fail-on-regression"])
    assert res.exit_code in (0, 3), res.output
    doc = json.loads(res.stdout)
    slow = metric_name(1, slow_node)
    [shift] = doc["regressions"]  # that node and nothing else (no other node, nor the step time)
    assert shift["metric"] == slow and shift["first_commit"] == commit_sha(NODE_SHIFT)
    assert shift["commit"] == commit_sha(NODE_SHIFT) and shift["change_pct"] > 30
    assert "BatchMLAPagedAttention" in shift["about"] and "(model.layers.1)" in shift["about"]
    [series] = doc["series"]
    lines = {m["metric"]: m for m in series["metrics"]}
    assert "step_time_median_ns" in lines  # the materiality reference, shown beside the nodes
    nodes = {m for m in lines if m.startswith("graph_node.1.")}
    assert len(nodes) > 40 and slow in nodes  # every node of the decode graph (2 layers)
    flagged = {(m, p["commit"]) for m, line in lines.items() for p in line["points"] if p["flagged"]}
    assert {m for m, _ in flagged} == {slow}
    assert min(runs[[r.commit for r in runs].index(c)].index for _, c in flagged) == NODE_SHIFT
    # layer 0's node of the same kernel did not move: its own line, not flagged
    twin = [m for m in nodes if lines[m]["about"] == shift["about"].replace("layers.1", "layers.0")]
    assert len(twin) == 1 and not any(p["flagged"] for p in lines[twin[0]]["points"])
    assert res.exit_code == (3 if lines[slow]["points"][-1]["flagged"] else 0)

    # the MCP tool follows one node: the same line, its only node
    one = json.loads(
        trend(Reader(wh), {"series": "decode-nodes"}, graph_nodes=[str(slow_node)], format="json")
    )
    [s1] = one["series"]
    assert {m["metric"] for m in s1["metrics"]} == {slow, "step_time_median_ns"}
    [followed] = [m for m in s1["metrics"] if m["metric"] == slow]
    assert [p["value"] for p in followed["points"]] == [p["value"] for p in lines[slow]["points"]]
    assert [g["metric"] for g in one["regressions"]] == [slow]


def test_graph_node_trend_says_what_it_cannot_do(node_history, cli_runner):
    """One run: 'need at least 6' and the gate cannot pass; a node id no run has, and runs without graph
    node ids: one line each, exit 1."""
    from tracehouse.cli import main

    wh, runs, _ = node_history
    base = ["--warehouse", str(wh.root), "trend"]
    res = cli_runner.invoke(
        main, base + ["--where", f"commit={runs[0].commit}", "--graph-nodes", "--fail-on-regression"]
    )
    assert res.exit_code == 1 and "1 run: need at least 6 to flag a regression" in res.stderr
    res = cli_runner.invoke(main, base + ["--where", f"commit={runs[0].commit}", "--graph-node", "12345"])
    assert res.exit_code == 1 and "--graph-node 12345 matches no graph node of these runs" in res.stderr
    assert "Traceback" not in res.output
    res = cli_runner.invoke(main, base + ["--where", "series=plain", "--graph-nodes"])
    assert res.exit_code == 1 and "these runs have no CUDA-graph node ids" in res.stderr

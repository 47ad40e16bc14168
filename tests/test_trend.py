"""Trend and regression detection over synthesized histories (issue 7).

Five independent histories, one series each (synth seeds 1-5: every run of every history has its own
seed, so every kernel duration is redrawn, ±2.5 %, like run-to-run jitter of real serving runs), each
of 30 runs of `serving-decode` (2 ranks, 3 steps, 2 layers; no capture traces: a small run ingests in
well under a second), ordered by commit_time:
  c00 .. c09            as synthesized
  c10 .. SHIFT_AT - 1   every nvjet GEMM +1 % (inside the noise: must not be flagged)
  SHIFT_AT ..           the MLA attention kernel family +8 % (the regression)
SHIFT_AT differs per history (20 to 27), so some histories end while the baseline still lags the
shift and others show the baseline catch up. The rule (sql/regression.sql) must flag the attention
family at SHIFT_AT (and, while the baseline lags, the next runs, naming SHIFT_AT as the first commit),
and nothing else over the whole history, in every one of them.
"""

from __future__ import annotations

import itertools
import json
import random
from datetime import datetime, timedelta, timezone

import pyarrow as pa
import pytest

from synth.history import commit_sha, write_history

N_RUNS, DRIFT_FROM = 30, 10
SHIFT_AT = {1: 22, 2: 20, 3: 25, 4: 23, 5: 27}  # seed -> index of the regressed commit
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
    import ingest.run
    from ingest.load import ingest_paths
    from warehouse.store import Warehouse

    root = tmp_path_factory.mktemp("trend")
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
    return wh, runs


@pytest.fixture(scope="module")
def evaluated(history):
    """The rule views over every history, from the warehouse as `tracehouse trend` reads it (runs, and
    run_metrics from the per-run store, which this also fills for the CLI test)."""
    from reports.trend import evaluate, trend_inputs
    from warehouse.catalog import connect

    wh, _ = history
    return evaluate(*trend_inputs(connect(wh), warehouse=wh))


COLS = [
    "series",
    "phase",
    "metric",
    "seq",
    "run_id",
    "commit",
    "value",
    "baseline",
    "noise",
    "band",
    "change_pct",
    "n_history",
    "n_baseline",
    "flagged",
    "first_commit",
    "shift_start",
]


def _rows(con, where: str = "TRUE") -> list[dict]:
    rows = con.execute(
        f"SELECT {', '.join(COLS)} FROM regression WHERE {where} ORDER BY series, metric, seq"
    ).fetchall()
    return [dict(zip(COLS, r)) for r in rows]


@pytest.fixture(scope="module")
def regressions(evaluated):
    by_series: dict[str, list[dict]] = {}
    for r in _rows(evaluated):
        by_series.setdefault(r["series"], []).append(r)
    return by_series


def _check_flags(flagged: list[dict], shift_commit: str) -> None:
    assert flagged, "the +8 % attention regression was not flagged"
    assert {r["metric"] for r in flagged} <= ATTN_FAMILY, [(r["metric"], r["commit"]) for r in flagged]
    assert {r["first_commit"] for r in flagged} == {shift_commit}
    starts = {(r["metric"], r["commit"]) for r in flagged if r["shift_start"]}
    assert starts == {(m, shift_commit) for m in ATTN_FAMILY}


@pytest.mark.parametrize("seed", SEEDS)
def test_flags_exactly_the_injected_commit_and_metric(regressions, seed):
    rows = regressions[_series(seed)]
    flagged = [r for r in rows if r["flagged"]]
    _check_flags(flagged, commit_sha(SHIFT_AT[seed]))
    # every run of the history is on the lines; the flags are the shift and the runs right after it
    # (while the baseline of the previous 5 runs still lags), never more than 3 runs after it
    assert max(r["seq"] for r in rows) == N_RUNS
    assert all(SHIFT_AT[seed] < r["seq"] <= SHIFT_AT[seed] + 3 for r in flagged)
    attn = [
        r for r in rows if r["metric"] == "category.attention_ns_per_step" and r["seq"] == SHIFT_AT[seed] + 1
    ]
    assert 5 < attn[0]["change_pct"] < 11


@pytest.mark.parametrize("seed", SEEDS)
def test_one_percent_change_inside_the_noise_is_not_flagged(regressions, seed):
    rows = regressions[_series(seed)]
    gemm = [r for r in rows if r["metric"] == "category.gemm_ns_per_step"]
    assert not any(r["flagged"] for r in gemm)
    at = gemm[DRIFT_FROM]  # the first +1 % run (seq is 1-based)
    assert at["commit"] == commit_sha(DRIFT_FROM) and at["noise"] > 0
    assert abs(at["change_pct"]) < 3 and abs(at["value"] - at["baseline"]) < at["band"]
    late = [r["change_pct"] for r in gemm if DRIFT_FROM < r["seq"] <= DRIFT_FROM + 3]
    assert all(abs(c) < 3 for c in late), late


def test_history_is_judged_on_the_noise_window(evaluated):
    """n_history counts the runs the noise comes from (up to noise_window = 20), not the 5 of the
    baseline: a min_history above k no longer silences every flag."""
    rows = _rows(evaluated, f"series = '{_series(1)}' AND metric = 'category.attention_ns_per_step'")
    assert [(r["n_history"], r["n_baseline"]) for r in rows[:3]] == [(0, 0), (1, 1), (2, 2)]
    assert {(r["n_history"], r["n_baseline"]) for r in rows[21:]} == {(20, 5)}
    # no band before min_history (5) runs; then it narrows as the history grows: ~6 x noise_mult at 6 runs,
    # ~1.5 x at 20
    assert [r["band"] for r in rows[:5]] == [None] * 5
    widen = [r["band"] / (3 * r["noise"] * (1 + 1.5708 / r["n_baseline"]) ** 0.5) for r in rows[5:]]
    assert widen[1] > 4 and 1.45 < widen[-1] < 1.5  # 6 runs of history; 20
    assert all(a > b for a, b in itertools.pairwise(widen[:16]))
    assert widen[15:] == pytest.approx([widen[-1]] * len(widen[15:]))
    evaluated.execute("CREATE TABLE saved_params AS SELECT * FROM trend_params")
    try:
        evaluated.execute(
            "CREATE OR REPLACE VIEW trend_params AS SELECT * REPLACE (15 AS min_history) FROM saved_params"
        )
        flagged = _rows(evaluated, "flagged")
        assert {(r["series"], r["first_commit"]) for r in flagged} == {
            (_series(s), commit_sha(SHIFT_AT[s])) for s in SEEDS
        }
        assert min(r["n_history"] for r in flagged) >= 15
    finally:
        evaluated.execute("CREATE OR REPLACE VIEW trend_params AS SELECT * FROM saved_params")


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
    from reports.trend import evaluate

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


def test_cli_trend_formats_and_fail_on_regression(history, evaluated, cli_runner, tmp_path):
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

    since = runs[1][N_RUNS - 7].commit_time[:10]
    out = tmp_path / "trend.html"
    res = cli_runner.invoke(
        main, base + ["--where", f"series={_series(1)}", "--since", since, "--format", "html", "-o", str(out)]
    )
    assert res.exit_code == 0, res.output
    html = out.read_text()
    assert (
        "<svg" in html
        and "<polygon" in html
        and "http://" not in html.replace("http://www.w3.org/2000/svg", "")
    )
    assert "flashinfer::mla::BatchMLAPagedAttentionKernel" in html and "<script" not in html
    shown = sum(1 for r in runs[1] if r.commit_time >= since)
    res = cli_runner.invoke(
        main, base + ["--where", f"series={_series(1)}", "--since", since, "--format", "json"]
    )
    doc = json.loads(res.stdout)
    assert all(
        len(m["points"]) == shown for s in doc["series"] for m in s["metrics"] if m["metric"] == "steps"
    )

    res = cli_runner.invoke(main, base + ["--where", "series=nothing-here"])  # matching nothing is an error
    assert res.exit_code == 1 and "no run matches --where series=nothing-here" in res.stderr

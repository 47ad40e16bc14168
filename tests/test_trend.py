"""Trend and regression detection over a synthesized history (issue 7).

History: 32 runs of `serving-decode` (2 ranks, 3 steps, 2 layers), one series, ordered by commit_time.
  c00-c14  as synthesized                               (run-to-run noise: each run has its own seed,
  c15-c28  every nvjet GEMM +1 % (inside the noise)      so every kernel duration is redrawn, ±2.5 % each)
  c29-c31  the MLA attention kernel family +8 %
The rule (sql/regression.sql) must flag the attention family at c29 — and, while the baseline still lags
the shift, at c30 and c31 naming c29 as the first commit — and nothing else over the whole history.
Ingest of one such run takes ~3 s on a busy 2-core box, so the history is ingested once per module
(in-process: one rank at a time, no worker pool to spawn); other noise realizations ("seeds") reuse
the ingested runs' metrics in other orders (build_trend_from_tables runs the same SQL).
"""

from __future__ import annotations

import json
import random
from datetime import datetime, timedelta, timezone

import pyarrow as pa
import pytest

from synth import write_scenario

N_RUNS, PLUS1_FROM, SHIFT_AT = 32, 15, 29
ATTN = "BatchMLAPagedAttention"
ATTN_FAMILY = {"category.attention_ns_per_step", "kernel.flashinfer::mla::BatchMLAPagedAttentionKernel_ns_per_step"}
SERIES = "decode-bench"


def _commit(i: int) -> str:
    return f"c{i:02d}"


def _time(i: int) -> str:
    return (datetime(2026, 1, 1, tzinfo=timezone.utc) + timedelta(hours=i)).strftime("%Y-%m-%dT%H:%M:%SZ")


@pytest.fixture(scope="module")
def history(tmp_path_factory):
    import ingest.run
    from warehouse.load import ingest_paths
    from warehouse.store import Warehouse

    root = tmp_path_factory.mktemp("trend")
    wh = Warehouse(root / "wh")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(ingest.run.os, "cpu_count", lambda: 1)   # in-process ingest: no pool to spawn per run
        for i in range(N_RUNS):
            slow = (ATTN, 1.08) if i >= SHIFT_AT else ("nvjet", 1.01) if i >= PLUS1_FROM else None
            d = write_scenario("serving-decode", root / f"run{i:02d}", ranks=2, steps=3, layers=2,
                               seed=7_000 + i, slow_kernel=slow)
            out = ingest_paths(wh, [d], labels={"commit": _commit(i), "commit_time": _time(i), "series": SERIES})
            assert out[0].run_id and not out[0].problems
    return wh


@pytest.fixture(scope="module")
def regressions(history):
    from warehouse.catalog import connect

    con = connect(history)
    cols = ["series", "phase", "metric", "seq", "run_id", "commit", "value", "baseline", "noise", "change_pct",
            "flagged", "first_commit", "shift_start"]
    rows = con.execute(f"SELECT {', '.join(cols)} FROM regression ORDER BY metric, seq").fetchall()
    return [dict(zip(cols, r)) for r in rows]


def _check_flags(flagged: list[dict], shift_commit: str) -> None:
    assert flagged, "the +8 % attention regression was not flagged"
    assert {r["metric"] for r in flagged} <= ATTN_FAMILY, [(r["metric"], r["commit"]) for r in flagged]
    assert {r["first_commit"] for r in flagged} == {shift_commit}
    starts = {(r["metric"], r["commit"]) for r in flagged if r.get("shift_start", r["commit"] == shift_commit)}
    assert starts == {(m, shift_commit) for m in ATTN_FAMILY}


def test_flags_exactly_the_injected_commit_and_metric(regressions):
    flagged = [r for r in regressions if r["flagged"]]
    _check_flags(flagged, _commit(SHIFT_AT))
    # every run of the history is on the lines, and the run-level figures stay inside the band
    assert max(r["seq"] for r in regressions) == N_RUNS
    attn = [r for r in regressions if r["metric"] == "category.attention_ns_per_step" and r["commit"] == _commit(SHIFT_AT)]
    assert 5 < attn[0]["change_pct"] < 11


def test_one_percent_change_inside_the_noise_is_not_flagged(regressions):
    gemm = [r for r in regressions if r["metric"] == "category.gemm_ns_per_step"]
    at = next(r for r in gemm if r["commit"] == _commit(PLUS1_FROM))
    assert not any(r["flagged"] for r in gemm)
    assert at["noise"] > 0
    late = [r["change_pct"] for r in gemm if PLUS1_FROM <= r["seq"] - 1 < PLUS1_FROM + 3]
    assert all(abs(c) < 3 for c in late), late


@pytest.fixture(scope="module")
def pool(history):
    """The ingested runs' rank-NULL metrics and labels, fetched once (run_metrics over 32 runs is slow)."""
    from warehouse.catalog import connect

    con = connect(history)
    runs = {r[0]: r for r in con.execute(
        "SELECT run_id, ingested_at, labels, framework, model, hardware, commit FROM runs").fetchall()}
    cols = ["run_id", "rank", "phase", "metric", "value", "better", "spread"]
    metrics = [dict(zip(cols, m)) for m in con.execute(
        f"SELECT {', '.join(cols)} FROM run_metrics WHERE rank IS NULL").fetchall()]
    return runs, metrics


RUNS_SCHEMA = pa.schema([
    ("run_id", pa.string()), ("ingested_at", pa.timestamp("us", tz="UTC")),
    ("labels", pa.map_(pa.string(), pa.string())), ("framework", pa.string()), ("model", pa.string()),
    ("hardware", pa.string()), ("commit", pa.string()), ("commit_time", pa.string()), ("series", pa.string())])


def _tables(pool, order: list[str]):
    """runs + run_metrics (rank NULL) for `order`, relabelled c00.. in that order."""
    runs, metrics = pool
    rows = []
    for i, run_id in enumerate(order):
        r = runs[run_id]
        labels = list(r[2].items()) if isinstance(r[2], dict) else r[2]
        rows.append({"run_id": run_id, "ingested_at": r[1], "labels": labels, "framework": r[3], "model": r[4],
                     "hardware": r[5], "commit": _commit(i), "commit_time": _time(i), "series": SERIES})
    chosen = set(order)
    metrics_t = pa.Table.from_pylist([m for m in metrics if m["run_id"] in chosen], schema=pa.schema([
        ("run_id", pa.string()), ("rank", pa.int32()), ("phase", pa.string()), ("metric", pa.string()),
        ("value", pa.float64()), ("better", pa.string()), ("spread", pa.float64())]))
    return pa.Table.from_pylist(rows, schema=RUNS_SCHEMA), metrics_t


@pytest.mark.parametrize("seed", [1, 2, 3, 4, 5])
def test_other_noise_realizations(pool, seed):
    """Other histories from the same runs: the 29 runs before the shift in a random order (the +1 % GEMM
    runs mixed in: extra noise), a random number of them, then the three +8 % attention runs."""
    from reports.trend import build_trend_from_tables

    ids = sorted(pool[0].values(), key=lambda r: r[6])
    before = [r[0] for r in ids if int(r[6][1:]) < SHIFT_AT]
    after = [r[0] for r in ids if int(r[6][1:]) >= SHIFT_AT]
    rng = random.Random(seed)
    rng.shuffle(before)
    rng.shuffle(after)
    order = before[: rng.randint(20, len(before))] + after
    shift = _commit(len(order) - len(after))
    report = build_trend_from_tables(*_tables(pool, order))
    flagged = [{"metric": g.metric, "commit": g.commit, "first_commit": g.first_commit} for g in report.regressions]
    # The shift is found, at its commit, in both metrics of the family ...
    shifted = [f for f in flagged if f["metric"] in ATTN_FAMILY]
    _check_flags(shifted, shift)
    # ... and (nearly) nothing else: a chance 3-sigma excursion of a small category (one memcpy or argmax
    # per step: 5-8 % run-to-run noise) is not material (under 0.5 % of the step: trend_params). One
    # reordering still flags the custom all-reduce once, early (6 runs of history: the MAD of so few runs
    # underestimates its noise); the canonical order above flags nothing else at all.
    others = [(f["metric"], f["commit"]) for f in flagged if f["metric"] not in ATTN_FAMILY]
    assert len(others) <= 1, others


def test_cli_trend_formats_and_fail_on_regression(history, pool, cli_runner):
    from cli import main

    base = ["--warehouse", str(history.root), "trend"]
    res = cli_runner.invoke(main, base + ["--fail-on-regression", "--format", "json"])
    assert res.exit_code == 3, res.output
    doc = json.loads(res.stdout)
    assert {g["first_commit"] for g in doc["failing"]} == {_commit(SHIFT_AT)}
    assert {g["metric"] for g in doc["failing"]} == ATTN_FAMILY

    res = cli_runner.invoke(main, base + ["--metric", "category.gemm*", "--metric", "step_time_median_ns",
                                          "--fail-on-regression", "--last", "10"])
    assert res.exit_code == 0, res.output
    assert "category.gemm_ns_per_step" in res.stdout and "attention" not in res.stdout
    assert any(ch in res.stdout for ch in "▁▂▃▄▅▆▇█")     # sparklines

    from reports.trend import build_trend_from_tables, render_trend

    report = build_trend_from_tables(*_tables(pool, sorted(pool[0], key=lambda r: pool[0][r][6])),
                                     since="2026-01-02")
    html = render_trend(report, "html")
    assert "<svg" in html and "<polygon" in html and "http://" not in html.replace("http://www.w3.org/2000/svg", "")
    assert "flashinfer::mla::BatchMLAPagedAttentionKernel" in html and "<script" not in html
    assert all(len(m.points) == N_RUNS - 24 for s in report.series for m in s.metrics if m.metric == "steps")

    res = cli_runner.invoke(main, base + ["--where", "series=nothing-here"])
    assert res.exit_code == 0 and "No regression flagged" in res.stdout

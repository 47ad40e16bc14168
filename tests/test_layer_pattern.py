"""layer_pattern / layer_pattern_summary: the repeating kernel sequence of a step (one transformer layer).

- Handmade rows: the views' SQL runs on a tiny `_kernel_facts` / `step_spans`, and its rows are compared
  with the expected ones (period, repeats, start, per-position kernel and median).
- Synthesized serving-decode runs: the main stream's period equals `layer_period_by_stream[main]`, the sum
  over the streams equals `layer_period`, repeats equals the layer count, and the per-position kernels are
  the ground truth's `layer_sequence` split by stream.
- Real trace: SGLang Qwen3-8B decode (36 layers) repeats 36 times.
"""

from __future__ import annotations

from collections import Counter

import duckdb
import pytest
from tracehouse.warehouse.catalog import view_files

SQL = view_files()  # {view: its sql/<domain>/<view>.sql}


# ---------------------------------------------------------------- handmade rows


def _views_on(rows: list[tuple]) -> duckdb.DuckDBPyConnection:
    """The two views over `_kernel_facts` (stream 7 of rank 0, step 0) and `step_spans` alone
    (tests/viewtest.py).

    rows: (name, category, dur_ns, stream[, module_path]), in start order; each activity starts 1 µs after
    the previous one; module_path is _kernel_facts' (its launch's nn.Module path), when the row gives one.
    """
    from viewtest import connect_views

    facts = [
        {
            "run_id": "r",
            "rank": 0,
            "step": 0,
            "device": 0,
            "stream": r[3],
            "kernel_id": i,
            "name": r[0],
            "kind": "kernel",
            "category": r[1],
            "start_ns": 1000 * i,
            "end_ns": 1000 * i + r[2],
            "dur_ns": r[2],
            "module_path": r[4] if len(r) > 4 else None,
        }
        for i, r in enumerate(rows)
    ]
    spans = [{"run_id": "r", "rank": 0, "step": 0, "phase": "decode", "start_ns": 0, "end_ns": 10_000_000}]
    return connect_views(
        ["layer_pattern_summary", "layer_pattern"], {"_kernel_facts": facts, "step_spans": spans}
    )


def _fetch(con, sql: str) -> list[dict]:
    cur = con.execute(sql)
    cols = [d[0] for d in cur.description]
    return [dict(zip(cols, r)) for r in cur.fetchall()]


LAYER = [("norm_k", "norm"), ("qkv_gemm", "gemm"), ("attn", "attention"), ("o_gemm", "gemm")]


def test_handmade_period_start_and_positions():
    rows = [("embed", "embedding", 50, 7)]
    for j in range(5):
        rows += [
            (n, c, 100 * (k + 1) + j, 7) for k, (n, c) in enumerate(LAYER)
        ]  # durations grow by 1 per layer
    rows += [("final_norm", "norm", 10, 7), ("lm_head", "gemm", 900, 7), ("sample", "sampling", 20, 7)]
    con = _views_on(rows)
    (s,) = _fetch(con, "SELECT * FROM layer_pattern_summary")
    assert (
        s["is_main_stream"],
        s["activities"],
        s["period"],
        s["repeats"],
        s["start_ordinal"],
        s["end_ordinal"],
    ) == (True, 24, 4, 5, 1, 21)
    assert s["step_layer_period"] == 4 and s["coverage"] == pytest.approx(20 / 24)
    assert s["layer_gpu_ns"] == 100 + 200 + 300 + 400 + 4 * 2  # the median layer is the third (j = 2)
    got = [
        (r["position"], r["name"], r["category"], r["name_share"], r["median_ns"], r["min_ns"], r["max_ns"])
        for r in _fetch(con, "SELECT * FROM layer_pattern ORDER BY position")
    ]
    assert got == [
        (k, n, c, 1.0, 100 * (k + 1) + 2, 100 * (k + 1), 100 * (k + 1) + 4) for k, (n, c) in enumerate(LAYER)
    ]


def test_handmade_different_first_layers_and_rotation():
    # 2 dense layers, then 6 MoE layers; both end with the same all-reduce, so the kernel just before the
    # MoE block matches at the MoE period: the rotation must still start the layer at its norm.
    dense = [
        ("norm_k", "norm"),
        ("qkv_gemm", "gemm"),
        ("attn", "attention"),
        ("mlp_gemm", "gemm"),
        ("allreduce", "communication"),
    ]
    moe = [
        ("norm_k", "norm"),
        ("qkv_gemm", "gemm"),
        ("attn", "attention"),
        ("router", "moe"),
        ("experts", "moe"),
        ("allreduce", "communication"),
    ]
    rows = [("embed", "embedding", 50, 7)]
    rows += [(n, c, 100, 7) for _ in range(2) for n, c in dense]
    rows += [(n, c, 100, 7) for _ in range(6) for n, c in moe]
    rows += [("lm_head", "gemm", 900, 7)]
    con = _views_on(rows)
    (s,) = _fetch(con, "SELECT * FROM layer_pattern_summary")
    assert (s["period"], s["repeats"], s["start_ordinal"]) == (6, 6, 11)
    names = [r["name"] for r in _fetch(con, "SELECT name FROM layer_pattern ORDER BY position")]
    assert names == [n for n, _ in moe]


def test_handmade_second_stream_and_no_pattern():
    # main stream: layer of 4 × 3; side stream: 2 kernels per layer × 3, so 6 per layer over both streams
    rows = []
    for _ in range(3):
        rows += [(n, c, 100, 7) for n, c in LAYER] + [("expert_a", "moe", 50, 9), ("expert_b", "moe", 60, 9)]
    rows += [("x1", "other", 5, 11), ("x2", "other", 5, 11), ("x3", "other", 5, 11), ("x4", "other", 5, 11)]
    con = _views_on(rows)
    got = {r["stream"]: r for r in _fetch(con, "SELECT * FROM layer_pattern_summary")}
    assert got[7]["is_main_stream"] and (got[7]["period"], got[7]["repeats"]) == (4, 3)
    assert not got[9]["is_main_stream"] and (got[9]["period"], got[9]["repeats"]) == (2, 3)
    assert got[11]["period"] is None and got[11]["repeats"] is None  # four different kernels: no layer
    assert {r["step_layer_period"] for r in got.values()} == {6}
    assert _fetch(con, "SELECT count(*) AS n FROM layer_pattern WHERE stream = 11") == [{"n": 0}]


# ---------------------------------------------------------------- synthesized decode runs

CASES = [
    {"ranks": 2, "steps": 2, "layers": 4, "seed": 0},
    {"ranks": 1, "steps": 2, "layers": 7, "seed": 3},
    {"ranks": 2, "steps": 1, "layers": 3, "seed": 11, "vendor": "amd"},
]


@pytest.fixture(scope="module")
def synth_runs(warehouses):
    from tracehouse.warehouse.catalog import connect
    from warehouses import scenario

    # not derived: the views are computed, not read stored
    built = warehouses.get([scenario("serving-decode", **case) for case in CASES])
    return connect(built.warehouse), list(zip(built.run_ids, built.truths))


def _is_subsequence(part: list[str], whole: list[str]) -> bool:
    it = iter(whole)
    return all(any(x == y for y in it) for x in part)


@pytest.mark.parametrize("case", range(len(CASES)))
def test_synth_period_and_kernels_equal_truth(synth_runs, case):
    con, runs = synth_runs
    run_id, truth = runs[case]
    summary = _fetch(
        con, f"SELECT * FROM layer_pattern_summary WHERE run_id = '{run_id}' AND period IS NOT NULL"
    )
    by_stream = {int(k): v for k, v in truth["layer_period_by_stream"].items()}
    main = truth["streams"]["main"]
    steps = {(r["rank"], r["step"]) for r in summary}
    assert len(steps) == truth["ranks"] * truth["n_steps"]
    seq = truth["layer_sequence"]
    for rank, step in steps:
        rows = {r["stream"]: r for r in summary if (r["rank"], r["step"]) == (rank, step)}
        (m,) = [r for r in rows.values() if r["is_main_stream"]]
        assert m["stream"] == main
        assert m["period"] == by_stream[main] and m["repeats"] == truth["layers"]
        assert m["step_layer_period"] == truth["layer_period"]
        for stream, period in by_stream.items():
            assert (rows[stream]["period"], rows[stream]["repeats"]) == (period, truth["layers"])
        positions = _fetch(
            con,
            f"SELECT stream, name, category, name_share FROM layer_pattern WHERE run_id = "
            f"'{run_id}' AND rank = {rank} AND step = {step} ORDER BY stream, position",
        )
        names = {s: [p["name"] for p in positions if p["stream"] == s] for s in by_stream}
        # the main stream's layer is the ground truth's layer, in order, from its first kernel
        assert names[main][0] == seq[0]
        for s in by_stream:
            assert _is_subsequence(names[s], seq), s
        assert Counter(n for s in by_stream for n in names[s]) == Counter(seq)
        assert all(p["name_share"] == 1.0 for p in positions)
        assert all(p["category"] == truth["kernel_categories"][p["name"]] for p in positions)


def test_synth_medians_match_durations(synth_runs):
    """median_ns of a position is the median of the activities at that position in the block."""
    con, runs = synth_runs
    run_id, truth = runs[0]
    main = truth["streams"]["main"]
    s = _fetch(
        con,
        f"SELECT * FROM layer_pattern_summary WHERE run_id = '{run_id}' AND rank = 0 AND step = 0 "
        f"AND stream = {main}",
    )[0]
    acts = _fetch(
        con,
        f"SELECT dur_ns FROM kernels WHERE run_id = '{run_id}' AND rank = 0 AND step = 0 "
        f"AND stream = {main} ORDER BY start_ns, kernel_id",
    )
    durs = [a["dur_ns"] for a in acts]
    p, start = s["period"], s["start_ordinal"]
    import statistics

    expected = [statistics.median(durs[start + j * p + k] for j in range(s["repeats"])) for k in range(p)]
    got = [
        r["median_ns"]
        for r in _fetch(
            con,
            f"SELECT median_ns FROM layer_pattern WHERE run_id = '{run_id}' "
            f"AND rank = 0 AND step = 0 AND stream = {main} ORDER BY position",
        )
    ]
    assert got == pytest.approx(expected)


# ---------------------------------------------------------------- real trace


@pytest.fixture(scope="module")
def sglang_decode(real_runs):
    from tracehouse.warehouse.catalog import connect

    wh, run_of = real_runs  # not derived: the views are computed, not read stored
    run_id = run_of["inference/sglang_decode/sglang_Qwen3-8B_decode.json.gz"]
    return connect(wh, runs=[run_id]), run_id


def test_sglang_qwen3_decode_has_36_layers(sglang_decode):
    con, run_id = sglang_decode
    (s,) = _fetch(
        con,
        f"SELECT * FROM layer_pattern_summary WHERE run_id = '{run_id}' AND is_main_stream "
        "AND phase = 'decode'",
    )
    assert s["repeats"] == 36  # Qwen3-8B has 36 decoder layers
    assert s["period"] == 15 and s["coverage"] > 0.95
    cats = [
        r["category"]
        for r in _fetch(
            con,
            f"SELECT category FROM layer_pattern WHERE run_id = '{run_id}' "
            "AND is_main_stream ORDER BY position",
        )
    ]
    assert cats.count("attention") >= 2 and cats.count("gemm") == 4 and "norm" in cats


def test_views_transpile_to_spark():
    import sqlglot

    for name in ("layer_pattern_summary", "layer_pattern"):
        (out,) = sqlglot.transpile(SQL[name].read_text(), read="duckdb", write="spark")
        assert "ROW_NUMBER()" in out.upper()

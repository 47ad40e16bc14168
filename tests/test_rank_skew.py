"""rank_skew / rank_skew_summary: collectives matched across ranks, and who the straggler is.

- Handmade rows: the views' SQL on a tiny `_kernel_facts`, compared with skews worked out by hand.
- Synthesized serving-decode runs with a straggler: every collective instance equals the ground truth's
  `collectives[]` (start skew, end skew, last rank), and the straggler is last (nearly) every time.
- Real trace: multirank/sampled_2ranks gives one skew row per matched send/recv instance.
"""

from __future__ import annotations

from collections import Counter

import duckdb
import pytest
from tracehouse.warehouse.catalog import view_files

SQL = view_files()  # {view: its sql/<domain>/<view>.sql}


def _fetch(con, sql: str) -> list[dict]:
    cur = con.execute(sql)
    cols = [d[0] for d in cur.description]
    return [dict(zip(cols, r)) for r in cur.fetchall()]


# ---------------------------------------------------------------- handmade rows

EPOCH = 1_700_000_000_000_000_000  # epoch ns, so that overflow-prone arithmetic would show


def _views_on(rows: list[tuple]) -> duckdb.DuckDBPyConnection:
    """rows: (rank, step, name, category, collective_name, process_group, start_ns offset, dur_ns)."""
    from viewtest import connect_views

    facts = [
        {
            "run_id": "r",
            "rank": rank,
            "step": step,
            "kernel_id": i,
            "name": name,
            "category": cat,
            "collective_name": coll,
            "process_group": pg,
            "start_ns": EPOCH + start,
            "end_ns": EPOCH + start + dur,
            "dur_ns": dur,
        }
        for i, (rank, step, name, cat, coll, pg, start, dur) in enumerate(rows)
    ]
    return connect_views(["rank_skew", "rank_skew_summary"], {"_kernel_facts": facts})


AR = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL"


def test_handmade_instances_and_totals():
    rows = [
        # step 0, all-reduce #1: rank 2 arrives 300 ns late; all end together
        (0, 0, AR, "communication", None, None, 1000, 500),
        (1, 0, AR, "communication", None, None, 1100, 400),
        (2, 0, AR, "communication", None, None, 1300, 200),
        # step 0, all-reduce #2: rank 2 late again, rank 0 ends 50 ns later
        (0, 0, AR, "communication", None, None, 5000, 350),
        (1, 0, AR, "communication", None, None, 5000, 300),
        (2, 0, AR, "communication", None, None, 5200, 100),
        # a gemm is no collective; a collective seen on one rank only is not matched
        (0, 0, "gemm", "gemm", None, None, 2000, 900),
        (1, 1, "ncclKernel_Send", "communication", None, None, 9000, 10),
        # named collectives of two groups, same kernel name: matched by (collective name, group)
        (0, 1, "nccl_x", "communication", "allgather", "tp", 7000, 100),
        (1, 1, "nccl_x", "communication", "allgather", "tp", 7040, 60),
        (0, 1, "nccl_x", "communication", "allgather", "dp", 7500, 100),
        (1, 1, "nccl_x", "communication", "allgather", "dp", 7400, 200),
    ]
    con = _views_on(rows)
    got = [
        (
            r["step"],
            r["collective"],
            r["process_group"],
            r["instance"],
            r["ranks"],
            r["start_skew_ns"],
            r["end_skew_ns"],
            r["dur_spread_ns"],
            r["first_rank"],
            r["last_rank"],
            r["last_rank_lead_ns"],
        )
        for r in _fetch(con, "SELECT * FROM rank_skew ORDER BY step, first_start_ns")
    ]
    assert got == [
        (0, AR, "", 1, 3, 300, 0, 300, 0, 2, 200),
        (0, AR, "", 2, 3, 200, 50, 250, 0, 2, 200),
        (1, "allgather", "tp", 1, 2, 40, 0, 40, 0, 1, 40),
        (1, "allgather", "dp", 1, 2, 100, 0, 100, 1, 0, 100),
    ]
    summary = {r["rank"]: r for r in _fetch(con, "SELECT * FROM rank_skew_summary")}
    assert {
        r: (s["instances"], s["times_last"], s["times_first"], s["wait_ns"], s["imposed_wait_ns"])
        for r, s in summary.items()
    } == {
        0: (4, 1, 3, 300 + 200 + 40, 100),
        1: (4, 1, 1, 200 + 200 + 100, 40),
        2: (2, 2, 0, 0, (300 + 200) + (200 + 200)),
    }
    assert summary[2]["last_share"] == 1.0
    assert (
        summary[2]["mean_start_lateness_ns"] == (300 + 200) / 2 and summary[2]["max_start_lateness_ns"] == 300
    )
    # what the others waited for the last rank is what each rank waited, summed
    assert sum(s["wait_ns"] for s in summary.values()) == sum(s["imposed_wait_ns"] for s in summary.values())


# ---------------------------------------------------------------- synthesized runs with a straggler

CASES = [
    {"ranks": 4, "steps": 3, "layers": 4, "straggler": (2, 50.0), "seed": 0},
    {"ranks": 2, "steps": 2, "layers": 3, "straggler": (0, 20.0), "seed": 5},
    {"ranks": 3, "steps": 2, "layers": 2, "straggler": (1, 5.0), "seed": 9, "vendor": "amd"},
]


@pytest.fixture(scope="module")
def synth_runs(warehouses):
    from tracehouse.warehouse.catalog import connect
    from warehouses import scenario

    # not derived: the views are computed, not read stored
    built = warehouses.get([scenario("serving-decode", **case) for case in CASES])
    return connect(built.warehouse), list(zip(built.run_ids, built.truths))


@pytest.mark.parametrize("case", range(len(CASES)))
def test_synth_collectives_equal_truth(synth_runs, case):
    con, runs = synth_runs
    run_id, truth = runs[case]
    rows = {
        (r["step"], r["collective"], r["instance"]): r
        for r in _fetch(con, f"SELECT * FROM rank_skew WHERE run_id = '{run_id}'")
    }
    assert len(rows) == len(truth["collectives"])
    seen: Counter = Counter()
    for c in truth["collectives"]:
        seen[c["step"], c["name"]] += 1
        r = rows[c["step"], c["name"], seen[c["step"], c["name"]]]
        assert r["ranks"] == truth["ranks"]
        assert r["start_skew_ns"] == c["max_start_skew_ns"] == max(c["start_skew_ns"])
        assert r["end_skew_ns"] == max(c["end_skew_ns"])
        assert r["last_rank"] == c["last_rank"]
        assert r["first_start_ns"] == min(c["start_ns"]) and r["last_end_ns"] == max(c["end_ns"])


@pytest.mark.parametrize("case", range(len(CASES)))
def test_synth_straggler_is_last(synth_runs, case):
    con, runs = synth_runs
    run_id, truth = runs[case]
    straggler = truth["anomalies"]["straggler"][0]
    last = [r["last_rank"] for r in _fetch(con, f"SELECT last_rank FROM rank_skew WHERE run_id = '{run_id}'")]
    assert last and Counter(last)[straggler] >= 0.9 * len(last)
    summary = {
        r["rank"]: r for r in _fetch(con, f"SELECT * FROM rank_skew_summary WHERE run_id = '{run_id}'")
    }
    assert len(summary) == truth["ranks"]
    top = max(summary.values(), key=lambda s: s["imposed_wait_ns"])
    assert top["rank"] == straggler and top["last_share"] >= 0.9
    assert min(summary.values(), key=lambda s: s["wait_ns"])["rank"] == straggler
    assert max(summary.values(), key=lambda s: s["mean_start_lateness_ns"])["rank"] == straggler


# ---------------------------------------------------------------- real trace


@pytest.fixture(scope="module")
def sampled_2ranks(real_runs):
    from tracehouse.warehouse.catalog import connect

    wh, run_of = real_runs  # not derived: the views are computed
    run_id = run_of["multirank/sampled_2ranks"]
    return connect(wh, runs=[run_id]), run_id


def test_sampled_2ranks_skew_rows(sampled_2ranks):
    con, run_id = sampled_2ranks
    rows = _fetch(con, f"SELECT * FROM rank_skew WHERE run_id = '{run_id}' ORDER BY step, first_start_ns")
    # 5 send/recv kernels per rank in each of ProfilerStep#551 and #552, all matched across both ranks
    assert len(rows) == 10 and {r["step"] for r in rows} == {551, 552}
    assert all(r["ranks"] == 2 and "SendRecv" in r["collective"] for r in rows)
    for r in rows:
        assert r["start_skew_ns"] == r["last_start_ns"] - r["first_start_ns"] >= 0
        assert r["end_skew_ns"] >= 0 and r["dur_spread_ns"] >= 0 and r["last_rank"] in (0, 1)
        assert r["first_rank"] != r["last_rank"] or r["start_skew_ns"] == 0
    summary = {
        r["rank"]: r for r in _fetch(con, f"SELECT * FROM rank_skew_summary WHERE run_id = '{run_id}'")
    }
    assert set(summary) == {0, 1}
    assert summary[0]["times_last"] + summary[1]["times_last"] == 10
    # with two ranks, what one waited is what the other imposed
    assert summary[0]["wait_ns"] == summary[1]["imposed_wait_ns"]
    assert summary[1]["wait_ns"] == summary[0]["imposed_wait_ns"]


def test_views_transpile_to_spark():
    import sqlglot

    for name in ("rank_skew", "rank_skew_summary"):
        (out,) = sqlglot.transpile(SQL[name].read_text(), read="duckdb", write="spark")
        assert "ROW_NUMBER()" in out.upper() or "JOIN" in out.upper()


@pytest.mark.parametrize("case", range(len(CASES)))
def test_report_names_the_simulated_straggler(synth_runs, case):
    """The straggler the simulation injected is the one rank the report names, first."""
    from tracehouse.reports.run import build_run_report

    con, runs = synth_runs
    run_id, truth = runs[case]
    named = [t.text for t in build_run_report(con, run_id).takeaways if t.text.startswith("Rank ")]
    assert len(named) == 1 and named[0].startswith(f"Rank {truth['anomalies']['straggler'][0]} imposes ")


def test_no_straggler_named_without_one(synth_warehouse):
    """Runs simulated without a straggler (ranks a few µs apart at random) name none: noise is no straggler."""
    from tracehouse.reports.run import build_run_report
    from tracehouse.warehouse.catalog import connect

    wh, runs = synth_warehouse
    for run_id in runs.values():
        report = build_run_report(connect(wh, runs=[run_id]), run_id)
        assert report.n_ranks > 1
        assert not [t.text for t in report.takeaways if t.text.startswith("Rank ")]

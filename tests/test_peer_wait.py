"""Waiting for a peer is not the cost of communication (synth situation `peer-wait-straggler`).

The situation simulates four ranks whose all-reduces start when each rank's compute ends and end together
after the last arrival; rank 2 is late at five of eight collectives (62.5 %, under the 75 % "last" bar) and
imposes 98 % of all wait. rank_skew_summary must give each rank's waits as the simulation had them, and
the report must name rank 2 first, say how much of the shown rank's collective time is waiting, and, with
rank 0 alone, say that its exposed communication may be waiting for a peer and which ranks to add.
"""

from __future__ import annotations

import pytest
from conftest import query_rows
from tracehouse.ingest.load import ingest_paths
from tracehouse.reports.charts import fmt_ns
from tracehouse.reports.run import build_run_report, render_run_report
from tracehouse.synth.situations import write_situation
from tracehouse.warehouse.catalog import connect
from tracehouse.warehouse.store import Warehouse

NAME = "peer-wait-straggler"


def test_rank_skew_summary_matches_the_simulated_waits(sit):
    con, runs, expect = sit
    truth = expect[NAME]
    rows = query_rows(con, "SELECT * FROM rank_skew_summary WHERE run_id = ? ORDER BY rank", [runs[NAME]])
    assert [r["rank"] for r in rows] == [0, 1, 2, 3]
    for r in rows:
        rank = str(r["rank"])
        assert r["instances"] == truth["instances"]
        assert r["times_last"] == truth["times_last"][rank]
        assert r["wait_ns"] == truth["wait_ns"][rank]
        assert r["imposed_wait_ns"] == truth["imposed_wait_ns"][rank]
        assert r["imposed_wait_share"] == pytest.approx(truth["imposed_wait_share"][rank], rel=1e-12)
        assert 0 <= r["wait_share"] <= 1
    slow = truth["straggler_rank"]
    assert truth["times_last"][str(slow)] / truth["instances"] < 0.75  # under the "last" bar on purpose


def test_report_names_the_rank_others_wait_for_first(situation_warehouse):
    wh, runs, expect = situation_warehouse
    truth = expect[NAME]
    report = build_run_report(connect(wh, runs=[runs[NAME]]), runs[NAME])
    first = report.takeaways[0]
    share = 100 * truth["imposed_wait_share"][str(truth["straggler_rank"])]
    assert first.text.startswith(
        f"Rank {truth['straggler_rank']} imposes {share:.0f} % of all collective wait"
    )
    comm = next(t for t in report.takeaways if t.text.startswith("Communication is"))
    assert "waiting for peers" in comm.text and f"mostly for rank {truth['straggler_rank']}" in comm.text
    assert report.takeaways.index(comm) > 0
    # the step section splits the path's communication: the shown rank waited for the straggler
    pc = report.step.path_comm
    assert pc.wait_ns > 0 and pc.wait_ns + pc.transfer_ns == pc.time_ns and pc.unknown_ns == 0
    assert pc.text == (
        f"Communication on the path {fmt_ns(pc.time_ns)}: {fmt_ns(pc.wait_ns)} waiting for rank "
        f"{truth['straggler_rank']}, {fmt_ns(pc.transfer_ns)} transfer."
    )
    assert pc.text in render_run_report(report, "md")


def test_one_rank_of_many_says_it_may_be_waiting(tmp_path):
    write_situation(NAME, tmp_path / "sit")
    wh = Warehouse(tmp_path / "wh")
    [outcome] = ingest_paths(wh, [tmp_path / "sit" / "rank-0.pt.trace.json.gz"], derive="none")
    report = build_run_report(connect(wh), outcome.run_id)
    comm = next(t for t in report.takeaways if t.text.startswith("Communication is"))
    assert "with 1 of 4 ranks in the run it may be waiting for a peer" in comm.text
    assert "ingest ranks 1, 2, 3" in comm.text
    # on the path, the split is unknown: said so, with the ranks to add
    pc = report.step.path_comm
    assert pc.time_ns == pc.unknown_ns > 0 and pc.wait_ns == pc.transfer_ns == 0
    assert pc.text == (
        f"Communication on the path {fmt_ns(pc.time_ns)}: {fmt_ns(pc.time_ns)} with 1 of 4 ranks in the run: "
        "it may be waiting for a peer, not transfer (ingest ranks 1, 2, 3 with it to tell)."
    )
    assert not any(t.text.startswith("Rank ") for t in report.takeaways)

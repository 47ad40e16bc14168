"""The CPU->GPU flow of a launch binds to the launch, not to a zero-length call starting with it in the
same microsecond (ingest/sql/20_flows.sql: among slices of one thread and kind starting at the same
instant, the longest, then the later in the file): the ASOF join alone picked one of them arbitrarily."""

from __future__ import annotations

import pytest
from conftest import query_rows

NAME = "flow-tie-zero-length-call"


@pytest.fixture(scope="module")
def tie(situation_warehouse):
    from tracehouse.warehouse.catalog import connect

    wh, runs, expect = situation_warehouse
    con = connect(wh, runs=[runs[NAME]])
    yield con, runs[NAME], expect[NAME]
    con.close()


def test_flow_starts_on_the_launch_not_on_the_zero_length_call(tie):
    con, run_id, expect = tie
    rows = query_rows(
        con,
        """
        SELECT c.name AS source, count(*) AS n
        FROM flows f
        JOIN kernels k ON k.run_id = f.run_id AND k.kernel_id = f.dst_event_id
        JOIN cpu_ops c ON c.run_id = f.run_id AND c.op_id = f.src_event_id
        WHERE f.run_id = ? GROUP BY 1 ORDER BY 1""",
        [run_id],
    )
    assert {r["source"]: r["n"] for r in rows} == expect["flow_sources"]
    # the kernels' launch call (kernels.launch_op_id, linked by correlation) agrees with the flow
    (disagree,) = con.execute(
        """
        SELECT count(*) FROM flows f JOIN kernels k ON k.run_id = f.run_id AND k.kernel_id = f.dst_event_id
        WHERE f.run_id = ? AND f.src_event_id IS DISTINCT FROM k.launch_op_id""",
        [run_id],
    ).fetchone()
    assert disagree == 0


def test_the_tie_is_in_the_trace(tie):
    """Each launch has a zero-length call starting with it on its thread (else the test above proves nothing)."""
    con, run_id, expect = tie
    (ties,) = con.execute(
        """
        SELECT count(*) FROM cpu_ops a JOIN cpu_ops b
          ON a.run_id = b.run_id AND a.tid = b.tid AND a.start_ns = b.start_ns
        WHERE a.run_id = ? AND a.name = 'cudaFuncSetAttribute' AND a.dur_ns = 0
          AND b.name = 'cudaLaunchKernel'""",
        [run_id],
    ).fetchone()
    assert ties == expect["launches"]


def test_every_kernel_keeps_its_launch_site(tie):
    """Dropping the tied zero-length call from the flow targets loses no flow: each kernel has its source."""
    con, run_id, _ = tie
    (missing,) = con.execute(
        """
        SELECT count(*) FROM flows WHERE run_id = ? AND (src_event_id IS NULL OR dst_event_id IS NULL)""",
        [run_id],
    ).fetchone()
    assert missing == 0

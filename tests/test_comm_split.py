"""A collective's time on the critical path splits into waiting for peers and transfer (sql/path_comm_split).

- Situation `peer-wait-straggler` (synth/situations/peer_wait.py): each all-reduce kernel starts when its
  rank arrives and is held until the last rank arrives, then transfers; the simulation records each rank's
  wait and transfer per instance. Every communication activity on a rank's path must carry that split.
- A synthesized serving run with a straggler (synth/sim.py's run_lockstep: collectives end on every rank
  together after the last arrival plus the transfer): the same, against the truth file's `collectives`.
- Real 2-GPU Nsight run (nsys/mfu_2gpu_before.sqlite): the split checked against an independent read of
  the SQLite file (the n-th NCCL kernel of each name on each GPU is one instance; its wait is the latest
  start over the GPUs minus its own), and the rank the other waits for is named with its share.
"""

from __future__ import annotations

import sqlite3
from collections import defaultdict

import pytest
from conftest import TRACES, query_rows
from tracehouse.reports.run_model import SkewRow
from tracehouse.reports.takeaways import _is_straggler
from tracehouse.warehouse.catalog import connect
from warehouses import real, scenario, situation

NAME = "peer-wait-straggler"
STRAGGLER_CASE = {"ranks": 4, "steps": 3, "layers": 4, "straggler": (2, 50.0), "seed": 0}  # test_rank_skew's
MFU = "nsys/mfu_2gpu_before.sqlite"


def _split_rows(con, run_id: str) -> list[dict]:
    return query_rows(
        con,
        """
        SELECT p.*, k.start_ns AS kernel_start_ns, k.dur_ns AS kernel_dur_ns
        FROM path_comm_split p JOIN kernels k USING (run_id, rank, kernel_id)
        WHERE p.run_id = ? ORDER BY p.rank, p.step, p.seq""",
        [run_id],
    )


@pytest.fixture(scope="module")
def peer_wait(warehouses):
    wh, runs, truths = warehouses.named({NAME: situation(NAME)})
    return connect(wh, runs=[runs[NAME]]), runs[NAME], truths[NAME]["expect"]


def _straggler_by_hand(con, run_id: str, starts: dict, ns_per_unit: int) -> tuple[int, dict]:
    """From each collective instance's arrivals read by hand ({instance: {rank: start}}, in units of
    ns_per_unit): the rank that imposes most of the wait (each instance's last arrival imposes last − start
    on every peer), checked against rank_skew_summary's share and time; (that rank, {rank: SkewRow})."""
    imposed: dict = defaultdict(float)
    for peers in starts.values():
        last = max(peers, key=peers.get)
        imposed[last] += sum(peers[last] - t for t in peers.values())
    straggler = max(imposed, key=imposed.get)
    summary = {
        r["rank"]: r for r in query_rows(con, "SELECT * FROM rank_skew_summary WHERE run_id = ?", [run_id])
    }
    share = imposed[straggler] / sum(imposed.values())
    assert summary[straggler]["imposed_wait_share"] == pytest.approx(share, rel=1e-9) and share > 0.5
    assert summary[straggler]["imposed_wait_ns"] == pytest.approx(ns_per_unit * imposed[straggler], rel=1e-9)
    return straggler, {
        rank: SkewRow(**{k: row[k] for k in SkewRow.__dataclass_fields__}) for rank, row in summary.items()
    }


def test_situation_split_is_the_simulated_wait_and_transfer(peer_wait):
    con, run_id, truth = peer_wait
    # each all-reduce's instance, by an independent count: its number among its rank's all-reduces in the step
    number = {}
    seen: dict = defaultdict(int)
    for k in query_rows(
        con,
        "SELECT rank, step, kernel_id FROM kernels WHERE run_id = ? AND name LIKE 'ncclDevKernel_AllReduce%' "
        "ORDER BY rank, step, start_ns",
        [run_id],
    ):
        seen[k["rank"], k["step"]] += 1
        number[k["rank"], k["kernel_id"]] = (k["step"], seen[k["rank"], k["step"]])
    simulated = {(c["step"], c["n"]): c for c in truth["collectives"]}
    rows = _split_rows(con, run_id)
    assert {r["rank"] for r in rows} == {0, 1, 2, 3}
    for r in rows:
        sim = simulated[number[r["rank"], r["kernel_id"]]]
        rank = str(r["rank"])
        assert (r["start_ns"], r["dur_ns"]) == (r["kernel_start_ns"], r["kernel_dur_ns"])  # the whole kernel
        assert r["wait_ns"] == sim["wait_ns"][rank]
        assert r["transfer_ns"] == sim["transfer_ns"][rank]
        assert r["peer_ranks"] == 4 and r["last_rank"] == sim["last_rank"]
        assert r["waited_for_rank"] == (sim["last_rank"] if sim["wait_ns"][rank] else None)
    # the test can fail: ranks waited on the path, and the last rank's own kernel is all transfer
    assert any(r["wait_ns"] > 0 for r in rows)
    assert any(r["wait_ns"] == 0 and r["rank"] == r["last_rank"] for r in rows)


@pytest.fixture(scope="module")
def straggler_run(warehouses):
    built = warehouses.get([scenario("serving-decode", **STRAGGLER_CASE)])
    return connect(built.warehouse), built.run_ids[0], built.truths[0]


def test_simulated_run_split_equals_the_simulation(straggler_run):
    con, run_id, truth = straggler_run
    by_start = {}
    for c in truth["collectives"]:
        for rank, start in enumerate(c["start_ns"]):
            by_start[rank, start] = (c["wait_ns"][rank], c["transfer_ns"][rank], c["last_rank"])
    rows = _split_rows(con, run_id)
    whole = [r for r in rows if (r["start_ns"], r["dur_ns"]) == (r["kernel_start_ns"], r["kernel_dur_ns"])]
    assert whole, "no whole collective kernel on any path"
    for r in whole:
        wait, transfer, last = by_start[r["rank"], r["kernel_start_ns"]]
        assert (r["wait_ns"], r["transfer_ns"]) == (wait, transfer)
        assert r["waited_for_rank"] == (last if wait else None)
    straggler = truth["anomalies"]["straggler"][0]
    waited = [r for r in whole if r["wait_ns"]]
    assert waited and {r["waited_for_rank"] for r in waited} == {straggler}


@pytest.mark.parametrize("rel", [MFU])
def test_real_two_gpu_split_by_an_independent_read(warehouses, rel):
    wh, runs, _ = warehouses.named({rel: real(rel)})
    con = connect(wh, runs=[runs[rel]])
    db = sqlite3.connect(f"file:{TRACES / rel}?mode=ro", uri=True)
    kernels = db.execute(
        """
        SELECT k.deviceId, s.value, k.start, k."end" FROM CUPTI_ACTIVITY_KIND_KERNEL k
        JOIN StringIds s ON s.id = coalesce(k.demangledName, k.shortName)
        WHERE s.value LIKE 'ncclDevKernel%' ORDER BY k.deviceId, k.start"""
    ).fetchall()
    # the n-th kernel of a name on each GPU is one instance; the wait is the latest start minus one's own
    seen: dict = defaultdict(int)
    instance, starts = {}, defaultdict(dict)
    for device, name, start, _ in kernels:
        seen[device, name] += 1
        instance[device, start] = (name, seen[device, name])
        starts[name, seen[device, name]][device] = start
    rows = _split_rows(con, runs[rel])
    assert len({r["rank"] for r in rows}) == 2 and all(r["wait_ns"] is not None for r in rows)
    for r in rows:
        peers = starts[instance[r["rank"], r["kernel_start_ns"]]]  # rank = GPU in this one-process export
        last = max(peers.values())
        end = r["start_ns"] + r["dur_ns"]
        assert r["wait_ns"] == max(min(end, last) - r["start_ns"], 0)
        assert r["transfer_ns"] == r["dur_ns"] - r["wait_ns"]
        assert r["waited_for_rank"] == (max(peers, key=peers.get) if r["wait_ns"] else None)
    # the rank the other waits for is the straggler the report names, with its share of all wait
    straggler, rows_of = _straggler_by_hand(con, runs[rel], starts, ns_per_unit=1)
    assert _is_straggler(rows_of[straggler]) and not _is_straggler(rows_of[1 - straggler])
    assert sum(r["wait_ns"] for r in rows if r["waited_for_rank"] == straggler) > 0


@pytest.mark.parametrize("rel", ["multirank/sampled_2ranks"])
def test_real_kineto_ranks_straggler_share_by_an_independent_read(warehouses, rel):
    """Two ranks (of 128) of one Kineto job (host-bound): the rank the other waits for is named with its share of
    all wait, and the few collectives on the paths (those the host waited for) split into wait and transfer,
    as an independent read of the JSON gives them."""
    import gzip
    import json

    wh, runs, _ = warehouses.named({rel: real(rel)})
    con = connect(wh, runs=[runs[rel]])
    starts: dict = defaultdict(dict)  # (name, n) -> {rank: start µs}
    for path in sorted((TRACES / rel).glob("rank-*.json.gz")):
        trace = json.loads(gzip.decompress(path.read_bytes()))
        rank = trace["distributedInfo"]["rank"]
        seen: dict = defaultdict(int)
        for e in sorted(
            (
                e
                for e in trace["traceEvents"]
                if e.get("cat") == "kernel" and "nccl" in e.get("name", "").lower()
            ),
            key=lambda e: e["ts"],
        ):
            seen[e["name"]] += 1
            starts[e["name"], seen[e["name"]]][rank] = e["ts"]
    straggler, rows_of = _straggler_by_hand(con, runs[rel], starts, ns_per_unit=1000)  # the JSON's µs
    assert [r for r in rows_of if _is_straggler(rows_of[r])] == [straggler]
    # The host waits for collectives now and then (a host_wait / held_call: the path goes through the
    # awaited collective): each such path segment is split as the JSON's arrivals give it, the instance
    # being the kernel's occurrence of its name on its rank.
    split = _split_rows(con, runs[rel])
    for row in split:
        same = [
            k
            for (k,) in con.execute(
                "SELECT kernel_id FROM kernels WHERE run_id = ? AND rank = ? AND name = ? ORDER BY start_ns, kernel_id",
                [runs[rel], row["rank"], row["name"]],
            ).fetchall()
        ]
        peers = starts[row["name"], same.index(row["kernel_id"]) + 1]
        wait = 1000 * (max(peers.values()) - peers[row["rank"]])
        into = row["start_ns"] - row["kernel_start_ns"]  # the segment may begin inside the kernel
        assert row["wait_ns"] == pytest.approx(max(0, min(row["dur_ns"], wait - into)), abs=2), row
        # two ranks of a world of 128, no group size in the trace: after the later of the two arrived, the
        # kernel may still wait for any of the other 126 ranks: no transfer is claimed
        assert row["complete"] is False and row["transfer_ns"] is None, row
        assert row["waited_for_rank"] == (max(peers, key=peers.get) if row["wait_ns"] > 0 else None)


def test_sentence_for_several_ranks_the_last_arrival_and_missing_peers():
    """The step section's sentence (reports.step_path.describe_path_comm) in the cases the runs above do not
    reach: several ranks waited for, the shown rank arriving last, and part of the path with no peer."""
    from types import SimpleNamespace

    from tracehouse.reports.run_model import PathComm
    from tracehouse.reports.step_path import describe_path_comm

    def said(pc, world=None, files=()):
        r = SimpleNamespace(step=SimpleNamespace(rank=0, path_comm=pc), world_size=world, files=list(files))
        describe_path_comm(r)
        return pc.text

    two = PathComm(
        3_100_000, 2_400_000, 700_000, 0, [{"rank": 3, "wait_ns": 2_000_000}, {"rank": 1, "wait_ns": 400_000}]
    )
    assert said(two) == (
        "Communication on the path 3.1 ms: 2.4 ms waiting for peers (rank 3 2 ms, rank 1 400 µs), 700 µs transfer."
    )
    assert said(PathComm(500_000, 0, 500_000, 0, [])) == (
        "Communication on the path 500 µs: no waiting for peers (this rank arrived last), 500 µs transfer."
    )
    files = [{"rank": 0}, {"rank": 1}]
    mixed = PathComm(1_000_000, 200_000, 300_000, 500_000, [{"rank": 1, "wait_ns": 200_000}])
    assert said(mixed, world=4, files=files) == (
        "Communication on the path 1 ms: 200 µs waiting for rank 1, 300 µs transfer; 500 µs with 2 of 4 ranks "
        "in the run: it may be waiting for a peer, not transfer (ingest ranks 2, 3 with it to tell)."
    )
    # instances of a group with ranks not in the run: their wait for rank 1 is a lower bound, the rest open
    partial = PathComm(1_000_000, 200_000, 0, 0, [{"rank": 1, "wait_ns": 200_000}], open_ns=800_000)
    assert said(partial, world=4, files=files) == (
        "Communication on the path 1 ms: at least 200 µs waiting for rank 1; 800 µs after the last arrival in "
        "the run, with 2 of 4 ranks in it: it may be waiting for a rank not in the run, not transfer (ingest "
        "ranks 2, 3 with it to tell)."
    )
    last = PathComm(1_000_000, 0, 0, 0, [], open_ns=1_000_000)
    assert said(last, world=4, files=files) == (
        "Communication on the path 1 ms: 1 ms after the last arrival in the run, with 2 of 4 ranks in it: it "
        "may be waiting for a rank not in the run, not transfer (ingest ranks 2, 3 with it to tell)."
    )

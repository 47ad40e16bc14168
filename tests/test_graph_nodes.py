"""CUDA-graph node identity and annotations (issue 38): Kineto's `graph id` / `graph node id` kernel args
and the `mark_kernels` annotations PyTorch bakes into a node's events.

Synthesized serving-decode runs (synth/graph_nodes.py) carry both; their ground truth names each replayed
activity's node, module FQN and collective from the simulation. Checked: the node ids land in `kernels`;
with capture traces the replay aligns with its capture by node (and the sites equal the run written
without node ids); without capture traces every replayed kernel still gets its module and collective;
a run without the fields reads as before.
"""

from __future__ import annotations

import shutil
from collections import defaultdict
from pathlib import Path

import pytest
from tracehouse.ingest.capture_align import Replayed, align
from tracehouse.ingest.capture_windows import CaptureLaunch
from tracehouse.ingest.load import ingest_paths
from tracehouse.synth import write_scenario
from tracehouse.synth.graph_nodes import ANNOTATION
from tracehouse.synth.truth import load_truth
from tracehouse.warehouse.catalog import connect
from tracehouse.warehouse.store import Warehouse

RUN = {"ranks": 2, "steps": 3, "layers": 2}

ROWS_SQL = """
SELECT k.rank, k.step, k.name, k.graph_id, k.graph_node_id, k.module_fqn, k.collective_name, k.process_group,
       k.in_msg_nelems, k.group_size, s.module_path, s.module, s.file, s.line, s.function, s.site_source,
       s.capture_match, k.launch_call, k.graph_annotation
FROM kernels k JOIN kernel_launch_site s USING (run_id, rank, kernel_id)
WHERE k.run_id = ? ORDER BY k.rank, k.step, k.stream, k.start_ns, k.kernel_id
"""


def _ingest(root: Path, run_dir: Path):
    wh = Warehouse(root)
    outcomes = ingest_paths(wh, [run_dir])
    assert len(outcomes) == 1 and outcomes[0].run_id and not outcomes[0].problems
    return connect(wh), outcomes[0].run_id


def _by_step(con, run_id: str) -> dict:
    got = defaultdict(list)
    for r in con.execute(ROWS_SQL, [run_id]).fetchall():
        got[(r[0], r[1])].append(r)
    return got


def _check_nodes(truth: dict, got: dict) -> int:
    """Every activity's node id, annotated module and collective equal the simulated ones; returns how many
    activities were replayed from the graph."""
    replayed = 0
    for step in truth["steps"]:
        ours = got[(step["rank"], step["step"])]
        assert len(ours) == len(step["graph_nodes"])
        for (node, fqn, collective), r in zip(step["graph_nodes"], ours):
            assert r[4] == node, (step["rank"], step["step"], r[2])
            if node is None:
                assert r[3] is None and r[5] is None and r[18] is None
                continue
            replayed += 1
            assert r[3] == 1 and r[5] == fqn and r[10] == fqn and r[11] == fqn and r[18] == ANNOTATION
            assert r[6] == collective
            if collective:  # the annotation's text values, read as numbers
                assert r[7] == "0" and r[8] == 32 * 7168 and r[9] == RUN["ranks"]
    return replayed


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("graph_nodes")
    with_nodes = write_scenario("serving-decode", root / "nodes", graph_nodes=True, **RUN)
    without = write_scenario("serving-decode", root / "plain", **RUN)
    return root, with_nodes, without


def test_graph_nodes_align_with_capture_by_node(runs):
    root, with_nodes, without = runs
    truth = load_truth(with_nodes)
    con, run_id = _ingest(root / "wh-nodes", with_nodes)
    got = _by_step(con, run_id)
    replayed = _check_nodes(truth, got)
    assert replayed > 0
    rows = [r for rs in got.values() for r in rs]
    assert {r[16] for r in rows if r[4] is not None} == {"node"}
    # the same simulated run without node ids: the same launch sites, aligned by order on the streams
    con2, run2 = _ingest(root / "wh-plain", without)
    plain = [r for rs in _by_step(con2, run2).values() for r in rs]
    assert [(r[2], r[12], r[13], r[14]) for r in rows] == [(r[2], r[12], r[13], r[14]) for r in plain]
    assert all(r[3] is None and r[4] is None and r[5] is None for r in plain)
    assert "node" not in {r[16] for r in plain}
    # and the sites are the simulated ones
    for step in truth["steps"]:
        expected = truth["launch_site_templates"][step["launch_sites"]]
        ours = got[(step["rank"], step["step"])]
        assert [(e[0], e[1], e[2], e[3]) for e in expected] == [(r[2], r[12], r[13], r[14]) for r in ours]


def test_graph_nodes_without_capture_traces(runs, tmp_path):
    _, with_nodes, without = runs
    run_dir = tmp_path / "run"
    shutil.copytree(with_nodes, run_dir)
    shutil.rmtree(run_dir / "capture_traces")
    truth = load_truth(run_dir)
    con, run_id = _ingest(tmp_path / "wh", run_dir)
    got = _by_step(con, run_id)
    assert _check_nodes(truth, got) > 0
    rows = [r for rs in got.values() for r in rs]
    assert not any(r[15] == "capture" for r in rows)
    # a node is one identity across replays: each (graph, node) ran once per graph launch, always the same kernel
    per_node = defaultdict(set)
    for r in rows:
        if r[4] is not None:
            per_node[r[4]].add(r[2])
    assert per_node and all(len(names) == 1 for names in per_node.values())
    # without node ids and without capture: no module and no collective on the replayed kernels (as before)
    plain_dir = tmp_path / "plain"
    shutil.copytree(without, plain_dir)
    shutil.rmtree(plain_dir / "capture_traces")
    con2, run2 = _ingest(tmp_path / "wh-plain", plain_dir)
    plain = [r for rs in _by_step(con2, run2).values() for r in rs]
    graphed = [r for r in plain if "graphlaunch" in (r[17] or "").lower()]
    assert graphed and all(r[6] is None and r[10] is None for r in graphed)


def _launch(i: int, name: str | None) -> CaptureLaunch:
    return CaptureLaunch(i, "cudaLaunchKernel", "kernel", name, None, f"f{i}.py", i, "fn", "op", None)


def test_node_order_is_the_capture_order_on_any_stream():
    # captured a, x (side stream), b, c; at replay x waited on something else and ran after b: by start,
    # and by the fork-join order (x's block after b, the last main activity to end before it), b comes
    # before x; by node id, x is the second node
    acts = [
        Replayed(0, 7, "kernel", "a", 0, 10, node=100),
        Replayed(1, 7, "kernel", "b", 11, 20, node=102),
        Replayed(2, 9, "kernel", "x", 21, 29, node=101),
        Replayed(3, 7, "kernel", "c", 30, 40, node=103),
    ]
    for named in (False, True):
        launches = [_launch(i, n if named else None) for i, n in enumerate("axbc")]
        pairs = sorted(align(launches, acts))
        assert [(acts[r].name, c, m) for r, c, m in pairs] == [
            ("a", 0, "node"),
            ("b", 2, "node"),
            ("x", 1, "node"),
            ("c", 3, "node"),
        ]
    # without node ids the order-only alignment puts b before x: what the node ids fix
    plain = [Replayed(a.kernel_id, a.stream, a.kind, a.name, a.start_ns, a.end_ns) for a in acts]
    pairs = sorted(align([_launch(i, None) for i in range(4)], plain))
    assert [(plain[r].name, c) for r, c, _ in pairs] == [("a", 0), ("b", 1), ("x", 2), ("c", 3)]


@pytest.mark.parametrize("schema", ["3.25", "3.13"])
def test_nsys_export_graph_nodes(tmp_path, schema):
    """An Nsight Systems export's kernel graphId / graphNodeId land in the same columns (3.13 has no graphId),
    checked against the export read directly with sqlite3."""
    import sqlite3

    from tracehouse.synth.nsys import write_export

    path = tmp_path / "synth.sqlite"
    write_export(path, schema=schema)
    src = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    cols = {r[1] for r in src.execute("PRAGMA table_info(CUPTI_ACTIVITY_KIND_KERNEL)")}
    graph_id = "graphId" if "graphId" in cols else "NULL"
    expected = sorted(
        src.execute(
            f"SELECT s.value, {graph_id}, graphNodeId FROM CUPTI_ACTIVITY_KIND_KERNEL k "
            "JOIN StringIds s ON s.id = k.demangledName WHERE graphNodeId IS NOT NULL"
        ).fetchall()
    )
    src.close()
    assert expected and (graph_id == "NULL") == (schema == "3.13")
    wh = Warehouse(tmp_path / "wh")
    [outcome] = ingest_paths(wh, [path])
    got = connect(wh).execute(
        "SELECT name, graph_id, graph_node_id FROM kernels WHERE run_id = ? AND graph_node_id IS NOT NULL",
        [outcome.run_id],
    )
    assert sorted(got.fetchall()) == expected

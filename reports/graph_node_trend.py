"""The trend of CUDA-graph nodes: each node's GPU time per step (graph_node_summary) as a trend line, so
that a regression names the node ("node 1.4294967321 got slower at commit Y") rather than only its kernel
name, which many nodes share (one per layer).

A node's line is the metric `graph_node.<graph id>.<graph node id>_ns_per_step` (graph id `?` when the
trace gives none), better lower, its noise graph_node_summary.spread_ns: the rows `reports.trend.evaluate`
judges with the same rule (sql/runs/regression.sql) as every run metric. The run's step_time_median_ns
rides along: the rule's materiality (a `_ns_per_step` change must be at least 0.5 % of the run's median step
time) reads it, and it shows what the node's change did to the step.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute
from tracehouse.reports.names import short_name

from tracehouse.errors import TracehouseError

PREFIX = "graph_node."
REFERENCE = "step_time_median_ns"

NODES_SQL = """
SELECT run_id, CAST(NULL AS INTEGER) AS rank, phase,
       concat('graph_node.', coalesce(CAST(graph_id AS VARCHAR), '?'), '.', CAST(graph_node_id AS VARCHAR),
              '_ns_per_step') AS metric,
       ns_per_step AS value, 'lower' AS better, spread_ns AS spread,
       name, module_fqn, graph_id, graph_node_id
FROM graph_node_summary
WHERE run_id IN (SELECT unnest(?))
ORDER BY run_id, metric
"""


def metric_name(graph_id: int | None, graph_node_id: int) -> str:
    return f"{PREFIX}{'?' if graph_id is None else graph_id}.{graph_node_id}_ns_per_step"


def _wanted(spec: str, graph_id, node_id) -> bool:
    """A --graph-node value: the node id, or GRAPH.NODE / GRAPH:NODE."""
    spec = spec.strip()
    g = "?" if graph_id is None else str(graph_id)
    return spec in (str(node_id), f"{g}.{node_id}", f"{g}:{node_id}")


def node_rows(con, run_ids: list[str], nodes: tuple[str, ...]) -> tuple[list[dict], dict[str, str]]:
    """The graph nodes' trend rows of these runs (run_metrics' columns, rank NULL) and what each node line
    is about ('kernel name (module FQN)', as the last run by run id that has it says). nodes: the node ids to follow
    (empty: every node). A clear error when the runs have no graph node, or none of those asked."""
    from tracehouse.warehouse.engine import focused

    with focused(con, run_ids) as on:
        cur = on.execute(NODES_SQL, [run_ids])
        columns = [d[0] for d in cur.description]
        found = [dict(zip(columns, r)) for r in cur.fetchall()]
    if not found:
        raise TracehouseError(
            "these runs have no CUDA-graph node ids (kernels.graph_node_id is NULL in every run)",
            hint="traces from a recent Kineto (CUDA 12+) or an Nsight Systems export of a graph replay carry them",
        )
    if nodes:
        found = [r for r in found if any(_wanted(s, r["graph_id"], r["graph_node_id"]) for s in nodes)]
        if not found:
            raise TracehouseError(
                f"--graph-node {' '.join(nodes)} matches no graph node of these runs",
                hint="list the nodes with `tracehouse trend --graph-nodes` or the view graph_node_summary",
            )
    about = {}
    for r in found:  # ordered by run id: the last one wins
        about[r["metric"]] = short_name(r["name"]) + (f" ({r['module_fqn']})" if r["module_fqn"] else "")
    keep = ("run_id", "rank", "phase", "metric", "value", "better", "spread")
    return [{k: r[k] for k in keep} for r in found], about


def with_reference(node_table: list[dict], run_metrics: pa.Table | None, schema: pa.Schema) -> pa.Table:
    """The nodes' rows plus the runs' step_time_median_ns rows (rank NULL) from run_metrics."""
    nodes = pa.Table.from_pylist(node_table, schema=schema)
    if run_metrics is None or run_metrics.num_rows == 0:
        return nodes
    ref = run_metrics.filter(pa.compute.equal(run_metrics.column("metric"), REFERENCE))
    ref = ref.select(schema.names).cast(schema)
    return pa.concat_tables([nodes, ref])

"""Replay of a run's dependency graph with changed GPU durations (the what-if model, docs/interpretation.md).

Input: the rows of the view `dependency_edges` of each (run, rank): one row per (node, candidate dependency),
a node with no dependency once with pred_id NULL. Nodes are GPU activities (node_type `gpu`) and host CUDA
calls (`cpu`; `cpu_issue` for the issuing part of a blocking copy). Each edge has the time it was satisfied
(ready_ns) and, by the trace, a latency: the time from ready_ns to the node's observed start (for a host
call's dependency on GPU work, `host_sync`: to the call's observed end), its *slack*.

The model:
- an edge's latency is its slack when it is the node's binding edge, else min(its class's stated latency,
  its slack); a class is (edge, graph replay or not) on the rank, and its stated latency is the median
  slack of the edges of that class that were satisfied last at their node (the latency that edge type
  shows when it binds);
- the binding edge of a node is the one whose ready time plus that latency is the latest (ties: the later
  ready time): the dependency that, with its usual cost, explains the start;
- a node's new start = max over its edges of (the dependency's new ready time + the edge's latency); its
  dependency's new ready time = ready_ns moved by as much as the dependency's end moved (its start, for a
  launch call: the activity waits for its issue);
- a GPU activity's new end = new start + its duration x its factor (1/K when matched); a host call's new
  end = max(new start + its own time, its host_sync edges' new ready + latency), its own time being its
  duration when it waited on no GPU work, else the shortest duration of the calls of its name on the
  rank that did not wait (never more than its own), or without one the part of the call after the awaited
  work ended;
- nodes with no dependency keep their observed times;
- a collective instance matched across the ranks of the run (replay_units) ends, on each rank, its own
  transfer time (observed end - the last observed arrival, scaled as its duration is) after the last new
  arrival.
With every factor 1 each node lands where it was observed (every latency is at most its slack and the
binding one equals it), so the replay reproduces the trace exactly; every edge goes back in issue order
(the graph has no cycle), and nodes are replayed in a topological order.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

#: row fields the replay reads, in this order (the view's columns)
EDGE_FIELDS = (
    "node_type",
    "node_id",
    "step",
    "name",
    "stream",
    "node_start_ns",
    "node_end_ns",
    "pred_type",
    "pred_id",
    "ready_ns",
    "choice_ns",
    "edge",
    "edge_kind",
    "edge_name",
    "category",
)


@dataclass(slots=True)
class Edge:
    pred: tuple[str, int]
    ready: int
    edge: str
    kind: str
    from_start: bool  # the dependency is ready when its start moves (a launch call), else its end
    choice: int  # the time it competes with for "satisfied last" (dependency_edges.choice_ns)
    slack: int = 0
    lat: int = 0


@dataclass(slots=True)
class Node:
    key: tuple[str, int]
    step: int | None
    name: str
    stream: int | None
    category: str | None
    start: int
    end: int
    starts: list[Edge] = field(default_factory=list)  # dependencies of its start
    ends: list[Edge] = field(default_factory=list)  # a host call's waits on GPU work (its end)
    replayed: bool = False  # a GPU activity of a graph replay
    new_start: int = 0
    new_end: int = 0
    own: int = 0  # a host call's own time (new end >= new start + own)
    binding: Edge | None = None
    rank: int = 0


def build(rows: Iterable[tuple]) -> dict[tuple[str, int], Node]:
    """The nodes of the rank, with their edges, from `dependency_edges` rows (fields EDGE_FIELDS)."""
    nodes: dict[tuple[str, int], Node] = {}
    for r in rows:
        ntype, nid, step, name, stream, start, end, ptype, pid, ready, choice, edge, kind, ename, cat = r
        key = (ntype, nid)
        node = nodes.get(key)
        if node is None:
            node = nodes[key] = Node(key, step, name, stream, cat, start, end)
        if pid is None or ready is None:
            continue
        gpu = ntype == "gpu"
        e = Edge((ptype, pid), ready, edge, kind, gpu and ptype != "gpu", ready if choice is None else choice)
        if not gpu and ptype == "gpu":
            e.slack = end - ready
            node.ends.append(e)
        else:
            e.slack = start - ready
            node.starts.append(e)
        if gpu and edge == "launch" and ename and "GraphLaunch" in ename:
            node.replayed = True
    return nodes


def _class(node: Node, e: Edge) -> tuple[str, str, bool]:
    return (node.key[0], e.edge, node.replayed)


def stated_latencies(nodes: Mapping[tuple[str, int], Node]) -> dict[tuple[str, str, bool], int]:
    """Per edge class, the median slack of the edges of that class satisfied last at their node."""
    seen: dict[tuple[str, str, bool], list[int]] = {}
    for node in nodes.values():
        for edges in (node.starts, node.ends):
            if edges:
                last = max(edges, key=lambda e: e.choice)
                seen.setdefault(_class(node, last), []).append(last.slack)
    return {c: int(statistics.median(v)) for c, v in seen.items()}


def _bind(node: Node, edges: list[Edge], stated: Mapping) -> None:
    for e in edges:
        e.lat = min(stated.get(_class(node, e), 0), e.slack)
    best = max(edges, key=lambda e: (e.ready + e.lat, e.ready))
    best.lat = best.slack
    if edges is node.starts or node.binding is None:
        node.binding = best


def prepare(nodes: Mapping[tuple[str, int], Node]) -> None:
    """Fix every edge's latency and every host call's own time (the model above); once per rank."""
    stated = stated_latencies(nodes)
    shortest: dict[str, int] = {}
    for node in nodes.values():
        if node.key[0] != "gpu" and not any(e.slack > 0 and e.ready > node.start for e in node.ends):
            d = node.end - node.start
            shortest[node.name] = min(shortest.get(node.name, d), d)
    for node in nodes.values():
        node.binding = None
        if node.starts:
            _bind(node, node.starts, stated)
        if node.ends:
            _bind(node, node.ends, stated)
        dur = node.end - node.start
        waited = [e for e in node.ends if e.ready > node.start]
        if waited:  # the part of the call that was no wait: as a call of its name that did not wait, else
            # the part after the awaited work ended
            node.own = min(dur, shortest.get(node.name, max(0, node.end - max(e.ready for e in waited))))
        else:
            node.own = dur


def order(nodes: Mapping[tuple[str, int], Node]) -> list[Node]:
    """The nodes in a topological order of their dependencies (those that are nodes of the rank): Kahn's
    algorithm; a cycle (which the view's issue order rules out) raises ValueError."""
    waiting: dict[tuple[str, int], int] = {}
    after: dict[tuple[str, int], list[Node]] = {}
    for node in nodes.values():
        preds = {e.pred for e in node.starts} | {e.pred for e in node.ends}
        preds = [p for p in preds if p in nodes]
        waiting[node.key] = len(preds)
        for p in preds:
            after.setdefault(p, []).append(node)
    out = [n for n in nodes.values() if not waiting[n.key]]
    for node in out:  # grows while it is walked
        for child in after.get(node.key, ()):
            waiting[child.key] -= 1
            if not waiting[child.key]:
                out.append(child)
    if len(out) != len(nodes):
        raise ValueError("the dependency graph has a cycle")
    return out


def replay(ordered: list[Node], nodes: Mapping, duration: Callable[[Node], int], merged=frozenset()) -> None:
    """One rank's replay (replay_units with every node its own unit)."""
    replay_units([[(0, n)] for n in ordered], {0: nodes}, duration, frozenset((0, k) for k in merged))


def order_units(graphs: Mapping[int, Mapping], groups: Iterable[list[tuple[int, tuple]]] = ()) -> list[list]:
    """Units of replay in a topological order (Kahn's algorithm): a collective instance matched across ranks
    (groups: its (rank, node key) on each rank) is one unit, every other node its own; a unit waits for
    the units of its members' dependencies on their ranks. A cycle (which the view's issue order rules out)
    raises ValueError."""
    units: list[list[tuple[int, Node]]] = []
    unit_of: dict[tuple[int, tuple], int] = {}
    for group in groups:
        members = [(r, graphs[r][k]) for r, k in group if r in graphs and k in graphs[r]]
        if len(members) > 1:
            for r, n in members:
                unit_of[(r, n.key)] = len(units)
            units.append(members)
    for r, nodes in graphs.items():
        for k, n in nodes.items():
            if (r, k) not in unit_of:
                unit_of[(r, k)] = len(units)
                units.append([(r, n)])
    waiting = [0] * len(units)
    after: list[list[int]] = [[] for _ in units]
    for i, unit in enumerate(units):
        preds = set()
        for r, n in unit:
            preds.update(unit_of[(r, e.pred)] for e in (*n.starts, *n.ends) if e.pred in graphs[r])
        preds.discard(i)
        waiting[i] = len(preds)
        for p in preds:
            after[p].append(i)
    out = [i for i in range(len(units)) if not waiting[i]]
    for i in out:  # grows while it is walked
        for child in after[i]:
            waiting[child] -= 1
            if not waiting[child]:
                out.append(child)
    if len(out) != len(units):
        raise ValueError("the dependency graph has a cycle")
    return [units[i] for i in out]


def replay_units(
    units: list[list], graphs: Mapping, duration: Callable[[Node], int], merged=frozenset()
) -> None:
    """Set new_start / new_end of every node, GPU activities lasting duration(node). A node in `merged` (a
    fused chain's later member) starts when the activity before it on its stream ends (its stream-order
    edge, no latency; its other dependencies are the fused kernel's, its first member's). A collective
    matched across ranks ends, on each rank, its own transfer time (its observed end - the last
    arrival, scaled as duration scales it) after the last rank's new arrival."""
    for unit in units:
        for r, node in unit:
            _start(node, graphs[r], (r, node.key) in merged)
        if len(unit) == 1:
            r, node = unit[0]
            _end(node, graphs[r], duration, (r, node.key) in merged)
            continue
        last = max(n.start for _, n in unit)
        new_last = max(n.new_start for _, n in unit)
        for _, n in unit:
            dur = n.end - n.start
            transfer = n.end - max(n.start, last)
            scale = duration(n) / dur if dur else 1.0
            # a negative transfer (the peers' clocks run ahead of this rank's) is a clock offset: kept as is
            n.new_end = max(n.new_start, new_last) + (round(transfer * scale) if transfer > 0 else transfer)


def _start(node: Node, nodes: Mapping, merged: bool) -> None:
    start = node.start
    if merged:  # a fused member: right after its stream's previous activity; its launch call
        # (not made): right where the host's previous work ends
        prev = [e for e in node.starts if e.edge == "stream_order" or node.key[0] != "gpu"]
        start = max((_ready(e, nodes) for e in prev), default=start)
    elif node.starts:
        start = max(_ready(e, nodes) + e.lat for e in node.starts)
    node.new_start = start


def _end(node: Node, nodes: Mapping, duration: Callable[[Node], int], merged: bool = False) -> None:
    if node.key[0] == "gpu":
        node.new_end = node.new_start + duration(node)
        return
    end = node.new_start + (0 if merged else node.own)
    if node.ends:
        end = max(end, max(_ready(e, nodes) + e.lat for e in node.ends))
    node.new_end = end


def _ready(e: Edge, nodes: Mapping) -> int:
    pred = nodes.get(e.pred)
    if pred is None:
        return e.ready
    return e.ready + (pred.new_start - pred.start if e.from_start else pred.new_end - pred.end)


def step_spans(nodes: Mapping[tuple[str, int], Node]) -> dict[int, tuple[int, int]]:
    """Per step: (observed, replayed) GPU span = last activity end - first activity start."""
    lo: dict[int, list[int]] = {}
    for n in nodes.values():
        if n.key[0] != "gpu" or n.step is None:
            continue
        v = lo.get(n.step)
        if v is None:
            lo[n.step] = [n.start, n.end, n.new_start, n.new_end]
        else:
            v[0] = min(v[0], n.start)
            v[1] = max(v[1], n.end)
            v[2] = min(v[2], n.new_start)
            v[3] = max(v[3], n.new_end)
    return {s: (v[1] - v[0], v[3] - v[2]) for s, v in lo.items()}


def path_time(nodes: Mapping[tuple[str, int], Node], last: Node, new: bool) -> dict[str, int]:
    """The step's critical path through the (replayed, when new) graph, as time per segment label: a GPU
    activity's category, `cpu` for a host call, an edge's kind for the time from its dependency being
    ready to the node. The walk starts at `last` (the step's last activity) and follows, at each node, the
    dependency that determined it (the latest ready + latency; for a host call whose end waited on the GPU,
    that wait) while the dependency is a node of the step (the time to a dependency outside is the last
    segment); boundaries are clamped by a running minimum, so the segments tile the path."""
    out: dict[str, int] = {}
    node: Node | None = last
    bound = None
    while node is not None:
        s, e = (node.new_start, node.new_end) if new else (node.start, node.end)
        label = (node.category or "other") if node.key[0] == "gpu" else "cpu"
        edges = node.starts
        if node.ends:
            ready_end = max(_ready_of(x, nodes, new) + x.lat for x in node.ends)
            if ready_end >= s + node.own and ready_end >= e:
                edges, s = node.ends, e  # its end waited on the GPU: the wait is the path
        hi = e if bound is None else min(bound, e)
        lo = min(s, hi)
        if hi > lo:
            out[label] = out.get(label, 0) + hi - lo
        if not edges:
            break
        best = max(edges, key=lambda x: (_ready_of(x, nodes, new) + x.lat, x.ready))
        ready = min(_ready_of(best, nodes, new), lo)
        if lo > ready:
            out[best.kind] = out.get(best.kind, 0) + lo - ready
        bound = ready
        pred = nodes.get(best.pred)
        node = pred if pred is not None and pred.step == last.step else None
    return out


def _ready_of(e: Edge, nodes: Mapping, new: bool) -> int:
    return _ready(e, nodes) if new else e.ready

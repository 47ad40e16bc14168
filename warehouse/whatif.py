"""What-if: the predicted step time when some GPU work runs K times faster, or a fusion removes kernels.

`whatif(con, run, kernel=..., category=..., fusion=..., speedup=K)` replays each rank's dependency graph
(the view `dependency_edges`, read through `_whatif_edges`; the model is warehouse/whatif_replay.py and
docs/interpretation.md, "What-if") with the matched activities' durations divided by K and returns one row
per (rank, step): the observed and predicted step time (first activity start to last activity end, the
step's GPU span), the change, and the path segments whose time changed. One plain function, for the CLI
(`tracehouse whatif`), the report (`whatif_gains`) and any other caller.

A fusion row (`fusion`: a pattern_id of fusion_match) replays its chains (sql/fusion/_fusion_chains.sql:
Confirmed rows their adjacent chains, Likely rows every chain) as fused: each chain becomes one kernel that
lasts as long as its longest member and starts where its first member started; the other members are
gone (they take no time and add no gap). Memory-bound element-wise kernels read and write the tensor once
each; the fused kernel does it once for all of them, so the longest member is what remains.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from tracehouse.warehouse import whatif_replay as wr
from tracehouse.warehouse.runs import resolve_run

from tracehouse.errors import InvalidArgument

COLUMNS = (
    "run_id",
    "rank",
    "step",
    "change",
    "matched",
    "matched_ns",
    "observed_ns",
    "predicted_ns",
    "change_ns",
    "change_pct",
    "path_changes",
)


@dataclass(frozen=True)
class Change:
    """What changes: activities whose name matches `kernel` (a regex, searched), of `category`, or the
    chains of fusion row `fusion`; matched activities last duration / speedup (fusion: see the module)."""

    kernel: str | None = None
    category: str | None = None
    fusion: str | None = None
    speedup: float = 2.0

    def describe(self) -> str:
        if self.fusion:
            return f"fusion {self.fusion}"
        what = f"kernels /{self.kernel}/" if self.kernel else f"category {self.category}"
        return f"{what} {self.speedup:g}x faster"


def check_change(change: Change) -> None:
    given = [x for x in (change.kernel, change.category, change.fusion) if x]
    if len(given) != 1:
        raise InvalidArgument("name exactly one of --kernel PATTERN, --category C or --fusion ROW")
    if not change.speedup > 0:
        raise InvalidArgument(f"--speedup must be > 0 (got {change.speedup:g})")
    if change.kernel:
        try:
            re.compile(change.kernel)
        except re.error as exc:
            raise InvalidArgument(f"--kernel {change.kernel!r} is not a regular expression: {exc}") from None


class RankGraph:
    """One rank's graph, prepared once (latencies fixed, topological order) and replayed per change."""

    def __init__(self, rows):
        self.nodes = wr.build(rows)
        wr.prepare(self.nodes)
        self.ordered = wr.order(self.nodes)
        self.gpu = [n for n in self.nodes.values() if n.key[0] == "gpu"]

    def run(self, durations: dict, merged=frozenset()) -> dict[int, tuple[int, int]]:
        """Replay with durations {node key: new duration} (others unchanged); per step (observed, new)."""

        def duration(node: wr.Node) -> int:
            return durations.get(node.key, node.end - node.start)

        wr.replay(self.ordered, self.nodes, duration, merged)
        return wr.step_spans(self.nodes)

    def last_of(self, step: int, new: bool) -> wr.Node:
        acts = [n for n in self.gpu if n.step == step]
        if new:
            return max(acts, key=lambda n: (n.new_end, n.new_start, n.key[1]))
        return max(acts, key=lambda n: (n.end, n.start, n.key[1]))


def load_graphs(con, run_id: str, rank: int | None = None, step: int | None = None) -> dict[int, RankGraph]:
    """Each rank's graph (or rank `rank`'s); with `step`, the nodes of that step only (a dependency outside
    it keeps its observed ready time)."""
    cols = ", ".join(wr.EDGE_FIELDS)
    where_rank = "" if rank is None else f" AND rank = {int(rank)}"
    where_step = "" if step is None else f" AND step = {int(step)}"
    ranks = [
        r
        for (r,) in con.execute(
            f"SELECT DISTINCT rank FROM kernels WHERE run_id = ?{where_rank} ORDER BY 1", [run_id]
        ).fetchall()
    ]
    graphs = {}
    for r in ranks:
        rows = con.execute(
            f"SELECT {cols} FROM _whatif_edges WHERE run_id = ? AND rank = ?{where_step}", [run_id, r]
        ).fetchall()
        graphs[r] = RankGraph(rows)
    return graphs


def fusion_chains(con, run_id: str, pattern: str) -> dict[int, list[list[int]]]:
    """Per rank, the chains (kernel ids in order) the fusion row `pattern` replays as fused."""
    row = con.execute(
        "SELECT status FROM fusion_match WHERE run_id = ? AND pattern_id = ? LIMIT 1", [run_id, pattern]
    ).fetchone()
    if row is None:
        raise InvalidArgument(
            f"fusion row {pattern!r} is not in run {run_id}'s fusion_match (its pattern_id column lists them)"
        )
    if row[0] == "Fused":
        raise InvalidArgument(f"fusion row {pattern!r} is already fused in run {run_id}: nothing to replay")
    rows = con.execute(
        "SELECT rank, kernel_id_1, kernel_id_2, kernel_id_3 FROM _fusion_chains"
        " WHERE run_id = ? AND pattern_id = ? AND (adjacent OR ?)",
        [run_id, pattern, row[0] != "Confirmed"],
    ).fetchall()
    chains: dict[int, list[list[int]]] = {}
    for rank, *ids in rows:
        chains.setdefault(rank, []).append([i for i in ids if i is not None])
    return chains


def _plan(graph: RankGraph, change: Change, chains: list[list[int]] | None) -> tuple[dict, frozenset]:
    """The new durations and the merged (fused away) activities of one rank."""
    durations: dict = {}
    if change.fusion:
        merged = set()
        for chain in chains or []:
            members = [graph.nodes.get(("gpu", k)) for k in chain]
            members = [m for m in members if m is not None]
            if not members:
                continue
            durations[members[0].key] = max(m.end - m.start for m in members)
            for m in members[1:]:
                durations[m.key] = 0
                merged.add(m.key)
        return durations, frozenset(merged)
    pattern = re.compile(change.kernel) if change.kernel else None
    for n in graph.gpu:
        if pattern.search(n.name) if pattern else n.category == change.category:
            durations[n.key] = round((n.end - n.start) / change.speedup)
    return durations, frozenset()


def whatif(con, run: str, change: Change, step: int | None = None, graphs=None) -> list[dict]:
    """One row per (rank, step) of run `run` (or its step `step`): the step time observed and predicted
    under `change`, its change, the matched activities and the path segments that changed (COLUMNS)."""
    check_change(change)
    run_id = resolve_run(con, run)
    graphs = graphs if graphs is not None else load_graphs(con, run_id, step=step)
    chains = fusion_chains(con, run_id, change.fusion) if change.fusion else {}
    rows: list[dict] = []
    any_match = False
    for rank, graph in graphs.items():
        durations, merged = _plan(graph, change, chains.get(rank))
        any_match = any_match or bool(durations)
        for row in _replay_steps(graph, durations, merged, step):
            rows.append({"run_id": run_id, "rank": rank, "change": change.describe(), **row})
    if not any_match:
        raise InvalidArgument(f"{change.describe()}: no GPU activity of run {run_id} matches")
    if step is not None and not rows:
        raise InvalidArgument(f"run {run_id} has no step {step} with GPU activities")
    return [{c: r[c] for c in COLUMNS} for r in rows]


def _replay_steps(graph: RankGraph, durations: dict, merged: frozenset, step: int | None) -> list[dict]:
    """Replay the rank's graph unchanged (the observed path) and changed; one row per step."""
    before = graph.run({})
    paths = {s: wr.path_time(graph.nodes, graph.last_of(s, False), False) for s in before if _wanted(s, step)}
    spans = graph.run(durations, merged)
    rows = []
    for s in sorted(paths):
        observed, predicted = spans[s]
        after = wr.path_time(graph.nodes, graph.last_of(s, True), True)
        keys = [k for k in durations if graph.nodes[k].step == s]
        rows.append(
            {
                "step": s,
                "matched": len(keys),
                "matched_ns": sum(graph.nodes[k].end - graph.nodes[k].start for k in keys),
                "observed_ns": observed,
                "predicted_ns": predicted,
                "change_ns": predicted - observed,
                "change_pct": round(100.0 * (predicted - observed) / observed, 2) if observed else None,
                "path_changes": path_changes(paths[s], after),
            }
        )
    return rows


def whatif_gains(
    con, run_id: str, rank: int, step: int, categories: list[str], fusions: list[str], speedup: float = 2.0
) -> list[dict]:
    """The report's predicted gains on its step: per category, the step time with its activities `speedup`
    times faster; per fusion row (pattern_id), with its chains fused. One row per subject that has
    activities in the step: kind ('category' | 'fusion'), subject, speedup (None for a fusion),
    observed_ns, predicted_ns, change_ns, change_pct, path_changes."""
    graphs = load_graphs(con, run_id, rank=rank, step=step)
    graph = graphs.get(rank)
    if graph is None or not graph.gpu:
        return []
    out = []
    subjects = [("category", c, Change(category=c, speedup=speedup)) for c in categories]
    subjects += [("fusion", f, Change(fusion=f)) for f in fusions]
    for kind, subject, change in subjects:
        chains = fusion_chains(con, run_id, subject).get(rank) if kind == "fusion" else None
        durations, merged = _plan(graph, change, chains)
        if not durations:
            continue
        [row] = _replay_steps(graph, durations, merged, step)
        out.append(
            {
                "kind": kind,
                "subject": subject,
                "speedup": None if kind == "fusion" else speedup,
                **{
                    k: row[k]
                    for k in ("observed_ns", "predicted_ns", "change_ns", "change_pct", "path_changes")
                },
            }
        )
    return out


def _wanted(s: int, step: int | None) -> bool:
    return step is None or s == step


def path_changes(before: dict[str, int], after: dict[str, int], min_ns: int = 1000) -> str:
    """The critical path's segment labels whose time changed by min_ns or more, largest change first:
    'moe 120.3 -> 60.1 us; sync_wait 3.0 -> 12.4 us'."""
    diffs = []
    for label in set(before) | set(after):
        a, b = before.get(label, 0), after.get(label, 0)
        if abs(b - a) >= min_ns:
            diffs.append((abs(b - a), label, a, b))
    diffs.sort(reverse=True)
    return "; ".join(f"{label} {a / 1e3:.1f} -> {b / 1e3:.1f} us" for _, label, a, b in diffs)


def report_step(con, run_id: str) -> int:
    """The step the run report shows (report_steps, pick 'all')."""
    row = con.execute("SELECT step FROM report_steps WHERE run_id = ? AND pick = 'all'", [run_id]).fetchone()
    if row is None:
        raise InvalidArgument(f"run {run_id} has no step the report shows (report_steps)")
    return row[0]

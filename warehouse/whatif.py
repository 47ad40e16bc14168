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
from tracehouse.warehouse.stored import reads_report_rows

from tracehouse.errors import InvalidArgument

# a step's figures, observed and predicted (_replay_steps), in whatif's rows and whatif_gains' alike
STEP_FIGURES = (
    "observed_ns",
    "predicted_ns",
    "change_ns",
    "change_pct",
    "path_changes",
    "peers_missing",
    "predicted_if_waiting_ns",
    "predicted_if_transfer_ns",
)
COLUMNS = ("run_id", "rank", "step", "change", "matched", "matched_ns", *STEP_FIGURES)


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
    """One rank's graph, prepared once (latencies fixed)."""

    def __init__(self, rows):
        self.nodes = wr.build(rows)
        wr.prepare(self.nodes)
        self.gpu = [n for n in self.nodes.values() if n.key[0] == "gpu"]
        self.by_step: dict[int, list[wr.Node]] = {}
        for n in self.gpu:
            self.by_step.setdefault(n.step, []).append(n)

    def last_of(self, step: int, new: bool) -> wr.Node:
        acts = self.by_step[step]
        if new:
            return max(acts, key=lambda n: (n.new_end, n.new_start, n.key[1]))
        return max(acts, key=lambda n: (n.end, n.start, n.key[1]))


class RunGraph:
    """The graphs of a run's ranks, replayed together: a collective instance on several ranks ends after
    its last arrival (_whatif_collectives). `unsure`: the (rank, node key) of the communication activities
    whose instance does not have every rank it needs in the run (_whatif_collectives.complete false):
    their time splits into waiting for a peer and transfer only against peers the run does not hold."""

    def __init__(
        self,
        ranks: dict[int, RankGraph],
        groups: list[list[tuple[int, tuple]]],
        unsure: frozenset[tuple[int, tuple]] = frozenset(),
    ):
        self.ranks = ranks
        self.units = wr.order_units({r: g.nodes for r, g in ranks.items()}, groups)
        self.unsure = unsure

    def run(self, durations: dict, merged: dict | None = None) -> dict[tuple[int, int], tuple[int, int]]:
        """Replay with durations {(rank, node key): new duration} (others unchanged) and merged {rank: keys};
        per (rank, step): (observed, new) GPU span."""

        def duration(node: wr.Node) -> int:
            return durations.get((node.rank, node.key), node.end - node.start)

        keys = frozenset((r, k) for r, ks in (merged or {}).items() for k in ks)
        wr.replay_units(self.units, {r: g.nodes for r, g in self.ranks.items()}, duration, keys)
        return {(r, s): v for r, g in self.ranks.items() for s, v in wr.step_spans(g.nodes).items()}


def load_graphs(con, run_id: str, step: int | None = None) -> RunGraph:
    """The run's graph (with `step`: the nodes of that step only; a dependency outside it keeps its
    observed ready time). A step a report shows is read from the report's kept rows where the connection
    holds them (report_whatif_edges, report_whatif_collectives: warehouse.stored.reads_report_rows), any
    other from _whatif_edges and _whatif_collectives, which compute the whole run: the same rows."""
    cols = ", ".join(wr.EDGE_FIELDS)
    where_step = "" if step is None else f" AND step = {int(step)}"
    edges = (
        "report_whatif_edges"
        if reads_report_rows(con, "report_whatif_edges", run_id, step)
        else "_whatif_edges"
    )
    collectives = (
        "report_whatif_collectives"
        if reads_report_rows(con, "report_whatif_collectives", run_id, step)
        else "_whatif_collectives"
    )
    ranks = [
        r
        for (r,) in con.execute(
            "SELECT DISTINCT rank FROM kernels WHERE run_id = ? ORDER BY 1", [run_id]
        ).fetchall()
    ]
    graphs = {}
    for r in ranks:
        rows = con.execute(
            f"SELECT {cols} FROM {edges} WHERE run_id = ? AND rank = ?{where_step}", [run_id, r]
        ).fetchall()
        graphs[r] = RankGraph(rows)
        for n in graphs[r].nodes.values():
            n.rank = r
    groups: dict[tuple, list] = {}
    unsure = set()
    for rank, kid, complete, present, *instance in con.execute(
        "SELECT rank, kernel_id, complete, ranks, step, collective, process_group, instance"
        f" FROM {collectives} WHERE run_id = ?{where_step}",
        [run_id],
    ).fetchall():
        if present >= 2:
            groups.setdefault(tuple(instance), []).append((rank, ("gpu", kid)))
        if not complete:
            unsure.add((rank, ("gpu", kid)))
    return RunGraph(graphs, list(groups.values()), frozenset(unsure))


def fusion_chains(con, run_id: str, pattern: str, step: int | None = None) -> dict[int, list[list[int]]]:
    """Per rank, the chains (kernel ids in order) the fusion row `pattern` replays as fused (with `step`: at
    least those of that step; a step a report shows reads the report's kept chains, report_fusion_chains,
    where the connection holds them: warehouse.stored.reads_report_rows)."""
    row = con.execute(
        "SELECT status FROM fusion_match WHERE run_id = ? AND pattern_id = ? LIMIT 1", [run_id, pattern]
    ).fetchone()
    if row is None:
        raise InvalidArgument(
            f"fusion row {pattern!r} is not in run {run_id}'s fusion_match (its pattern_id column lists them)"
        )
    if row[0] == "Fused":
        raise InvalidArgument(f"fusion row {pattern!r} is already fused in run {run_id}: nothing to replay")
    if reads_report_rows(con, "report_fusion_chains", run_id, step):
        chains, where_step = "report_fusion_chains", f" AND step = {int(step)}"
    else:  # every chain of the run: a replay of one step finds no node of another step's chains
        chains, where_step = "_fusion_chains", ""
    rows = con.execute(
        f"SELECT rank, kernel_id_1, kernel_id_2, kernel_id_3 FROM {chains}"
        f" WHERE run_id = ? AND pattern_id = ? AND (adjacent OR ?){where_step}",
        [run_id, pattern, row[0] != "Confirmed"],
    ).fetchall()
    chains: dict[int, list[list[int]]] = {}
    for rank, *ids in rows:
        chains.setdefault(rank, []).append([i for i in ids if i is not None])
    return chains


def _plan(run: RunGraph, change: Change, chains: dict[int, list[list[int]]]) -> tuple[dict, dict]:
    """The new durations {(rank, key): ns} and the merged (fused away) activities {rank: keys}."""
    durations: dict = {}
    merged: dict = {}
    pattern = re.compile(change.kernel) if change.kernel else None
    for rank, graph in run.ranks.items():
        if change.fusion:
            for chain in chains.get(rank, []):
                members = [m for m in (graph.nodes.get(("gpu", k)) for k in chain) if m is not None]
                if members:
                    durations[(rank, members[0].key)] = max(m.end - m.start for m in members)
                for m in members[1:]:
                    durations[(rank, m.key)] = 0
                    merged.setdefault(rank, set()).add(m.key)
                    # its launch call is not made (a graph replay's launch launches the others too)
                    if not m.replayed:
                        merged[rank].update(
                            e.pred for e in m.starts if e.edge == "launch" and e.pred[0] != "gpu"
                        )
            continue
        for n in graph.gpu:
            if pattern.search(n.name) if pattern else n.category == change.category:
                durations[(rank, n.key)] = round((n.end - n.start) / change.speedup)
    return durations, merged


def whatif(
    con, run: str, change: Change, step: int | None = None, graph: RunGraph | None = None
) -> list[dict]:
    """One row per (rank, step) of run `run` (or its step `step`): the step time observed and predicted
    under `change`, its change, the matched activities and the path segments that changed (COLUMNS)."""
    check_change(change)
    run_id = resolve_run(con, run)
    graph = graph if graph is not None else load_graphs(con, run_id, step=step)
    chains = fusion_chains(con, run_id, change.fusion) if change.fusion else {}
    durations, merged = _plan(graph, change, chains)
    if not durations:
        raise InvalidArgument(f"{change.describe()}: no GPU activity of run {run_id} matches")
    rows = [
        {"run_id": run_id, "change": change.describe(), **row}
        for row in _replay_steps(graph, durations, merged, step, _unsure(graph, change, durations))
    ]
    if step is not None and not rows:
        raise InvalidArgument(f"run {run_id} has no step {step} with GPU activities")
    return [{c: r[c] for c in COLUMNS} for r in rows]


def _unsure(run: RunGraph, change: Change, durations: dict) -> frozenset:
    """The activities whose time `change` changes (sped up or slowed: not with K = 1) whose peers are not
    all in the run (run.unsure). A fusion changes no collective's transfer (its chain lasts as long as its
    longest member): none."""
    if change.fusion:
        return frozenset()
    out = []
    for (rank, key), ns in durations.items():
        node = run.ranks[rank].nodes[key]
        if (rank, key) in run.unsure and ns != node.end - node.start:
            out.append((rank, key))
    return frozenset(out)


def _replay_steps(
    run: RunGraph, durations: dict, merged: dict, step: int | None, unsure: frozenset = frozenset()
) -> list[dict]:
    """Replay the run's graph unchanged (the observed paths) and changed; one row per (rank, step).

    A sped-up communication activity whose peers are not all in the run (`unsure`, _unsure) makes the step's
    prediction unknown: its observed time holds its wait for the absent ranks, which a faster transfer does
    not shorten, and how much is wait the trace cannot tell. A row gives the count of those activities in
    its step (peers_missing, over the run's ranks: a change on any rank reaches the others through the
    matched collectives) and the two ends: the step if all of their time were waiting (they keep their
    time) and if all of it were transfer (as if the absent ranks had arrived no later than those in the
    run). Where the ends differ, the row has no prediction (predicted_ns, change_ns, change_pct,
    path_changes NULL); where they agree (those activities are off the step's path), it is the prediction
    whatever the split."""
    before = run.run({})
    keys = [k for k in before if _wanted(k[1], step)]
    paths = {(r, s): wr.path_time(run.ranks[r].nodes, run.ranks[r].last_of(s, False), False) for r, s in keys}
    spans = run.run(durations, merged)
    after = {(r, s): wr.path_time(run.ranks[r].nodes, run.ranks[r].last_of(s, True), True) for r, s in keys}
    waiting = run.run({k: v for k, v in durations.items() if k not in unsure}, merged) if unsure else spans
    rows = []
    for r, s in sorted(keys):
        graph = run.ranks[r]
        observed, predicted = spans[(r, s)]
        mine = [graph.nodes[k] for rank, k in durations if rank == r and graph.nodes[k].step == s]
        missing = sum(1 for rank, k in unsure if run.ranks[rank].nodes[k].step == s)
        known = waiting[(r, s)][1] == predicted  # the split does not matter (always so with none missing)
        rows.append(
            {
                "rank": r,
                "step": s,
                "matched": len(mine),
                "matched_ns": sum(n.end - n.start for n in mine),
                "observed_ns": observed,
                "predicted_ns": predicted if known else None,
                "change_ns": predicted - observed if known else None,
                "change_pct": (round(100.0 * (predicted - observed) / observed, 2) if observed else None)
                if known
                else None,
                "path_changes": path_changes(paths[(r, s)], after[(r, s)]) if known else None,
                "peers_missing": missing,
                "predicted_if_waiting_ns": waiting[(r, s)][1],
                "predicted_if_transfer_ns": predicted,
            }
        )
    return rows


def whatif_gains(
    con,
    run_id: str,
    rank: int,
    step: int,
    categories: list[str],
    fusions: list[str],
    kernels: list[str] = (),
    speedup: float = 2.0,
) -> list[dict]:
    """The report's predicted gains on its step (of rank `rank`; every rank's nodes of the step are
    replayed, so collectives wait for their peers): per category and per kernel name, the step time with
    those activities `speedup` times faster; per fusion row (pattern_id), with its chains fused. One row
    per subject that has activities in the step: kind ('category' | 'kernel' | 'fusion'), subject,
    speedup (None for a fusion), observed_ns, predicted_ns, change_ns, change_pct, path_changes,
    peers_missing, predicted_if_waiting_ns, predicted_if_transfer_ns (_replay_steps: no prediction where
    sped-up collectives' peers are missing from the run, the two ends instead)."""
    graph = load_graphs(con, run_id, step=step)
    if rank not in graph.ranks or not graph.ranks[rank].gpu:
        return []
    out = []
    subjects = [("category", c, Change(category=c, speedup=speedup)) for c in categories]
    subjects += [("kernel", k, Change(kernel=f"^{re.escape(k)}$", speedup=speedup)) for k in kernels]
    subjects += [("fusion", f, Change(fusion=f)) for f in fusions]
    for kind, subject, change in subjects:
        chains = fusion_chains(con, run_id, subject, step) if kind == "fusion" else {}
        durations, merged = _plan(graph, change, chains)
        if not any(r == rank and graph.ranks[r].nodes[k].step == step for r, k in durations):
            continue
        unsure = _unsure(graph, change, durations)
        [row] = [x for x in _replay_steps(graph, durations, merged, step, unsure) if x["rank"] == rank]
        out.append(
            {
                "kind": kind,
                "subject": subject,
                "speedup": None if kind == "fusion" else speedup,
                **{k: row[k] for k in STEP_FIGURES},
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


def ranks_held(con, run_id: str) -> tuple[int, int | None]:
    """(rank files in the run, the trace's world size or None): what a withheld prediction's reason says."""
    row = con.execute("SELECT n_ranks, world_size FROM runs WHERE run_id = ?", [run_id]).fetchone()
    return (row[0] or 1, row[1]) if row else (1, None)


def report_step(con, run_id: str) -> int:
    """The step the run report shows (report_steps, pick 'all')."""
    row = con.execute("SELECT step FROM report_steps WHERE run_id = ? AND pick = 'all'", [run_id]).fetchone()
    if row is None:
        raise InvalidArgument(f"run {run_id} has no step the report shows (report_steps)")
    return row[0]

"""A capture window's launches aligned with the activities a graph launch replays (step 3 of
ingest.capture's attribution): by name, in order, by graph node, on a fork-join order of the streams, then
greedily."""

from __future__ import annotations

import bisect
import difflib
import itertools
from collections import defaultdict
from dataclasses import dataclass

from tracehouse.ingest.capture_windows import CaptureLaunch

# ---------------------------------------------------------------------------------------------------
# 2-3. graph launches of a rank -> capture window -> alignment


@dataclass
class Replayed:
    kernel_id: int
    stream: int | None
    kind: str
    name: str
    start_ns: int
    end_ns: int
    node: int | None = None  # the trace's `graph node id` (NULL in traces without it)


def node_order(acts: list[Replayed]) -> list[int] | None:
    """The replay's activities by graph node id (indices into acts), when every one has an id. A graph
    numbers its nodes as they are created, which is the order the capture launched them in, whatever the
    streams did at replay; None when some activity has no id (older Kineto, CUDA < 12)."""
    if not acts or any(a.node is None for a in acts):
        return None
    return sorted(range(len(acts)), key=lambda i: (acts[i].node, i))


def _key(kind: str, name: str | None):
    return (kind, name) if kind == "kernel" else (kind,)


def _lcs_pairs(a: list, b: list) -> list[tuple[int, int]]:
    sm = difflib.SequenceMatcher(a=a, b=b, autojunk=False)
    return [(blk.a + k, blk.b + k) for blk in sm.get_matching_blocks() for k in range(blk.size)]


def forkjoin_order(acts: list[Replayed]) -> list[int]:
    """A launch order for a multi-stream replay (indices into acts, which are sorted by start).

    The main stream (the one with the most activities) keeps its order; the other streams' work is cut
    into blocks (a new block starts where a main-stream activity ran entirely between two consecutive
    activities of the side stream), and each block is placed right after the main-stream activity that
    ended last before the block started (the fork point)."""
    by_stream: dict = defaultdict(list)
    for i, a in enumerate(acts):
        by_stream[a.stream].append(i)
    main = max(by_stream, key=lambda s: (len(by_stream[s]), -by_stream[s][0]))
    mains = by_stream[main]
    m_starts = [acts[i].start_ns for i in mains]
    m_ends = [acts[i].end_ns for i in mains]
    running_end = []  # max end so far: bisect needs a monotone list
    for e in m_ends:
        running_end.append(max(e, running_end[-1]) if running_end else e)
    after: dict[int, list[tuple[int, list[int]]]] = defaultdict(list)
    for stream, seq in by_stream.items():
        if stream == main:
            continue
        blocks: list[list[int]] = []
        for i in seq:
            if blocks:
                prev = acts[blocks[-1][-1]]
                j = bisect.bisect_left(m_starts, prev.end_ns)
                if j < len(mains) and m_ends[j] <= acts[i].start_ns:
                    blocks.append([i])
                    continue
                blocks[-1].append(i)
            else:
                blocks.append([i])
        for block in blocks:
            pred = bisect.bisect_right(running_end, acts[block[0]].start_ns) - 1
            after[pred].append((acts[block[0]].start_ns, block))
    order: list[int] = []
    for _, block in sorted(after.get(-1, [])):
        order.extend(block)
    for p, i in enumerate(mains):
        order.append(i)
        for _, block in sorted(after.get(p, [])):
            order.extend(block)
    return order


def align(launches: list[CaptureLaunch], acts: list[Replayed]) -> list[tuple[int, int, str]]:
    """(index into acts, index into launches, match kind) for every activity that could be aligned."""
    named = any(c.name for c in launches if c.kind == "kernel")
    streams = {a.stream for a in acts}
    by_node = node_order(acts)
    orders = [("node", by_node)] if by_node is not None else []
    orders.append(("start", list(range(len(acts)))))
    if len(streams) > 1:
        orders.append(("stream", forkjoin_order(acts)))
    ckeys = [_key(c.kind, c.name if named else None) for c in launches]
    best: tuple[int, str, list[int], list[tuple[int, int]]] | None = None
    for label, order in orders:
        rkeys = [_key(acts[j].kind, acts[j].name if named else None) for j in order]
        if named:
            pairs = [(order[rb], ca) for ca, rb in _lcs_pairs(ckeys, rkeys)]
            match = {"start": "name"}.get(label, label)
        else:
            if len(order) != len(launches) or rkeys != ckeys:
                continue
            pairs = [(order[k], k) for k in range(len(order))]
            match = {"start": "order"}.get(label, label)
            if len(streams) > 1 and label == "start":
                continue  # by start, concurrent streams interleave unlike the launches: not an order
        score = len(pairs)
        if best is None or score > best[0]:
            best = (score, match, order, pairs)
        if score == len(acts) and (named or label != "start"):
            break
    if best is None:
        order, pairs, match = (
            (forkjoin_order(acts) if len(streams) > 1 else list(range(len(acts)))),
            [],
            "greedy",
        )
    else:
        _, match, order, pairs = best
    out = [(r, c, match) for r, c in pairs]
    if len(out) < len(acts):
        out.extend(_greedy(launches, acts, order, pairs, named))
    return out


def _greedy(launches, acts, order, pairs, named) -> list[tuple[int, int, str]]:
    """Between aligned pairs, walk the leftovers in order; skip capture launches that do not fit."""
    pos = {r: k for k, r in enumerate(order)}
    anchors = sorted((pos[r], c) for r, c in pairs)
    bounds = [(-1, -1)] + anchors + [(len(order), len(launches))]
    out = []
    for (r0, c0), (r1, c1) in itertools.pairwise(bounds):
        ci = c0 + 1
        for rp in range(r0 + 1, r1):
            a = acts[order[rp]]
            k = ci
            while k < c1:
                c = launches[k]
                if c.kind == a.kind and (not named or c.kind != "kernel" or not c.name or c.name == a.name):
                    break
                k += 1
            if k < c1:
                out.append((order[rp], k, "greedy"))
                ci = k + 1
    return out

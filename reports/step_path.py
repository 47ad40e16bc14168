"""The step section's tables of the step as the path and the layers show it: per stream its role (critical or
parallel) and kernel families, each stream's layers with their time on the critical path, the components on
the path and hidden beside it, and the GPU's utilization in the step's setup, layers and tail. Each table is
one view of sql/ (component_path, stream_path, stream_families, layer_path, step_parts), read for the one
step the report shows; this module only orders and groups the rows."""

from __future__ import annotations

from tracehouse.reports.charts import fmt_ns
from tracehouse.reports.run_model import (
    ComponentPath,
    FamilyRow,
    LayerStream,
    LayerTime,
    PathComm,
    StepPart,
    StreamFamilies,
)
from tracehouse.reports.takeaways import missing_ranks

FAMILIES_SHOWN = 8  # per stream, the largest first; the rest are counted


def _rows(con, sql: str, params: list) -> list[dict]:
    cursor = con.execute(sql, params)
    columns = [d[0] for d in cursor.description]
    return [dict(zip(columns, row)) for row in cursor.fetchall()]


def path_components(con, key: list) -> list[ComponentPath]:
    return [
        ComponentPath(**r)
        for r in _rows(
            con,
            """
        SELECT component, gpu_time_ns, share_of_wall, path_ns, path_share, hidden_ns, hidden_stream,
               hidden_stream_ns
        FROM component_path WHERE run_id = ? AND rank = ? AND step = ?
        ORDER BY gpu_time_ns DESC, component""",
            key,
        )
    ]


def stream_families(con, key: list, names: dict) -> list[StreamFamilies]:
    """One entry per stream of the step, the critical stream first, then by GPU time."""
    families: dict = {}
    for r in _rows(
        con,
        """
        SELECT stream, family, category, calls, time_ns, share_of_wall, share_of_stream, rank_in_stream
        FROM stream_families WHERE run_id = ? AND rank = ? AND step = ?
        ORDER BY stream, rank_in_stream""",
        key,
    ):
        families.setdefault(r.pop("stream"), []).append(r)
    streams = _rows(
        con,
        """
        SELECT stream, role, activities, gpu_ns, path_ns, hidden_ns FROM stream_path
        WHERE run_id = ? AND rank = ? AND step = ?
        ORDER BY CASE role WHEN 'critical' THEN 0 ELSE 1 END, gpu_ns DESC, stream""",
        key,
    )
    out = []
    for s in streams:
        rows = families.get(s["stream"], [])
        shown = [
            FamilyRow(**{k: v for k, v in r.items() if k != "rank_in_stream"})
            for r in rows
            if r["rank_in_stream"] <= FAMILIES_SHOWN
        ]
        out.append(StreamFamilies(name=names.get(s["stream"]), families=shown, families_total=len(rows), **s))
    return out


def layer_streams(con, key: list, names: dict, roles: dict) -> list[LayerStream]:
    """The main stream and the streams that repeat their layer as often (layer_path.with_main: one layer of
    the model each), the main stream first, with every layer of its repeating block. A side stream whose
    "layer" is one recurring copy or collective is left out, and so is every stream when the main stream has
    no layer pattern."""
    by_stream: dict = {}
    for r in _rows(
        con,
        """
        SELECT stream, is_main_stream, layer, span_ns, gpu_ns, path_ns, path_share FROM layer_path
        WHERE run_id = ? AND rank = ? AND step = ? AND with_main
        ORDER BY is_main_stream DESC, stream, layer""",
        key,
    ):
        stream = r.pop("stream")
        r.pop("is_main_stream")
        by_stream.setdefault(stream, []).append(LayerTime(**r))
    return [LayerStream(s, names.get(s), roles.get(s), layers) for s, layers in by_stream.items()]


def step_parts(con, key: list) -> list[StepPart]:
    return [
        StepPart(**r)
        for r in _rows(
            con,
            """
        SELECT part, start_ns, dur_ns, busy_ns, comm_ns, utilization FROM step_parts
        WHERE run_id = ? AND rank = ? AND step = ? ORDER BY part_order""",
            key,
        )
    ]


def path_comm(con, key: list) -> PathComm | None:
    """The step's communication on the path, split (path_comm_split); None when the path has none."""
    rows = _rows(
        con,
        """
        SELECT waited_for_rank AS rank, wait_ns IS NULL AS unknown, sum(dur_ns) AS time_ns,
               sum(wait_ns) AS wait_ns, coalesce(sum(transfer_ns), 0) AS transfer_ns,
               coalesce(sum(dur_ns - wait_ns) FILTER (WHERE transfer_ns IS NULL), 0) AS open_ns
        FROM path_comm_split WHERE run_id = ? AND rank = ? AND step = ?
        GROUP BY waited_for_rank, wait_ns IS NULL
        ORDER BY wait_ns DESC NULLS LAST, rank""",
        key,
    )
    if not rows:
        return None
    known = [r for r in rows if not r["unknown"]]
    return PathComm(
        time_ns=int(sum(r["time_ns"] for r in rows)),
        wait_ns=int(sum(r["wait_ns"] for r in known)),
        transfer_ns=int(sum(r["transfer_ns"] for r in known)),
        open_ns=int(sum(r["open_ns"] for r in known)),
        unknown_ns=int(sum(r["time_ns"] for r in rows if r["unknown"])),
        waited_for=[
            {"rank": r["rank"], "wait_ns": int(r["wait_ns"])} for r in known if r["rank"] is not None
        ],
    )


def describe_path_comm(r) -> None:
    """The step section's sentence: "communication on the path 3.1 ms: 2.4 ms waiting for rank 3, 0.7 ms
    transfer", and what cannot be split with the peers missing from the run: the whole of an instance no
    other rank of the run ran, the part after the last arrival in the run of one whose group has ranks
    not in the run (its wait for the ranks in the run is at least its wait)."""
    s = r.step
    pc = s.path_comm if s is not None else None
    if pc is None:
        return
    parts = []
    present, missing = missing_ranks(r, s.rank)
    tell = f" (ingest ranks {', '.join(missing)} with it to tell)" if missing else ""
    if pc.time_ns > pc.unknown_ns + pc.open_ns or pc.wait_ns:
        ranks = [f"rank {w['rank']}" for w in pc.waited_for]
        if not pc.wait_ns:
            among = " in the run" if pc.open_ns else ""
            waiting = f"no waiting for peers{among} (this rank arrived last{among})"
        elif len(ranks) > 1:
            shares = ", ".join(f"{x} {fmt_ns(w['wait_ns'])}" for x, w in zip(ranks, pc.waited_for))
            waiting = f"{fmt_ns(pc.wait_ns)} waiting for peers ({shares})"
        else:
            waiting = f"{fmt_ns(pc.wait_ns)} waiting for {ranks[0] if ranks else 'peers'}"
        if pc.open_ns and pc.wait_ns:
            waiting = f"at least {waiting}"
        parts.append(f"{waiting}, {fmt_ns(pc.transfer_ns)} transfer" if pc.transfer_ns else waiting)
    if pc.open_ns:
        parts.append(
            f"{fmt_ns(pc.open_ns)} after the last arrival in the run, with {present} of {r.world_size} ranks "
            f"in it: it may be waiting for a rank not in the run, not transfer{tell}"
        )
    if pc.unknown_ns:
        alone = (
            f"with {present} of {r.world_size} ranks in the run"
            if missing
            else "with no peer rank in the run"
        )
        parts.append(f"{fmt_ns(pc.unknown_ns)} {alone}: it may be waiting for a peer, not transfer{tell}")
    pc.text = f"Communication on the path {fmt_ns(pc.time_ns)}: {'; '.join(parts)}."


def fill(con, key: list, section) -> None:
    """Give the step section (reports.run_model.StepSection) these tables."""
    names = {st.stream: st.name for st in section.streams}
    section.path_components = path_components(con, key)
    section.stream_families = stream_families(con, key, names)
    roles = {s.stream: s.role for s in section.stream_families}
    section.layer_streams = layer_streams(con, key, names, roles)
    section.parts = step_parts(con, key)
    section.path_comm = path_comm(con, key)

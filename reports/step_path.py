"""The step section's tables of the step as the path and the layers show it: per stream its role (critical or
parallel) and kernel families, each stream's layers with their time on the critical path, the components on
the path and hidden beside it, and the GPU's utilization in the step's setup, layers and tail. Each table is
one view of sql/ (component_path, stream_path, stream_families, layer_path, step_parts), read for the one
step the report shows; this module only orders and groups the rows."""

from __future__ import annotations

from tracehouse.reports.run_model import (
    ComponentPath,
    FamilyRow,
    LayerStream,
    LayerTime,
    StepPart,
    StreamFamilies,
)

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


def fill(con, key: list, section) -> None:
    """Give the step section (reports.run_model.StepSection) these tables."""
    names = {st.stream: st.name for st in section.streams}
    section.path_components = path_components(con, key)
    section.stream_families = stream_families(con, key, names)
    roles = {s.stream: s.role for s in section.stream_families}
    section.layer_streams = layer_streams(con, key, names, roles)
    section.parts = step_parts(con, key)

"""Per-run metrics for a trend: the `run_metrics` rows of many runs as one Arrow table.

The `run_metrics` view (sql/runs/run_metrics.sql) defines every metric; computing it walks a run's whole
analysis (timeline, critical path, ...), seconds per run. It is kept per run (`materialized: per_run`,
written by warehouse.derived.derive after ingest), so a trend over a thousand derived runs reads a thousand
small files; a run not derived yet is computed by this read, as any reader computes it, and not kept.
"""

from __future__ import annotations

import pyarrow as pa
from tracehouse.warehouse.catalog import connect
from tracehouse.warehouse.store import Warehouse

COLUMNS = ["run_id", "rank", "phase", "metric", "value", "better", "spread"]


def run_metric_rows(warehouse: Warehouse, run_ids: list[str]) -> pa.Table | None:
    """All run_metrics rows of these runs (every rank and the rank-NULL aggregate); None when no runs."""
    if not run_ids:
        return None
    con = connect(warehouse, runs=run_ids)
    try:
        return con.sql(
            f"SELECT {', '.join(COLUMNS)} FROM run_metrics ORDER BY run_id, rank, phase, metric"
        ).to_arrow_table()
    finally:
        con.close()

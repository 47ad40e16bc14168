"""Stored per-run metrics: `run_metrics` rows computed once per run and kept beside the tables.

The `run_metrics` view (sql/run_metrics.sql) defines every metric; computing it walks a run's whole
analysis (timeline, critical path, ...), seconds per run. A trend over a thousand runs cannot redo
that each time, so each run's rows are written once, the first time a trend needs them, to
<warehouse>/cache/run_metrics-<fingerprint>/<run_id>.parquet. The fingerprint covers run_metrics' SQL and
that of every view it reads, and the rule files (catalog.views_fingerprint), so changing a metric's
definition recomputes every run, never mixing the two; editing a view it does not read recomputes nothing.
"""

from __future__ import annotations

import os

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from warehouse.catalog import connect, views_fingerprint
from warehouse.store import Warehouse

COLUMNS = ["run_id", "rank", "phase", "metric", "value", "better", "spread"]


def metrics_dir(warehouse: Warehouse):
    return warehouse.root / "cache" / f"run_metrics-{views_fingerprint(['run_metrics'])}"


def run_metric_rows(warehouse: Warehouse, run_ids: list[str]) -> pa.Table | None:
    """All run_metrics rows of these runs (every rank and the rank-NULL aggregate); None when no runs."""
    if not run_ids:
        return None
    folder = metrics_dir(warehouse)
    missing = [r for r in run_ids if not (folder / f"{r}.parquet").is_file()]
    if missing:
        _compute(warehouse, missing, folder)
    # one multi-file read (threaded): a loop of read_table costs ~1 ms a file, seconds for a long history
    return pq.read_table([str(folder / f"{r}.parquet") for r in run_ids])


def _compute(warehouse: Warehouse, run_ids: list[str], folder) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    con = connect(warehouse, runs=run_ids)
    table = con.sql(
        f"SELECT {', '.join(COLUMNS)} FROM run_metrics ORDER BY run_id, rank, phase, metric"
    ).to_arrow_table()
    ids = table.column("run_id")
    for run_id in run_ids:
        part = table.filter(pc.equal(ids, run_id))
        partial = folder / f".{run_id}.{os.getpid()}.tmp"
        pq.write_table(part, partial)
        os.replace(partial, folder / f"{run_id}.parquet")  # a reader sees no file or the whole file

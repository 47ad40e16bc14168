"""Changing a stored run's labels: `tracehouse label RUN K=V ...`.

A run's files never change (its id is their content hash), so ingesting them again with new labels
stores nothing; this is the way to correct or add labels afterwards. Only the run's `runs` row is
rewritten, whole, under the warehouse's publish lock, by an atomic rename: a reader sees the old row
or the new one, never a half-written file. What was derived from the run (kept rows, report steps, diff
facts, metrics) is removed after (warehouse.derived.forget_derived): labels give batch sizes and tokens,
`hardware` the device peaks.

The keys with a column of their own (model, commit, commit_time, series, framework, hardware) update
that column too, as a label given at ingest does. `phase` is refused: it decides at ingest which steps
are which, so a new phase needs a new ingest.
"""

from __future__ import annotations

import os

import pyarrow as pa
import pyarrow.parquet as pq
from tracehouse.warehouse.derived import forget_derived
from tracehouse.warehouse.store import Warehouse

from tracehouse.errors import TracehouseError

COLUMN_KEYS = ("model", "commit", "commit_time", "series", "framework", "hardware")


def set_labels(warehouse: Warehouse, run_id: str, changes: dict[str, str | None]) -> dict[str, str]:
    """Apply changes (value None: remove the label) to the run's labels; returns the new labels."""
    if "phase" in changes:
        raise TracehouseError(
            "the phase label cannot be changed after ingest (it decides the steps' phases)",
            hint="ingest the traces into a new warehouse with --label phase=...",
        )
    path = warehouse.partition("runs", run_id) / "run.parquet"
    with warehouse.lock():
        table = pq.read_table(path)
        row = table.to_pylist()[0]
        labels = dict(row["labels"] or [])
        for key, value in changes.items():
            if value is None:
                labels.pop(key, None)
            else:
                labels[key] = value
        for key in COLUMN_KEYS:
            if key in changes:
                if changes[key] is not None:
                    row[key] = changes[key]
                elif key not in ("framework", "hardware"):  # detected from the trace: keep what was found
                    row[key] = None
        row["labels"] = sorted(labels.items())
        new = pa.Table.from_pylist([row], schema=table.schema)
        partial = path.with_name(f".run.{os.getpid()}.tmp")
        pq.write_table(new, partial, compression="zstd")
        os.replace(partial, path)
    forget_derived(warehouse, run_id)  # its views read the labels and `hardware`: derived anew
    return labels

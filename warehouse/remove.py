"""Removing stored runs (`tracehouse rm RUN...`): the run's rows in every table, its runs row, what was
derived from it (every fingerprint's kept rows) and its derive lock and log.

Atomic per run: under the publish lock, with signals held (tracehouse.interrupts), the run's folders are
renamed into a staging folder, the runs row first, then deleted there. Readers see only runs with a runs
row, so from the first rename on the run is gone, and before it the run is whole; a process killed
midway leaves partitions without a runs row, which the next publish or removal deletes
(Warehouse.collect_garbage, with staging folders of dead processes), and kept rows of a run no longer
published, which the next derive or removal deletes (derived.remove_unpublished).
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass

import pyarrow.parquet as pq
from tracehouse.warehouse.derived import remove_unpublished, take_out_derived
from tracehouse.warehouse.store import Warehouse

from tracehouse.interrupts import held


@dataclass
class Removed:
    """What went with one run."""

    run_id: str
    n_ranks: int  # the runs row's n_ranks
    rows: int  # rows of its tables, its runs row included
    files: int  # Parquet files of its tables
    derived: int  # kept views' row folders (warehouse.derived), of any fingerprint


def remove_runs(warehouse: Warehouse, run_ids: list[str]) -> list[Removed]:
    """Remove these published runs, each whole; a run not there is skipped (another process removed it)."""
    out = []
    with held(), warehouse.lock():
        warehouse.collect_garbage()  # what a removal or publish killed midway left
        remove_unpublished(warehouse)
        for run_id in dict.fromkeys(run_ids):
            if not warehouse.has_run(run_id):
                continue
            n_ranks = pq.read_table(warehouse.partition("runs", run_id) / "run.parquet").column("n_ranks")
            trash = warehouse.new_staging()
            try:
                tables = warehouse.take_out(run_id, trash / "tables")
                derived = take_out_derived(warehouse, run_id, trash / "derived")
                files = [f for folder in tables for f in folder.glob("*.parquet")]
                rows = sum(pq.read_metadata(f).num_rows for f in files)
                out.append(Removed(run_id, n_ranks[0].as_py() or 0, rows, len(files), len(derived)))
            finally:
                shutil.rmtree(trash, ignore_errors=True)
    return out

"""tracehouse's own ingest as bench/run.py times it: end to end (optionally with the derive), and stage by
stage (each stage function called directly)."""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path

from tracehouse.ingest.load import ingest_paths
from tracehouse.ingest.naming import parse_trace_name
from tracehouse.ingest.rank import staged, work_connection, write_tables
from tracehouse.warehouse.store import Warehouse

# --------------------------------------------------------------------------------------------------
# our ingest, end to end and by stage


def ingest_end_to_end(path: Path, tmp: Path, analyse: bool = False) -> None:
    """File -> published Parquet tables; analyse: also the run's derive (warehouse.derived), as
    `tracehouse ingest --wait`."""
    wh = Path(tempfile.mkdtemp(prefix="wh-", dir=tmp))
    try:
        outcomes = ingest_paths(Warehouse(wh), [path], analyse=analyse)
        bad = [p for o in outcomes for p in o.problems]
        if bad or not outcomes or not outcomes[0].stored:
            raise RuntimeError(f"ingest of {path} failed: {bad or outcomes}")
    finally:
        shutil.rmtree(wh, ignore_errors=True)


class TimedConnection:
    """Wraps a DuckDB connection so that each statement that a stage function runs is timed."""

    def __init__(self, con):
        self.con = con
        self.log: list[tuple[str, float]] = []

    def execute(self, sql, *args):
        t0 = time.perf_counter()
        result = self.con.execute(sql, *args)
        self.log.append((sql, time.perf_counter() - t0))
        return result


def ingest_by_stage(
    path: Path, tmp: Path, connect=work_connection, before_transforms=None
) -> dict[str, float]:
    """The stages of ingest.rank.ingest_rank (ingest.rank.staged, then write_tables), timed one by one;
    seconds per stage (and per SQL file, per Parquet table).

    `connect` and `before_transforms` let the tuning benchmark try a setting without editing ingest."""
    work = Path(tempfile.mkdtemp(prefix="stages-", dir=tmp))
    times: dict[str, float] = {}
    marks = [time.perf_counter()]

    def on_stage(name, con):
        marks.append(time.perf_counter())
        if name == "decode" and before_transforms is not None:
            before_transforms(con)
            marks[-1] = time.perf_counter()  # the setting is not part of a stage

    def on_file(sql_file, seconds):
        times[f"  sql/{sql_file.name}"] = seconds

    try:
        with staged(
            path,
            work / "stage",
            parse_trace_name(path.name).phase,
            None,
            connect=connect,
            on_stage=on_stage,
            on_file=on_file,
        ) as file:
            timed = TimedConnection(file.con)
            write_tables(timed, work / "out", 0)
            marks.append(time.perf_counter())
            for sql, seconds in timed.log:
                if sql.startswith("COPY"):
                    table = sql.split(" TO ", 1)[1].split("/")[-2]
                    times[f"  parquet/{table}"] = seconds
            file.con.execute("SELECT kind, key, value FROM rank_summary").fetchall()
        marks.append(time.perf_counter())
        t0, t1, t2, t3, t4, t5 = marks
        times.update(
            {
                "1 inflate + copy (source.read_trace)": t1 - t0,
                "2 DuckDB decode + typing (decode.load_raw_events)": t2 - t1,
                "3 transforms (sql/NN_*.sql)": t3 - t2,
                "4 Parquet write (rank.write_tables)": t4 - t3,
                "5 summary + close/checkpoint": t5 - t4,
            }
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return times

"""Stored analyses: the views a run report reads, computed once per run and kept beside the tables.

A report of a large run asks for seconds of whole-run work (categories and launch sites of every GPU
activity, the overlap sweep, fusion chains, the step breakdown) and for the critical path and the
per-stream, layer and gap views of one step. Like a warehouse refreshing its materialized views at load,
`tracehouse ingest` computes them once per run (`store_analyses`), with the very views of sql/, and the
report reads the stored rows (`use_stored`): a report is then a few small reads, whatever the run's size.

    <warehouse>/cache/analyses-<fingerprint>/<run_id>/
        <view>.parquet        RUN_VIEWS: every row of the run
        step-<rank>-<step>/<view>.parquet   STEP_VIEWS: the rows of that step, for the steps in manifest.json
        manifest.json         each stored view's column types, and the (rank, step) keys stored: the step
                              the report picks for the whole run and for each phase (STEP_PICKS)

The fingerprint covers the SQL of the stored views and of every view they read, the rule files, and what
is stored, so a changed definition is computed anew (by the next report, which stores it), never mixed
with old rows. A step that is not stored (a changed rule for picking it) is computed from the views as
before: slower, same rows. A folder appears whole or not at all (written aside, then renamed).

Why in warehouse/ and not reports/: these are the catalogue's own views materialized at load (as a
warehouse refreshes its materialized views); ingest asks for them after publishing a run and every report
reads them, so both stand on this module and neither reaches into the other. The rule that picks the step
a report shows (representative_step, STEP_PICKS) is here for the same reason: ingest stores that step.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
from pathlib import Path

import duckdb

from warehouse.catalog import connect, materialize, views_fingerprint
from warehouse.quoting import sql_string
from warehouse.store import Warehouse, process_alive

STORE_VERSION = 1
# the columns of _kernel_facts that the report's views and queries read (17 of its 39): the others would
# only be copied
KERNEL_FACT_COLUMNS = [
    "run_id",
    "rank",
    "kernel_id",
    "device",
    "stream",
    "step",
    "kind",
    "name",
    "start_ns",
    "end_ns",
    "dur_ns",
    "launch_call",
    "collective_name",
    "process_group",
    "category",
    "site",
    "phase_key",
]
# Whole-run views, computed in this order (a view after the views it reads); RUN_VIEWS are stored and read
# by the report, the others only feed them.
COMPUTE_ORDER = [
    "kernel_category",
    "_kernel_facts",
    "kernel_summary",
    "category_summary",
    "kernel_overlap",
    "overlap_opportunity",
    "fusion_match",
    "step_breakdown",
    "rank_skew_summary",
]
RUN_VIEWS = [
    "kernel_summary",
    "category_summary",
    "overlap_opportunity",
    "fusion_match",
    "step_breakdown",
    "rank_skew_summary",
]
# Step views: the rows of one (run_id, rank, step), in this order (critical_path first: the others read it).
# _kernel_facts is only read per step by the report (its components and timeline), so only the stored
# steps' rows are kept (17 columns): the whole run's would nearly double the run's size on disk.
STEP_VIEWS = [
    "critical_path",
    "critical_path_summary",
    "stream_summary",
    "layer_pattern_summary",
    "layer_pattern",
    "idle_gaps",
    "_kernel_facts",
]
STORED_STEPS = "tracehouse_stored_steps"  # temp table of a report connection: the steps it can read stored


def analyses_dir(warehouse: Warehouse) -> Path:
    spec = repr(
        (STORE_VERSION, views_fingerprint(RUN_VIEWS + STEP_VIEWS), RUN_VIEWS, STEP_VIEWS, KERNEL_FACT_COLUMNS)
    )
    return warehouse.root / "cache" / f"analyses-{hashlib.sha256(spec.encode()).hexdigest()[:16]}"


def run_folder(warehouse: Warehouse, run_id: str) -> Path:
    return analyses_dir(warehouse) / run_id


def is_stored(warehouse: Warehouse, run_id: str) -> bool:
    return (run_folder(warehouse, run_id) / "manifest.json").is_file()


def store_analyses(warehouse: Warehouse, run_id: str, memory_limit: str | None = None) -> Path:
    """Compute the report's views for one run and store them (nothing if they are already stored).

    memory_limit: DuckDB's (ingest passes its own; None: DuckDB's default, most of the machine's memory)."""
    final = run_folder(warehouse, run_id)
    if is_stored(warehouse, run_id):
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    _remove_abandoned(final.parent)
    partial = final.parent / f".{run_id}.{os.getpid()}.tmp"
    shutil.rmtree(partial, ignore_errors=True)
    work = partial / "work"
    (work / "spill").mkdir(parents=True)
    # Not locked down (it writes its files; no user SQL runs on it); DuckDB spills to disk beyond the memory
    # limit where it can. Each whole-run view is computed once and written to Parquet as its rows
    # stream, and the views after it read that file (a temp view over it): nothing is held in memory
    # between views, whatever the run's size.
    settings = {"temp_directory": str(work / "spill"), "preserve_insertion_order": "false"}
    con = connect(
        warehouse,
        runs=[run_id],
        lockdown=False,
        settings=settings | ({"memory_limit": memory_limit} if memory_limit else {}),
    )
    manifest: dict = {"run_id": run_id, "steps": [], "types": {}, "step_types": {}}
    try:
        for view in COMPUTE_ORDER:
            target = (partial if view in RUN_VIEWS else work) / f"{view}.parquet"
            types = _copy(con, view, KERNEL_FACT_COLUMNS if view == "_kernel_facts" else None, target)
            con.execute(f"CREATE OR REPLACE TEMP VIEW {view} AS " + _typed_read([target], types))
            if view in RUN_VIEWS:
                manifest["types"][view] = types
        for phase in STEP_PICKS:
            step = representative_step(con, run_id, phase)
            if step is not None and [step["rank"], step["step"]] not in manifest["steps"]:
                manifest["steps"].append([step["rank"], step["step"]])
        for rank, step in manifest["steps"]:
            key = [run_id, rank, step]
            scoped = scope_step_views(con, key)
            folder = partial / _step_folder(rank, step)
            folder.mkdir()
            try:
                for view in STEP_VIEWS:
                    manifest["step_types"][view] = types = _copy(
                        con,
                        view,
                        None,
                        folder / f"{view}.parquet",
                        f"run_id = {sql_string(run_id)} AND rank = {int(rank)} AND step = {int(step)}",
                    )
                    # the step views after it read its rows (unless it is computed already: a whole-run view, or
                    # the step's critical_path)
                    if view not in COMPUTE_ORDER and f"TABLE temp.{view}" not in scoped:
                        con.execute(
                            f"CREATE TEMP VIEW {view} AS " + _typed_read([folder / f"{view}.parquet"], types)
                        )
                        scoped.append(f"VIEW temp.{view}")
            finally:
                unscope(con, scoped)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    finally:
        con.close()
    shutil.rmtree(work, ignore_errors=True)
    (partial / "manifest.json").write_text(json.dumps(manifest))
    try:
        os.rename(partial, final)  # a reader sees no folder or the whole folder
    except OSError:  # another process stored it first: same rows
        shutil.rmtree(partial, ignore_errors=True)
    return final


def _remove_abandoned(folder: Path) -> None:
    """Remove the partial folders (.<run>.<pid>.tmp) of stores whose process is gone (killed mid-way)."""
    for partial in folder.glob(".*.*.tmp"):
        pid = partial.name.split(".")[-2]
        if pid.isdigit() and not process_alive(int(pid)):
            shutil.rmtree(partial, ignore_errors=True)


def _step_folder(rank: int, step: int) -> str:
    return f"step-{int(rank)}-{int(step)}"


def _copy(con, view: str, columns: list[str] | None, path: Path, where: str | None = None) -> list[list[str]]:
    """Write a view's rows to a Parquet file; its columns' DuckDB types. HUGEINT (Parquet has none;
    DuckDB would write a lossy DOUBLE) is written as DECIMAL(38, 0) and cast back on reading."""
    sql = f"SELECT {', '.join(columns) if columns else '*'} FROM {view}" + (
        f" WHERE {where}" if where else ""
    )
    described = con.execute(f"DESCRIBE {sql}").fetchall()
    types = [[row[0], row[1]] for row in described]
    exact = ", ".join(
        f'CAST("{name}" AS DECIMAL(38, 0)) AS "{name}"' if kind == "HUGEINT" else f'"{name}"'
        for name, kind in types
    )
    con.execute(
        f"COPY (SELECT {exact} FROM ({sql})) TO {sql_string(path)} (FORMAT parquet, COMPRESSION zstd)"
    )
    return types


def use_stored(con: duckdb.DuckDBPyConnection, warehouse: Warehouse, run_ids: list[str]) -> None:
    """On a report connection: read RUN_VIEWS from the stored analyses of these runs (stored first where
    missing), as temp views that shadow the catalogue's; record which steps `use_stored_step` can read.
    Where they cannot be stored (a warehouse this user may only read), they are computed on `con` for
    this report alone."""
    try:
        folders = [
            run_folder(warehouse, r) if is_stored(warehouse, r) else _store_now(warehouse, r) for r in run_ids
        ]
    except (OSError, duckdb.IOException, duckdb.PermissionException) as e:
        print(
            f"note: the analyses of run(s) {', '.join(run_ids)} could not be stored ({e}); computing them for "
            "this report only (slower)",
            file=sys.stderr,
        )
        # every column of _kernel_facts: the serving views (_kernel_work) read more than the stored steps keep
        materialize(con, COMPUTE_ORDER)
        return
    manifests = [json.loads((f / "manifest.json").read_text()) for f in folders]
    for view in RUN_VIEWS:
        files = [f / f"{view}.parquet" for f in folders if (f / f"{view}.parquet").is_file()]
        if len(files) == len(folders):
            con.execute(
                f"CREATE OR REPLACE TEMP VIEW {view} AS " + _typed_read(files, manifests[0]["types"][view])
            )
    con.execute(
        f"CREATE OR REPLACE TEMP TABLE {STORED_STEPS} (run_id VARCHAR, rank BIGINT, step BIGINT, folder VARCHAR)"
    )
    for folder, manifest in zip(folders, manifests):
        for rank, step in manifest["steps"]:
            con.execute(
                f"INSERT INTO {STORED_STEPS} VALUES (?, ?, ?, ?)",
                [manifest["run_id"], rank, step, str(folder)],
            )


def _store_now(warehouse: Warehouse, run_id: str) -> Path:
    if sys.stderr.isatty():  # progress on a terminal only, as the CLI's
        print(f"  analysing run {run_id} once (stored for its later reports)", file=sys.stderr)
    return store_analyses(warehouse, run_id)


def use_stored_step(con: duckdb.DuckDBPyConnection, key: list) -> list[str]:
    """Shadow STEP_VIEWS with the stored rows of this (run_id, rank, step), if that step is stored; the
    temp views created (to drop after the step section), or [] when it is not stored."""
    # a guard on a table that can really be absent: a connection opened without stored=True
    # (engine.open) has no list of stored steps, and computes the step's views instead
    if not con.execute(
        "SELECT count(*) FROM duckdb_tables() WHERE table_name = ? AND temporary", [STORED_STEPS]
    ).fetchall()[0][0]:
        return []
    found = con.execute(
        f"SELECT folder FROM {STORED_STEPS} WHERE run_id = ? AND rank = ? AND step = ?", key
    ).fetchall()
    if not found:
        return []
    run_folder_ = Path(found[0][0])
    folder = run_folder_ / _step_folder(key[1], key[2])
    manifest = json.loads((run_folder_ / "manifest.json").read_text())
    views = []
    for view, types in manifest["step_types"].items():
        con.execute(
            f"CREATE OR REPLACE TEMP VIEW {view} AS " + _typed_read([folder / f"{view}.parquet"], types)
        )
        views.append(view)
    return views


# The steps a report can show: the whole run's pick and each --phase's (stored at ingest, store_analyses)
STEP_PICKS = [None, "decode", "prefill", "mixed", "unknown"]


def representative_step(con, run_id: str, phase: str | None) -> dict | None:
    """The step with the median wall time among the steps with GPU work (of the phase, if given;
    decode before other phases), on the lowest rank."""
    phase_clause, params = ("AND phase = ?", [phase]) if phase else ("", [])
    # step_breakdown has one row per step_spans row: its lowest rank is step_spans' own. Asked as a
    # constant, the rank reaches the scans below step_breakdown (only that rank's timeline is swept).
    (rank,) = con.execute("SELECT min(rank) FROM step_spans WHERE run_id = ?", [run_id]).fetchone()
    if rank is None:
        return None
    rows = _rows(
        con,
        f"""
        SELECT * FROM step_breakdown
        WHERE run_id = ? AND rank = ? AND activities > 0 {phase_clause}
        ORDER BY CASE phase WHEN 'decode' THEN 0 WHEN 'prefill' THEN 1 ELSE 2 END, wall_ns, step""",
        [run_id, rank] + params,
    )
    if not rows:
        return None
    same_phase = [r for r in rows if r["phase"] == rows[0]["phase"]]
    chosen = same_phase[len(same_phase) // 2]
    chosen["steps_in_run"] = len(same_phase)
    return chosen


# Views the step section reads several times for its one step (critical_path: through critical_stream,
# critical_path_summary and itself): computed once for that step. Finding a path is a recursive walk
# over the dependency graph of the whole rank, which no filter on the step reaches; every row of these
# views relates rows of one (run, rank) only, so they are computed over that rank's base rows.
COMPUTED_STEP_VIEWS = ["critical_path"]
RANK_TABLES = ["kernels", "cpu_ops", "step_spans"]  # the base tables COMPUTED_STEP_VIEWS read


def scope_step_views(con, key: list) -> list[str]:
    """While the step section of this (run_id, rank, step) is built: its stored views if the step is
    stored (use_stored_step), else COMPUTED_STEP_VIEWS materialized for it. What it created, for unscope.
    On a DuckDB connection (warehouse.engine.step_scope asks where the engine needs it)."""
    stored = use_stored_step(con, key)
    if stored:
        return [f"VIEW temp.{name}" for name in stored]
    views = COMPUTED_STEP_VIEWS
    run_id, rank, _ = key
    (attached,) = con.execute(
        "SELECT count(*) FROM duckdb_databases() WHERE database_name = 'catalog'"
    ).fetchone()
    schema = "catalog.main" if attached else "main"
    rows = f"run_id = {sql_string(run_id)} AND rank = {int(rank)}"
    try:
        for table in RANK_TABLES:  # temp views come first in the search path, as materialize's tables do
            con.execute(f"CREATE OR REPLACE TEMP VIEW {table} AS SELECT * FROM {schema}.{table} WHERE {rows}")
        materialize(con, views, where="run_id = ? AND rank = ? AND step = ?", params=key)
    finally:
        for table in RANK_TABLES:
            con.execute(f"DROP VIEW IF EXISTS temp.{table}")
    return [f"TABLE temp.{name}" for name in views]


def unscope(con, scoped: list[str]) -> None:
    """Drop what scope_step_views created ("VIEW temp.x" / "TABLE temp.x")."""
    for what in scoped:
        con.execute(f"DROP {what}")


def _rows(con, sql: str, params: list | dict) -> list[dict]:
    cursor = con.execute(sql, params)
    columns = [d[0] for d in cursor.description]
    return [dict(zip(columns, row)) for row in cursor.fetchall()]


def _typed_read(files: list[Path], types: list[list[str]]) -> str:
    """SELECT of stored files with each column cast back to the view's own type (Parquet has no HUGEINT)."""
    columns = ", ".join(f'CAST("{name}" AS {kind}) AS "{name}"' for name, kind in types)
    return f"SELECT {columns} FROM read_parquet([{', '.join(sql_string(f) for f in files)}])"

"""Derived rows: what `tracehouse derive RUN` computes once per run, after ingest, for every reader.

Two kinds, both computed by `derive_run` (with the very views of sql/):

- **kept rows** of the views whose SQL header says `-- materialized: per_run` (RUN_VIEWS: gpu_timeline,
  kernel_summary and the report's whole-run views), one Parquet file per (view, run) under
  `<warehouse>/derived/<fingerprint>/<view>/run_id=<id>/` (warehouse.catalog, "kept rows"). Every
  connection's view of that name reads them for the runs that have them and computes the others
  (catalog.read_kept): `sql`, reports, diff, trend alike.
- **stored steps**: the critical path and the per-stream, layer and gap views of the step a report shows
  (STEP_VIEWS, for each of STEP_PICKS), which only a report reads (`use_stored_step`):

    <warehouse>/cache/analyses-<fingerprint>/<run_id>/
        step-<rank>-<step>/<view>.parquet   STEP_VIEWS: the rows of that step, for the steps in manifest.json
        manifest.json         each stored view's column types, and the (rank, step) keys stored

Ingest publishes a run and returns; `tracehouse derive` runs after it, in the background unless asked to
wait (ingest/load.py), and the first report of a run not derived yet derives it (`use_stored`). A reader
never waits for it: what is not kept yet is computed by the reader. Nothing half-written is read (each
file and folder is written aside, then renamed), and two processes deriving one run take turns (a lock
file per run): the second finds the rows kept and stops.

The fingerprints cover the SQL of the views and of every view they read, and the rule files, so a changed
definition is derived anew, never mixed with old rows. A step that is not stored (a changed rule for
picking it) is computed from the views as before: slower, same rows.

Why in warehouse/ and not reports/: these are the catalogue's own views materialized after load; ingest
asks for them after publishing a run and every reader reads them, so both stand on this module and neither
reaches into the other. The rule that picks the step a report shows (representative_step, STEP_PICKS) is
here for the same reason: derive stores that step.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import duckdb

from warehouse.catalog import (
    KEPT,
    connect,
    derived_root,
    kept_dirs,
    kept_file,
    materialize,
    per_run_views,
    read_kept,
    typed_read,
    views_fingerprint,
)
from warehouse.quoting import sql_string
from warehouse.store import Warehouse, process_alive

STORE_VERSION = 2
# the columns of _kernel_facts that the report's views and queries read (19 of its 40): the others would
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
    "module_path",  # layer_pattern_summary's layer modules
    "phase_key",
    "cpu_op_id",  # _kernel_work's join to the launching op
]
# The views kept per run: those whose header says `-- materialized: per_run` (warehouse.catalog).
RUN_VIEWS = per_run_views()
# Whole-run views, computed in this order (a view after the views it reads): RUN_VIEWS are kept, the
# others (helpers read by several of them) are computed once into a work folder and then dropped.
COMPUTE_ORDER = [
    "kernel_category",
    "gpu_timeline",
    "_kernel_facts",
    "steps",
    "step_queueing",
    "request_cost",
    "kernel_summary",
    "category_summary",
    "kernel_overlap",
    "overlap_opportunity",
    "fusion_match",
    "step_breakdown",
    "idle_gaps",
    "rank_skew",
    "rank_skew_summary",
    # the serving section's chain (reports/serving.py): each helper computed once, not once per view
    "_op_work",
    "_kernel_work",
    "step_roofline",
    "kernel_roofline",
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
        (
            STORE_VERSION,
            views_fingerprint(STEP_VIEWS + ["step_breakdown", "step_warmup"]),
            STEP_VIEWS,
            STEP_PICKS,
        )
    )
    spec += repr(KERNEL_FACT_COLUMNS)
    return warehouse.root / "cache" / f"analyses-{hashlib.sha256(spec.encode()).hexdigest()[:16]}"


def run_folder(warehouse: Warehouse, run_id: str) -> Path:
    return analyses_dir(warehouse) / run_id


def is_stored(warehouse: Warehouse, run_id: str) -> bool:
    """Whether the run is derived: its stored steps and the kept rows of every RUN_VIEWS."""
    return (run_folder(warehouse, run_id) / "manifest.json").is_file() and not missing_kept(warehouse, run_id)


def missing_kept(warehouse: Warehouse, run_id: str) -> list[str]:
    """The RUN_VIEWS whose rows of this run are not kept (yet)."""
    return [
        v for v, folder in kept_dirs(warehouse, RUN_VIEWS).items() if not kept_file(folder, run_id).is_file()
    ]


@contextmanager
def _run_lock(warehouse: Warehouse, run_id: str):
    """One process derives a run at a time; the next one waits, then finds the rows there."""
    folder = derived_root(warehouse) / ".locks"
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / f"{run_id}.lock", "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def forget_derived(warehouse: Warehouse, run_id: str) -> int:
    """Remove every row derived from this run, of any fingerprint: its kept view rows (derived/), its report
    steps, diff facts and run metrics (cache/). For a change to what the run's views read besides its
    files: `tracehouse label` (labels state batch sizes and tokens, `hardware` picks the device peaks) and
    a new requests file. Under the run's derive lock, so a derive running with the old row finishes first
    and its rows go too; the next derive (or reader) computes them anew. Returns how many were removed."""
    root, cache = derived_root(warehouse), warehouse.root / "cache"
    removed = 0
    with _run_lock(warehouse, run_id):
        found = [*root.glob(f"*/*/run_id={run_id}"), *cache.glob(f"*/{run_id}"), *cache.glob(f"*/{run_id}.*")]
        for path in found:
            if path.is_dir():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)
            removed += 1
    return removed


def store_analyses(warehouse: Warehouse, run_id: str, memory_limit: str | None = None) -> Path:
    """Derive one run (`derive_run`); its stored steps' folder."""
    derive_run(warehouse, run_id, memory_limit)
    return run_folder(warehouse, run_id)


def derive_run(warehouse: Warehouse, run_id: str, memory_limit: str | None = None, progress=None) -> None:
    """Keep the RUN_VIEWS rows of one run and store its report steps; nothing that is there already.

    memory_limit: DuckDB's (ingest's own; None: DuckDB's default, most of the machine's memory).
    progress: called with a line as each view is done (its name and seconds), or None."""
    if is_stored(warehouse, run_id):
        return
    with _run_lock(warehouse, run_id):
        if is_stored(warehouse, run_id):  # derived by the process we waited for
            return
        _derive_locked(warehouse, run_id, memory_limit, progress)


def _derive_locked(warehouse: Warehouse, run_id: str, memory_limit: str | None, progress=None) -> None:
    final = run_folder(warehouse, run_id)
    final.parent.mkdir(parents=True, exist_ok=True)
    _remove_abandoned(final.parent)
    partial = final.parent / f".{run_id}.{os.getpid()}.tmp"
    shutil.rmtree(partial, ignore_errors=True)
    work = partial / "work"
    (work / "spill").mkdir(parents=True)
    missing = missing_kept(warehouse, run_id)
    folders = kept_dirs(warehouse, RUN_VIEWS)
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
    manifest: dict = {"run_id": run_id, "steps": [], "step_types": {}}
    try:
        for i, view in enumerate(COMPUTE_ORDER, 1):
            started = time.perf_counter()
            if view in RUN_VIEWS:
                if view not in missing:
                    continue
                _keep(con, view, folders[view], run_id)
                read_kept(con, warehouse, [view])  # the views after it read the kept rows
            else:
                target = work / f"{view}.parquet"
                types = _copy(con, view, KERNEL_FACT_COLUMNS if view == "_kernel_facts" else None, target)
                con.execute(f"CREATE OR REPLACE TEMP VIEW {view} AS " + _typed_read([target], types))
            if progress:
                progress(f"{view} ({i}/{len(COMPUTE_ORDER)}): {time.perf_counter() - started:.1f} s")
        if not (final / "manifest.json").is_file():
            started = time.perf_counter()
            _store_steps(con, run_id, partial, manifest)
            if progress:
                progress(f"the report's steps: {time.perf_counter() - started:.1f} s")
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    finally:
        con.close()
    shutil.rmtree(work, ignore_errors=True)
    if (final / "manifest.json").is_file():
        shutil.rmtree(partial, ignore_errors=True)
        return
    (partial / "manifest.json").write_text(json.dumps(manifest))
    try:
        os.rename(partial, final)  # a reader sees no folder or the whole folder
    except OSError:  # another process stored it first: same rows
        shutil.rmtree(partial, ignore_errors=True)


def _keep(con, view: str, folder: Path, run_id: str) -> None:
    """Write the view's rows of this run as its kept file (aside, then renamed) and its types.json once."""
    target = kept_file(folder, run_id)
    target.parent.mkdir(parents=True, exist_ok=True)
    for abandoned in target.parent.glob(f".{KEPT_PARTIAL}.*.tmp"):  # of a derive killed mid-way
        pid = abandoned.name.split(".")[-2]
        if pid.isdigit() and not process_alive(int(pid)):
            abandoned.unlink(missing_ok=True)
    partial = target.parent / f".{KEPT_PARTIAL}.{os.getpid()}.tmp"
    described = con.execute(f"DESCRIBE SELECT * FROM {view}").fetchall()
    types = [[row[0], row[1]] for row in described]
    columns = ", ".join(
        f'CAST("{name}" AS DECIMAL(38, 0)) AS "{name}"' if kind == "HUGEINT" else f'"{name}"'
        for name, kind in types
        if name != "run_id"  # the folder's (hive partition)
    )
    con.execute(
        f"COPY (SELECT {columns} FROM {view} WHERE run_id = {sql_string(run_id)}) TO {sql_string(partial)} "
        "(FORMAT parquet, COMPRESSION zstd)"
    )
    if not (folder / "types.json").is_file():
        aside = folder / f".types.{os.getpid()}.tmp"
        aside.write_text(json.dumps(types))
        os.replace(aside, folder / "types.json")
    os.replace(partial, target)  # a reader lists the run once its whole file is there


KEPT_PARTIAL = "rows"


def _store_steps(con, run_id: str, partial: Path, manifest: dict) -> None:
    """The report's steps of the run (STEP_PICKS) and their STEP_VIEWS rows, into the partial folder."""
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
    """On a report connection: derive these runs where they are not yet (derive_run), so that RUN_VIEWS
    read their kept rows (catalog.read_kept, again now); record which steps `use_stored_step` can read.
    Where they cannot be derived (a warehouse this user may only read), they are computed on `con` for
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
        for view in RUN_VIEWS:  # computed below as temp tables, from the catalogue's views
            con.execute(f"DROP VIEW IF EXISTS temp.{view}")
        con.execute(f"SET VARIABLE {KEPT} = false")  # and kept so: a change of focus reads no kept rows
        # every column of _kernel_facts: the serving views (_kernel_work) read more than the stored steps keep
        materialize(con, COMPUTE_ORDER)
        return
    if con.execute(f"SELECT getvariable('{KEPT}')").fetchone()[0]:  # not with a --rules file (connect)
        read_kept(con, warehouse)  # the runs just derived
    manifests = [json.loads((f / "manifest.json").read_text()) for f in folders]
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
    decode before other phases), on the lowest rank, leaving out the rank's warm-up step
    (sql/step_warmup.sql: its first iteration, markedly longer than the others of its phase and holding
    one-time setup), which always has other steps of its phase to show instead."""
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
          AND step NOT IN (SELECT step FROM step_warmup WHERE run_id = ? AND rank = ? AND is_warmup)
        ORDER BY CASE phase WHEN 'decode' THEN 0 WHEN 'prefill' THEN 1 ELSE 2 END, wall_ns, step""",
        [run_id, rank] + params + [run_id, rank],
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
    return typed_read(files, types)

"""The step a run report shows, and its views while its section is built.

The pick is a rule of sql/ (report_steps: the median step of the run's lowest rank, warm-up left out, per
--phase), kept per run with the other `materialized: per_run` views (warehouse.derived), so a report of a
derived run reads it; `representative_step` gives the report that step's step_breakdown row. The step's
critical path is kept with the run (critical_path is a per-run view); for a run that is not derived,
`scope_step_views` computes it once for that step, over the rank's rows only. The step's what-if inputs
and timeline lanes are kept too, for the report steps only (report_whatif_edges, ...: the views they
restrict are over the whole run); `reads_report_rows` says where a reader reads them.

In warehouse/ and not reports/: the engines' step scope (warehouse.engine.step_scope) stands on it.
"""

from __future__ import annotations

import duckdb
from tracehouse.warehouse.catalog import is_kept, materialize
from tracehouse.warehouse.quoting import sql_string


def representative_step(con, run_id: str, phase: str | None) -> dict | None:
    """The step_breakdown row of the step report_steps picks for this run and --phase (None: the whole
    run's pick), with steps_in_run (how many steps the median was taken over); None when there is none."""
    found = con.execute(
        "SELECT rank, step, steps_in_run FROM report_steps WHERE run_id = ? AND pick = ?",
        [run_id, phase or "all"],
    ).fetchall()
    if not found:
        return None
    [(rank, step, steps_in_run)] = found
    [chosen] = _rows(
        con, "SELECT * FROM step_breakdown WHERE run_id = ? AND rank = ? AND step = ?", [run_id, rank, step]
    )
    chosen["steps_in_run"] = steps_in_run
    return chosen


# Views the step section reads several times for its one step (critical_path: through critical_stream,
# critical_path_summary and itself): computed once for that step. Finding a path is a recursive walk
# over the dependency graph of the whole rank, which no filter on the step reaches; every row of these
# views relates rows of one (run, rank) only, so they are computed over that rank's base rows.
COMPUTED_STEP_VIEWS = ["critical_path"]
RANK_TABLES = ["kernels", "cpu_ops", "step_spans"]  # the base tables COMPUTED_STEP_VIEWS read


def scope_step_views(con, key: list) -> list[str]:
    """While the step section of this (run_id, rank, step) is built: COMPUTED_STEP_VIEWS materialized for
    it (from the kept rows where the run is derived, else computed over the rank's rows). What it created,
    for unscope.
    On a DuckDB connection (warehouse.engine.step_scope asks where the engine needs it)."""
    run_id, rank, _ = key
    computed = {
        r[0] for r in con.execute("SELECT table_name FROM duckdb_tables() WHERE temporary").fetchall()
    }
    # kept, or computed for the whole report already (engine.focused's compute_once): read, filtered, as is
    views = [v for v in COMPUTED_STEP_VIEWS if not is_kept(con, v, run_id) and v not in computed]
    if not views:
        return []
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


def reads_report_rows(con, view: str, run_id: str, step: int | None) -> bool:
    """Whether a reader of this run's `step` reads the report view `view` (report_whatif_edges,
    report_whatif_collectives, report_fusion_chains, report_lanes: rows of the steps report_steps picks)
    rather than the view they restrict (_whatif_edges, ..., _kernel_facts): where `con` holds that view's
    rows of the run, kept (a derived run) or computed once for the report (engine.focused's compute_once),
    and report_steps picks `step`. The rows read are the same either way; the report view's are few and
    kept, the others are computed over the whole run. A DuckDB connection only (Spark computes each view
    once per connection: it reads the views they restrict)."""
    if step is None or not isinstance(con, duckdb.DuckDBPyConnection):
        return False
    if not is_kept(con, view, run_id):
        (computed,) = con.execute(
            "SELECT count(*) FROM duckdb_tables() WHERE temporary AND table_name = ?", [view]
        ).fetchone()
        if not computed:
            return False
    (picked,) = con.execute(
        "SELECT count(*) FROM report_steps WHERE run_id = ? AND step = ?", [run_id, int(step)]
    ).fetchone()
    return picked > 0


def unscope(con, scoped: list[str]) -> None:
    """Drop what scope_step_views created ("VIEW temp.x" / "TABLE temp.x")."""
    for what in scoped:
        con.execute(f"DROP {what}")


def _rows(con, sql: str, params: list | dict) -> list[dict]:
    cursor = con.execute(sql, params)
    columns = [d[0] for d in cursor.description]
    return [dict(zip(columns, row)) for row in cursor.fetchall()]

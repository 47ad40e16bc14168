"""The DuckDB catalogue: base views over the Parquet tables, then the views of sql/, in order.

Only this module knows file paths. Every connection is built the same way from the files on disk,
so building it twice gives the same catalogue. Views in sql/ are ordered by the tables they read
(parsed with sqlglot), never by file name.
"""

from __future__ import annotations

import graphlib
from pathlib import Path

import duckdb
import sqlglot
from sqlglot import exp

from warehouse.store import ALL_TABLES, Warehouse

SQL_DIR = Path(__file__).resolve().parent.parent / "sql"
SCHEMA_PARTITION = "run_id=_schema"  # zero-row files that give each table its columns


def _quote(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def view_files() -> dict[str, Path]:
    """sql/<view>.sql for every view; the file stem is the view name."""
    return {p.stem: p for p in sorted(SQL_DIR.glob("*.sql"))}


def view_dependencies(sql: str) -> set[str]:
    """Tables and views a SQL file reads, minus its own CTE names."""
    deps: set[str] = set()
    for statement in sqlglot.parse(sql, read="duckdb"):
        if statement is None:
            continue
        ctes = {cte.alias_or_name for cte in statement.find_all(exp.CTE)}
        created = set()
        if isinstance(statement, exp.Create):
            created.add(statement.this.name if isinstance(statement.this, exp.Table) else statement.this.this.name)
        for table in statement.find_all(exp.Table):
            if table.name and table.name not in ctes and table.name not in created:
                deps.add(table.name)
    return deps


def ordered_views() -> list[tuple[str, Path]]:
    files = view_files()
    graph = {name: view_dependencies(path.read_text()) & set(files) for name, path in files.items()}
    return [(name, files[name]) for name in graphlib.TopologicalSorter(graph).static_order()]


def ensure_schema_files(warehouse: Warehouse) -> None:
    """Write the zero-row files once, by ingesting an empty trace through the real pipeline."""
    if _has_schema_files(warehouse):
        return
    import shutil

    from ingest.rank import ingest_rank  # the one place that knows the tables' columns
    from ingest.run import build_runs_row, write_runs_row

    warehouse.init()
    with warehouse.lock():  # two first ingests at once: one writes, the other finds the files
        if _has_schema_files(warehouse):
            return
        staging = warehouse.new_staging()
        try:
            empty = staging / "empty.json"
            empty.write_text('{"traceEvents": []}')
            result = ingest_rank(empty, 0, None, staging / "out", staging / "work")
            runs = build_runs_row("_schema", [result], [empty], {}, [], [], "").slice(0, 0)
            write_runs_row(runs, staging / "out")
            for table in ALL_TABLES:
                target = warehouse.table_dir(table) / SCHEMA_PARTITION
                if not target.exists():
                    (staging / "out" / table).rename(target)
        finally:
            shutil.rmtree(staging, ignore_errors=True)


def _has_schema_files(warehouse: Warehouse) -> bool:
    return all((warehouse.table_dir(t) / SCHEMA_PARTITION).is_dir() for t in ALL_TABLES)


def base_view_sql(warehouse: Warehouse, table: str) -> str:
    glob = str(warehouse.table_dir(table) / "*" / "*.parquet")
    source = (
        f"read_parquet({_quote(glob)}, hive_partitioning = true, union_by_name = true, "
        f"hive_types = {{'run_id': 'VARCHAR'}})"
    )
    if table == "runs":
        return f"CREATE OR REPLACE VIEW runs AS SELECT * FROM {source} WHERE run_id <> '_schema'"
    # A run is visible only once its runs row exists (the commit marker of store.publish).
    return (
        f"CREATE OR REPLACE VIEW {table} AS SELECT * FROM {source} "
        f"WHERE run_id IN (SELECT run_id FROM runs)"
    )


def register_rules(con: duckdb.DuckDBPyConnection, rules_file: str | None = None) -> None:
    try:
        from warehouse.rules import load_category_rules
    except ImportError:  # pragma: no cover - rules arrive with the category views
        return
    rules = load_category_rules(rules_file)  # noqa: F841 - read by name below
    con.execute("CREATE OR REPLACE TABLE category_rules AS SELECT * FROM rules")
    from warehouse.fusion import register_fusion_patterns  # the fusion catalogue (sql/fusion_match.sql)

    register_fusion_patterns(con)


def connect(warehouse: Warehouse, rules_file: str | None = None, lockdown: bool = True) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB with every table and view; with lockdown, it can read nothing else."""
    ensure_schema_files(warehouse)
    con = duckdb.connect()
    for table in ALL_TABLES:
        con.execute(base_view_sql(warehouse, table))
    register_rules(con, rules_file)
    for name, path in ordered_views():
        try:
            con.execute(path.read_text())
        except duckdb.Error as exc:
            raise RuntimeError(f"sql/{path.name}: {exc}") from exc
    if lockdown:
        con.execute(f"SET allowed_directories = [{_quote(str(warehouse.root) + '/')}]")
        con.execute("SET enable_external_access = false")
        con.execute("SET lock_configuration = true")
    return con

"""The DuckDB catalogue: base views over the Parquet tables, then the views of sql/, in order.

Only this module knows file paths. Every connection is built the same way from the files on disk,
so building it twice gives the same catalogue. Views in sql/ are ordered by the tables they read
(parsed with sqlglot), never by file name.
"""

from __future__ import annotations

import fcntl
import graphlib
import hashlib
import json
import os
import re
import shutil
from pathlib import Path

import duckdb
from tracehouse.warehouse import memory
from tracehouse.warehouse.docs import comment_statements
from tracehouse.warehouse.quoting import sql_string
from tracehouse.warehouse.store import ALL_TABLES, SCHEMA_PARTITION, Warehouse

# sqlglot (the views' order) and warehouse.schema (pyarrow: the zero-row files, the column docs) are
# imported where the catalogue is built, not by every reader: a reader opens the built catalogue file, and
# the two imports were 0.1 s of each `tracehouse sql` process.

SQL_DIR = Path(__file__).resolve().parent.parent / "sql"


def view_files() -> dict[str, Path]:
    """sql/<domain>/<view>.sql for every view, in any folder under sql/ (a view's folder is its subject:
    timeline/, steps/, ...; the name does not depend on it); the file stem is the view name."""
    files: dict[str, Path] = {}
    for path in sorted(SQL_DIR.rglob("*.sql")):
        if path.stem in files:
            raise RuntimeError(
                f"two views named {path.stem}: {sql_path(files[path.stem])} and {sql_path(path)}"
            )
        files[path.stem] = path
    return files


def sql_path(path: Path) -> str:
    """A view file's path as the project names it (sql/timeline/gpu_timeline.sql), for messages."""
    return str(Path("sql") / path.relative_to(SQL_DIR))


def view_dependencies(sql: str) -> set[str]:
    """Tables and views a SQL file reads, minus its own CTE names."""
    import sqlglot
    from sqlglot import exp

    deps: set[str] = set()
    for statement in sqlglot.parse(sql, read="duckdb"):
        if statement is None:
            continue
        ctes = {cte.alias_or_name for cte in statement.find_all(exp.CTE)}
        created = set()
        if isinstance(statement, exp.Create):
            created.add(
                statement.this.name if isinstance(statement.this, exp.Table) else statement.this.this.name
            )
        for table in statement.find_all(exp.Table):
            if table.name and table.name not in ctes and table.name not in created:
                deps.add(table.name)
    return deps


def ordered_views() -> list[tuple[str, Path]]:
    files = view_files()
    # sorted: the same order in every process (a set's order follows the string hash seed)
    graph = {name: sorted(view_dependencies(files[name].read_text()) & set(files)) for name in sorted(files)}
    return [(name, files[name]) for name in graphlib.TopologicalSorter(graph).static_order()]


def ensure_schema_files(warehouse: Warehouse) -> None:
    """Write each table's zero-row file once (SCHEMA_PARTITION), from the declared schema (warehouse.schema):
    the base views get their columns from them before any run lands."""
    if _has_schema_files(warehouse):
        return
    warehouse.init()
    with warehouse.lock():  # two first ingests at once: one writes, the other finds the files
        if _has_schema_files(warehouse):
            return
        from tracehouse.warehouse.schema import write_schema_files

        staging = warehouse.new_staging()
        try:
            write_schema_files(staging / "out")
            for table in ALL_TABLES:
                target = warehouse.table_dir(table) / SCHEMA_PARTITION
                if not target.exists():
                    (staging / "out" / table).rename(target)
        finally:
            shutil.rmtree(staging, ignore_errors=True)


def table_column_docs(table: str) -> dict[str, str]:
    """Each column's line of a base view: the declared schema's, and run_id (the partition folder's) where
    the files do not carry it."""
    from tracehouse.warehouse.schema import column_docs

    docs = column_docs(table)
    if "run_id" not in docs:
        docs["run_id"] = "the run (runs.run_id): the partition folder the rank's file lies in"
    return docs


def _has_schema_files(warehouse: Warehouse) -> bool:
    return all((warehouse.table_dir(t) / SCHEMA_PARTITION).is_dir() for t in ALL_TABLES)


ROOT = "tracehouse_root"  # the variable that holds the warehouse folder of a connection


def base_view_sql(table: str) -> str:
    """The base view of one table. The warehouse folder is a variable of the connection (`ROOT`), bound
    as a constant when a query is planned, so one catalogue serves every warehouse."""
    folder = f"getvariable('{ROOT}') || '/tables/{table}/"
    # The runs' files first, the zero-row file (SCHEMA_PARTITION) last: DuckDB estimates a scan's rows from
    # its first file, and `run_id=_schema` sorts before the run ids that start with a letter (a-f), so for
    # those every table looked empty to the planner, which then built its hash joins on the whole table
    # (a 1 GB run's kernels: out of memory at 640MB in the derive's first view; runs whose id starts with
    # a digit were planned right). allow_empty: a warehouse without runs has only the zero-row files.
    glob = f"[{folder}run_id=[!_]*/*.parquet', {folder}{SCHEMA_PARTITION}/*.parquet']"
    # union_by_name would read every file's footer each time a view that reads the table is bound
    # (tens of ms per reference, seconds for the deeper views); files of one table share one schema
    # (SCHEMA_VERSION), so only `runs`, one small file per run, keeps it.
    union = "union_by_name = true, " if table == "runs" else ""
    source = (
        f"read_parquet({glob}, hive_partitioning = true, allow_empty = true, {union}"
        f"hive_types = {{'run_id': 'VARCHAR'}})"
    )
    # A connection can focus on some runs (SET VARIABLE tracehouse_runs, see `focus`): the filter is a
    # constant when the query is bound, so DuckDB prunes the other runs' partitions, and every per-run
    # view (window functions, sweeps) computes only the runs asked for.
    focused = f"(getvariable('{FOCUS}') IS NULL OR run_id IN (SELECT unnest(getvariable('{FOCUS}'))))"
    if table == "runs":
        return (
            f"CREATE OR REPLACE VIEW runs AS SELECT * FROM {source} WHERE run_id <> '_schema' AND {focused}"
        )
    # A run is visible only once its runs row exists (the commit marker of store.publish): its runs file's
    # name, listed (glob), not read (the runs view reads every run's file footer, union_by_name, at each
    # reference: 30 ms per reference in a warehouse of 74 runs, and every view reads several tables).
    published = (
        f"SELECT regexp_extract(listed.file, 'run_id=([^/]+)/', 1) AS published_run "
        f"FROM glob(getvariable('{ROOT}') || '/tables/runs/run_id=[!_]*/*.parquet') AS listed"
    )
    return f"CREATE OR REPLACE VIEW {table} AS SELECT * FROM {source} WHERE {focused} AND run_id IN ({published})"


def register_rules(
    con: duckdb.DuckDBPyConnection, rules_file: str | None = None, user_files: bool = True
) -> None:
    """The rule tables: kernel categories (rules_file's rules first), the fusion catalogue, launch-site
    rules and device peaks (with the user's TRACEHOUSE_SITE_RULES / TRACEHOUSE_DEVICE_PEAKS files unless
    user_files is off: the shared catalogue file holds the shipped rules only)."""
    # the fusion catalogue (sql/fusion/fusion_match.sql)
    from tracehouse.warehouse.fusion import register_fusion_patterns

    for name, rows in _rule_tables(rules_file, user_files).items():
        _create_from(con, f"CREATE OR REPLACE TABLE {name}", rows)
    register_fusion_patterns(con)


def _rule_tables(rules_file: str | None, user_files: bool) -> dict:
    # imported here, not by every reader (pyarrow: 0.1 s of a `tracehouse sql` process; USER_RULE_ENVS)
    from tracehouse.warehouse.peaks import load_device_peaks, user_peaks_file
    from tracehouse.warehouse.rules import load_category_rules, load_one_time_rules
    from tracehouse.warehouse.site_rules import load_site_rules, user_site_rules_file

    return {
        "category_rules": load_category_rules(rules_file),  # sql/kernels/kernel_category.sql
        "one_time_rules": load_one_time_rules(),  # sql/steps/one_time_work.sql
        # sql/kernels/kernel_launch_site.sql, sql/roofline/kernel_roofline.sql
        "launch_site_rules": load_site_rules(user_site_rules_file() if user_files else None),
        "device_peaks": load_device_peaks(user_peaks_file() if user_files else None),
    }


def _user_rules(con: duckdb.DuckDBPyConnection, rules_file: str | None) -> None:
    """A connection whose rules are not the shipped ones (a --rules file, TRACEHOUSE_SITE_RULES,
    TRACEHOUSE_DEVICE_PEAKS): its rule tables as temp tables, which come first in DuckDB's search path,
    also for the catalogue's views, so one catalogue file serves every rule file (binding the views is
    the costly part of building it)."""
    if not (rules_file or any(os.environ.get(name) for name in USER_RULE_ENVS)):
        return
    for name, rows in _rule_tables(rules_file, True).items():
        _create_from(con, f"CREATE OR REPLACE TEMP TABLE {name}", rows)


# the environment variables naming the user's rule files (warehouse.site_rules.USER_SITE_RULES_ENV,
# warehouse.peaks.USER_PEAKS_ENV), read here so that a reader with none set never imports those modules
# (pyarrow: 0.1 s of a `tracehouse sql` process); tests/test_readers.py holds them equal
USER_RULE_ENVS = ("TRACEHOUSE_SITE_RULES", "TRACEHOUSE_DEVICE_PEAKS")


def _create_from(con: duckdb.DuckDBPyConnection, create: str, rows) -> None:
    con.register("tracehouse_rule_rows", rows)
    try:
        con.execute(f"{create} AS SELECT * FROM tracehouse_rule_rows")
    finally:
        con.unregister("tracehouse_rule_rows")


CATALOG_VERSION = 4  # bump when the way the catalogue is built changes


def catalog_fingerprint() -> str:
    """What the catalogue file depends on: the SQL, the shipped rule tables and the versions (not the
    warehouse, not the user's rule files: those are a connection's temp tables, `_user_rules`)."""
    digest = hashlib.sha256()
    for part in (str(CATALOG_VERSION), duckdb.__version__):
        digest.update(part.encode() + b"\0")
    for path in sorted(SQL_DIR.rglob("*")):
        if path.is_file() and path.suffix in (".sql", ".csv", ".json"):
            digest.update(str(path.relative_to(SQL_DIR)).encode() + b"\0" + path.read_bytes())
    for name in ("catalog.py", "rules.py", "fusion.py", "site_rules.py", "peaks.py", "schema.py", "docs.py"):
        digest.update(Path(__file__).with_name(name).read_bytes())
    return digest.hexdigest()[:16]


def _site_rules_digest() -> bytes:
    """The user's launch-site rule file (TRACEHOUSE_SITE_RULES) and device peak file
    (TRACEHOUSE_DEVICE_PEAKS), by path and content: b'' when neither is set."""
    if not any(os.environ.get(name) for name in USER_RULE_ENVS):
        return b""  # without importing those modules (pyarrow: a tenth of a second of a reader)
    from tracehouse.warehouse.peaks import user_peaks_file
    from tracehouse.warehouse.site_rules import user_site_rules_file

    out = b""
    peaks = user_peaks_file()
    if peaks:
        try:
            out = b"peaks:" + peaks.encode() + b"\0" + Path(peaks).read_bytes()
        except OSError:
            out = b"peaks:" + peaks.encode()
    user = user_site_rules_file()
    if not user:
        return out
    try:
        return out + user.encode() + b"\0" + Path(user).read_bytes()
    except OSError:
        return out + user.encode()


def build_catalog(
    con: duckdb.DuckDBPyConnection,
    warehouse: Warehouse,
    rules_file: str | None = None,
    user_files: bool = True,
) -> None:
    """Create the base views, the rule tables and every view of sql/ on `con` (bound against
    `warehouse`, whose files give the tables their columns)."""
    con.execute("SET enable_progress_bar = false")
    con.execute(f"SET VARIABLE {ROOT} = ?", [str(warehouse.root)])
    for table in ALL_TABLES:
        con.execute(base_view_sql(table))
        for column, doc in table_column_docs(table).items():  # `tracehouse schema TABLE` shows them
            con.execute(f'COMMENT ON COLUMN {table}."{column}" IS {sql_string(doc)}')
    register_rules(con, rules_file, user_files)
    for name, path in ordered_views():
        sql = path.read_text()
        try:
            con.execute(sql)
        except duckdb.Error as exc:
            raise RuntimeError(f"{sql_path(path)}: {exc}") from exc
        columns = [row[0] for row in con.execute(f"DESCRIBE {name}").fetchall()]
        for statement in comment_statements(name, sql, columns):
            con.execute(statement)


def cache_dir() -> Path:
    base = (
        os.environ.get("TRACEHOUSE_CACHE") or os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    )
    return Path(base) / "tracehouse" if not os.environ.get("TRACEHOUSE_CACHE") else Path(base)


def catalog_file(warehouse: Warehouse, fingerprint: str | None = None) -> Path | None:
    """The catalogue as a DuckDB file with the shipped rules, built once per fingerprint and shared by
    every warehouse (creating the views binds each of them: seconds of work that the file spares every
    later command); None where no cache folder can be written."""
    folder = cache_dir()
    path = folder / f"catalog-{fingerprint or catalog_fingerprint()}.duckdb"
    if path.is_file():
        return path
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with open(folder / ".lock", "a+") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if path.is_file():
                return path
            partial = path.with_suffix(f".{os.getpid()}.tmp")
            partial.unlink(missing_ok=True)
            con = duckdb.connect(str(partial))
            try:
                build_catalog(con, warehouse, user_files=False)
            finally:
                con.close()
            os.replace(partial, path)  # readers see no file or the whole file
    except OSError:
        return None
    return path


def connect(
    warehouse: Warehouse,
    rules_file: str | None = None,
    lockdown: bool = True,
    runs: list[str] | None = None,
    settings: dict[str, str] | None = None,
    kept: bool = True,
) -> duckdb.DuckDBPyConnection:
    """A DuckDB connection with every table and view; with lockdown, it can read nothing else.

    runs: focus the connection on these runs only (see `focus`).
    settings: DuckDB settings made before the lockdown (default: the memory policy's, warehouse.memory:
    memory_limit and threads; DuckDB's own spill folder).
    kept: the per-run views read their kept rows where a run has them (read_kept, from the derived
    store's listing now); False: every view is computed from the tables, so a view this session replaces
    (a temp view of report_params, say) is followed by every view above it. Nothing is written: a reader
    never derives (warehouse.derived.derive does)."""
    ensure_schema_files(warehouse)
    fingerprint = catalog_fingerprint()  # once per connection: the catalogue file's and the derived store's
    path = catalog_file(warehouse, fingerprint)
    # A fresh in-memory database per connection, so that settings (the lockdown below) never leak
    # between connections of one process; the catalogue file is attached read-only and used.
    con = duckdb.connect(":memory:")
    con.execute("SET enable_progress_bar = false")
    if path is not None:
        con.execute(f"ATTACH {sql_string(path)} AS catalog (READ_ONLY)")
        con.execute("USE catalog")
        _user_rules(con, rules_file)
    else:
        build_catalog(con, warehouse, rules_file)
    con.execute(f"SET VARIABLE {ROOT} = ?", [str(warehouse.root)])
    con.execute("SET parquet_metadata_cache = true")
    con.execute(f"SET VARIABLE {STORE} = ?", [str(store_dir(warehouse, fingerprint))])
    focus(con, runs)
    if kept and not rules_file:  # a --rules file's categories are not those the rows were kept with
        read_kept(con, warehouse)  # after focus, and again by each focus() on this connection
    for name, value in (memory.settings() if settings is None else settings).items():
        con.execute(f"SET {name} = {sql_string(value)}")
    if lockdown:
        con.execute(f"SET allowed_directories = [{sql_string(str(warehouse.root) + '/')}]")
        con.execute("SET enable_external_access = false")
        con.execute("SET lock_configuration = true")
    return con


FOCUS = "tracehouse_runs"


def focus(con: duckdb.DuckDBPyConnection, runs: list[str] | None) -> None:
    """Restrict every table and view of `con` to these runs (None: all runs)."""
    if runs is None:
        con.execute(f"RESET VARIABLE {FOCUS}")
    else:
        con.execute(f"SET VARIABLE {FOCUS} = ?::VARCHAR[]", [list(runs)])
    root, kept = con.execute(f"SELECT getvariable('{ROOT}'), getvariable('{KEPT}')").fetchone()
    if kept and root:  # the per-run views: what is computed depends on the runs seen (read_kept)
        read_kept(con, Warehouse(root))


def materialize(
    con: duckdb.DuckDBPyConnection,
    views: list[str],
    columns: dict[str, list[str]] | None = None,
    where: str | None = None,
    params: list | None = None,
) -> None:
    """Compute these views once, as temporary tables that shadow them for the rest of the connection.

    A report asks a dozen questions of the same few runs; every view is otherwise recomputed (and its
    whole tree re-planned) by each query that reads it. Temp tables come first in DuckDB's search path,
    also when other views are bound, so everything above them reads the stored rows. Use on a focused
    connection (`focus`) only: the rows are those of the focused runs when this runs. The views are
    computed in the order given: list a view after the views it reads (ordering them here would parse
    every sql/ file, tenths of a second on each report).

    columns: for some views, keep only these columns (the ones the connection's queries read: a query
    that reads another one fails to bind rather than reading wrong rows).
    where (with params): keep only these rows of every view given; for a connection whose queries
    all read within them (e.g. one step of one rank), as the other rows are gone.
    """
    schema = "catalog.main" if _attached(con) else "main"
    kept = _temp_views(con)  # read_kept's: the kept rows, and the other runs computed
    for name in views:
        keep = ", ".join(columns[name]) if columns and name in columns else "*"
        rows = f" WHERE {where}" if where else ""
        if name in kept:  # computed once from that view (a table cannot replace a view of the same name)
            con.execute(
                f"CREATE OR REPLACE TEMP TABLE {name}__rows AS SELECT {keep} FROM temp.{name}{rows}",
                params or [],
            )
            con.execute(f"DROP VIEW temp.{name}")
            con.execute(f"ALTER TABLE temp.{name}__rows RENAME TO {name}")
            continue
        con.execute(
            f"CREATE OR REPLACE TEMP TABLE {name} AS SELECT {keep} FROM {schema}.{name}{rows}", params or []
        )


def _temp_views(con: duckdb.DuckDBPyConnection) -> set[str]:
    return {r[0] for r in con.execute("SELECT view_name FROM duckdb_views() WHERE temporary").fetchall()}


def _temp_tables(con: duckdb.DuckDBPyConnection) -> set[str]:
    return {r[0] for r in con.execute("SELECT table_name FROM duckdb_tables() WHERE temporary").fetchall()}


def _attached(con: duckdb.DuckDBPyConnection) -> bool:
    return bool(
        con.execute("SELECT count(*) FROM duckdb_databases() WHERE database_name = 'catalog'").fetchone()[0]
    )


def connect_base(warehouse: Warehouse) -> duckdb.DuckDBPyConnection:
    """An in-memory connection with only the base tables and the rule tables (no sql/ views): for tests
    and benchmarks that create just the views they study."""
    ensure_schema_files(warehouse)
    con = duckdb.connect(":memory:")
    con.execute("SET enable_progress_bar = false")
    memory.apply(con, memory.settings())
    con.execute(f"SET VARIABLE {ROOT} = ?", [str(warehouse.root)])
    for table in ALL_TABLES:
        con.execute(base_view_sql(table))
    register_rules(con)
    return con


# ---- kept rows: the derived store, as readers see it ------------------------------------------------------
#
# A view whose header says `-- materialized: per_run` has its rows kept per run, computed once by the one
# writer (warehouse.derived.derive: `tracehouse derive`), in one store:
#
#     <warehouse>/derived/<fingerprint>/<view>/types.json               the view's columns and DuckDB types
#     <warehouse>/derived/<fingerprint>/<view>/run_id=<id>/rows.parquet  every row of that run (no run_id
#                                                                         column: the folder's)
#
# One fingerprint for the whole store (store_fingerprint): the catalogue's (every SQL file, the shipped
# rules, the code that builds the catalogue and the versions), the user's rule files and STORE_VERSION, so
# a changed definition anywhere is derived anew, never mixed with old rows. A run's folder appears whole (it
# is written aside, then renamed), so the store's listing is the set of derived runs of each view. On every
# connection (`connect`), each view with kept rows of the runs it sees is a temp view (temp views come first
# in DuckDB's search path, also for the views that read it): the kept rows of those runs, UNION ALL the
# catalogue's own view computed for the other runs, decided from the listing when the connection opens or
# changes focus. The rows are the same either way (tests/test_derived.py).

MATERIALIZED_LINE = re.compile(r"^--\s*materialized:\s*(\w+)\b")
KEPT_FILE = "rows.parquet"
TYPES_FILE = "types.json"
STORE_VERSION = 3  # bump when the way rows are kept changes
STORE = "tracehouse_store"  # the variable that holds a connection's derived store folder
KEPT = "tracehouse_kept"  # set on a connection whose per-run views read kept rows (connect)
KEPT_VIEWS = "tracehouse_kept_views"  # what read_kept made on a connection: '<view>/<run>' read kept


def per_run_views() -> list[str]:
    """The views whose SQL header declares `-- materialized: per_run`, in the catalogue's file order."""
    out = []
    for name, path in view_files().items():
        for line in path.read_text().splitlines():
            if not line.startswith("--"):
                break
            found = MATERIALIZED_LINE.match(line)
            if found and found.group(1) == "per_run":
                out.append(name)
    return out


def derived_root(warehouse: Warehouse) -> Path:
    return warehouse.root / "derived"


def store_fingerprint(catalog: str | None = None) -> str:
    """The derived store's one key: the catalogue's fingerprint (catalog: given when already computed),
    the user's rule files (by path and content) and STORE_VERSION."""
    digest = hashlib.sha256(f"{STORE_VERSION}\0{catalog or catalog_fingerprint()}\0".encode())
    digest.update(_site_rules_digest())
    return digest.hexdigest()[:16]


def store_dir(warehouse: Warehouse, catalog: str | None = None) -> Path:
    """<warehouse>/derived/<store fingerprint>: the kept rows of every per-run view under this code."""
    return derived_root(warehouse) / store_fingerprint(catalog)


def kept_file(store: Path, view: str, run_id: str) -> Path:
    return store / view / f"run_id={run_id}" / KEPT_FILE


def listing(store: Path) -> dict[str, list[str]]:
    """{view: the runs whose rows of it are kept} in this store (folder names only: a run's folder is
    renamed into place whole; names starting with '.' are being written)."""
    out: dict[str, list[str]] = {}
    try:
        views = [e for e in os.scandir(store) if e.is_dir() and not e.name.startswith(".")]
    except OSError:
        return out
    for view in views:
        try:
            runs = sorted(
                e.name[len("run_id=") :] for e in os.scandir(view.path) if e.name.startswith("run_id=")
            )
        except OSError:
            continue
        if runs:
            out[view.name] = runs
    return out


def typed_read(files: list[Path], types: list[list[str]], hive: bool = False) -> str:
    """SELECT of kept Parquet files with each column cast back to the view's own type (Parquet has no
    HUGEINT: kept as DECIMAL(38, 0)). hive: run_id comes from the files' run_id=<id> folders."""
    columns = ", ".join(f'CAST("{name}" AS {kind}) AS "{name}"' for name, kind in types)
    options = ", hive_partitioning = true, hive_types = {'run_id': 'VARCHAR'}" if hive else ""
    return f"SELECT {columns} FROM read_parquet([{', '.join(sql_string(f) for f in files)}]{options})"


def published_runs(warehouse: Warehouse) -> list[str]:
    """The runs readers see (a runs row), not the schema's zero-row partition."""
    return [r for r in warehouse.run_ids() if f"run_id={r}" != SCHEMA_PARTITION]


def read_kept(con: duckdb.DuckDBPyConnection, warehouse: Warehouse) -> dict:
    """Make each per-run view of `con` read its kept rows for the runs that have them, and compute it for
    the others; where every run the connection sees (its focus) is kept, nothing is computed. A view with
    none of the seen runs kept is left to the catalogue. Decided from the store's listing now; called again
    when the focus changes (`focus`), as the computed part cannot be pruned by a filter on run_id.
    {view: the runs read kept}."""

    con.execute(f"SET VARIABLE {KEPT} = true")
    [(store, focused_runs, made)] = con.execute(
        f"SELECT getvariable('{STORE}'), getvariable('{FOCUS}'), getvariable('{KEPT_VIEWS}')"
    ).fetchall()
    kept = listing(Path(store)) if store else {}
    out: dict[str, list[str]] = {}
    computed = _temp_tables(con)  # a view `materialize` computed on this connection: its rows are there
    if kept:
        schema = "catalog.main" if _attached(con) else "memory.main"
        published = set(published_runs(warehouse))
        seen = published if focused_runs is None else published & set(focused_runs)
        for view, all_runs in kept.items():
            # only runs seen: a kept run outside the focus adds no row, and with none the view is computed
            runs = [r for r in all_runs if r in seen]
            if view in computed or not runs:
                continue
            try:
                types = json.loads((Path(store) / view / TYPES_FILE).read_text())
            except (OSError, ValueError):  # a view folder of another writer's first run, not there yet
                continue
            rows = typed_read([kept_file(Path(store), view, r) for r in runs], types, hive=True)
            focused = f"(getvariable('{FOCUS}') IS NULL OR run_id IN (SELECT unnest(getvariable('{FOCUS}'))))"
            sql = f"CREATE OR REPLACE TEMP VIEW {view} AS SELECT * FROM ({rows}) WHERE {focused}"
            if seen - set(runs):
                # the other runs, computed (also runs published after this was made, for a long-lived reader)
                listed = ", ".join(sql_string(r) for r in runs)
                sql += f" UNION ALL SELECT * FROM {schema}.{view} WHERE run_id NOT IN ({listed})"
            # else every run seen is kept: nothing computed; a run published later is read once a long-lived
            # connection calls refresh_kept (warehouse.session does, before each query)
            con.execute(sql)
            out[view] = runs
    for view in {m.split("/")[0] for m in made or []} - set(out) - computed:
        con.execute(f"DROP VIEW IF EXISTS temp.{view}")
    con.execute(
        f"SET VARIABLE {KEPT_VIEWS} = ?::VARCHAR[]", [sorted(f"{v}/{r}" for v in out for r in out[v])]
    )
    return out


def is_kept(con: duckdb.DuckDBPyConnection, view: str, run_id: str) -> bool:
    """Whether `con` reads this view's rows of this run kept (read_kept)."""
    [(made,)] = con.execute(f"SELECT getvariable('{KEPT_VIEWS}')").fetchall()
    return f"{view}/{run_id}" in (made or [])


def kept_signature(con: duckdb.DuckDBPyConnection) -> tuple:
    """What read_kept's views depend on: the published runs and the store's listing (a few folder listings)."""
    [(root, store)] = con.execute(f"SELECT getvariable('{ROOT}'), getvariable('{STORE}')").fetchall()
    return tuple(published_runs(Warehouse(root))), tuple(
        sorted(listing(Path(store)).items())
    ) if store else ()


def refresh_kept(con: duckdb.DuckDBPyConnection, seen: tuple | None) -> tuple:
    """For a long-lived connection: read_kept again when runs were published or rows kept since `seen`
    (a kept_signature); the signature now."""
    now = kept_signature(con)
    if now != seen:
        [(root, kept)] = con.execute(f"SELECT getvariable('{ROOT}'), getvariable('{KEPT}')").fetchall()
        if kept:
            read_kept(con, Warehouse(root))
    return now

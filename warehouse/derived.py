"""The one writer of the derived store: `derive` keeps the rows of every `materialized: per_run` view of a
run, once, for every reader (the store's layout and how readers read it: warehouse.catalog, "kept rows").

    from tracehouse.warehouse.derived import derive
    derive("./tracehouse-data")                 # every published run not derived yet
    derive("./tracehouse-data", ["3f2a9c..."])  # these runs

`tracehouse derive` calls it; the CLI starts it in the background after ingest, and a report runs it for
its runs before reading. Readers never call it: a run not derived (yet) is computed by its reader, with the
same rows.

What is kept per run is a view whose SQL header says so: the report's views (gpu_timeline, step_breakdown,
the step section's step_components, component_path, ..., data_quality), the step a report shows
(report_steps: the rule in SQL) and that step's critical path, its what-if inputs and timeline lanes
(report_whatif_edges, report_whatif_collectives, report_fusion_chains, report_lanes: the rows of the
report steps only, where the views they restrict are over the whole run), the diff's
facts (run_step_time, step_kernel_time, step_latency, critical_path_summary, request_cost), run_metrics.
Per run, each view is computed once on a connection focused on that run, in dependency order, and the views
after it read its kept rows (small runs with nothing kept are derived together, a batch: one connection
focused on all of them, each view's rows written per run, BATCH_BYTES); HELPERS (views several kept views
read, or one whose reader computing it would run out of memory) are computed once into a work folder for
the derive and dropped after.

Nothing half-written is ever read: a view's rows of a run are written into a folder beside the final one
(`.run_id=<id>.<pid>.tmp`) and renamed into place whole; the work folder is `.work-<id>.<pid>.tmp`. Each
derive removes what a killed derive left (its process gone) and the folders of other fingerprints (rows
of code or rules no longer in use). Two processes deriving one run take turns (a lock file per run): the
second finds the rows kept and stops.
"""

from __future__ import annotations

import fcntl
import functools
import json
import os
import re
import shutil
import time
from contextlib import ExitStack, contextmanager
from pathlib import Path

import duckdb
from tracehouse.warehouse import memory
from tracehouse.warehouse.catalog import (
    KEPT_FILE,
    KEPT_VIEWS,
    TYPES_FILE,
    cache_dir,
    catalog_fingerprint,
    connect,
    derived_root,
    kept_file,
    listing,
    materialize,
    ordered_views,
    per_run_views,
    published_runs,
    store_dir,
    typed_read,
    view_files,
)
from tracehouse.warehouse.quoting import sql_string
from tracehouse.warehouse.store import Warehouse, process_alive

from tracehouse.interrupts import check as check_interrupt
from tracehouse.interrupts import watching

# Views read by several kept views, computed once per derive (a work file, dropped after) rather than once
# by each view that reads them; with the columns their readers use, where that is fewer than all
# (_kernel_facts: 20 of its 40). _busy_islands: five kept views read it (idle_gaps, step_queueing, steps,
# step_breakdown, stream_summary), each computing its lanes' ordered passes over every activity again.
# _critical_path_pred: critical_path alone reads it, but computed inside critical_path's query the hash
# tables of dependency_edges stay held under the recursive walk (a 1 GB trace's critical_path ran out of
# 640MB; written first, it needs 22 s). _fusion_chains: fusion_match and overlap_opportunity read it (the
# latter ran out of 640MB in a 1 GB trace's derive computing it again), and report_fusion_chains.
# dependency_edges: _critical_path_pred and report_whatif_edges (through _whatif_edges) read it (the 100 MB
# run: computed by each, 5.6 + 3.3 s; once, 3.6 s, then 1.3 and 0.7 s).
HELPERS = {
    "kernel_category": None,
    "_busy_islands": None,
    "_kernel_facts": [
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
        "module_path",
        "phase_key",
        "cpu_op_id",
        "group_size",
    ],
    "kernel_overlap": None,
    "_op_work": None,
    "_kernel_work": None,
    "dependency_edges": None,
    "_critical_path_pred": None,
    "_fusion_chains": None,
}
SPECIAL = (".locks", ".logs")  # the folders of derived/ that are no store
# Small runs are derived together, each view computed once for all of them (its rows written per run): the
# fixed cost of planning and running a view's query (~60 ms) is most of a small run's derive (33 views:
# ~1.5 s a run alone; the demo's 24 runs, 4.5 MB of tables: 37 s one by one, 5.6 s together). A batch holds
# runs of at most this many bytes of Parquet tables together, so it needs no more memory than one run of
# that size (a 1 GB trace's run is 20 MB of tables: alone; its derive fits 640MB, bench/results.md).
BATCH_BYTES = 8 * 10**6
PLAIN_ID = re.compile(r"[0-9A-Za-z_-]+")  # a run id written as a Hive folder name as it is


def derive(
    warehouse: Warehouse | str | Path,
    run_ids: list[str] | None = None,
    memory_limit: str | None = None,
    progress=None,
) -> dict[str, str | None]:
    """Keep the per-run views' rows of these runs (default: every published run); nothing kept already.

    memory_limit: DuckDB's (None: the memory policy's, warehouse.memory; TRACEHOUSE_MEMORY_LIMIT).
    progress: called with a line as each view is done (its name and seconds; a batch's number of runs), or
    None.
    Returns {run: None when derived, else why not (one line)}: a run this process cannot derive (a
    warehouse it may only read, a run too large for the memory limit) is left to its readers to compute."""
    warehouse = warehouse if isinstance(warehouse, Warehouse) else Warehouse(warehouse)
    catalog = catalog_fingerprint()
    store = store_dir(warehouse, catalog)
    views = _compute_order(per_run_views())
    out: dict[str, str | None] = {}
    try:
        remove_abandoned(warehouse, store)
    except OSError:
        pass  # a store this user may only read: each run below says so
    with watching():  # an interrupt stops the derive: Interrupted, what was kept stays, nothing half-kept
        runs = published_runs(warehouse) if run_ids is None else list(run_ids)
        for batch in batches(warehouse, store, runs):
            if len(batch) > 1:
                try:
                    _derive_batch(warehouse, store, views, batch, memory_limit, progress)
                except (duckdb.Error, OSError, MemoryError):
                    check_interrupt()
                    # one run the batch could not derive must not cost the others: each alone below, where
                    # the one that fails says why
            for run_id in batch:
                try:
                    _derive_run(warehouse, store, views, run_id, memory_limit, progress)
                    out[run_id] = None
                except (duckdb.Error, OSError, MemoryError) as exc:
                    check_interrupt()  # DuckDB's "INTERRUPT Error": no failed derive, an interrupted one
                    out[run_id] = _why(exc, run_id)
    return out


def batches(warehouse: Warehouse, store: Path, run_ids: list[str]) -> list[list[str]]:
    """The runs in the order given, in batches that one connection derives together: runs with nothing
    kept yet, each of at most BATCH_BYTES of tables, together at most BATCH_BYTES; every other run (a
    larger one, one partly derived, an id that is no plain folder name) a batch of its own."""
    per_run = set(per_run_views())
    kept = listing(store)
    out: list[list[str]] = []
    batch: list[str] = []
    size = 0
    for run_id in run_ids:
        fresh = not any(run_id in kept.get(v, ()) for v in per_run)
        bytes_ = _table_bytes(warehouse, run_id) if fresh and PLAIN_ID.fullmatch(run_id) else None
        if bytes_ is None or bytes_ > BATCH_BYTES:
            out.append([run_id])
            continue
        if batch and size + bytes_ > BATCH_BYTES:
            out.append(batch)
            batch, size = [], 0
        batch.append(run_id)
        size += bytes_
    return out + ([batch] if batch else [])


def _table_bytes(warehouse: Warehouse, run_id: str) -> int:
    """The bytes of the run's Parquet files, every table."""
    total = 0
    for table in os.scandir(warehouse.tables_dir):
        for root, _, files in os.walk(Path(table.path) / f"run_id={run_id}"):
            total += sum(os.path.getsize(os.path.join(root, f)) for f in files)
    return total


def _why(exc: BaseException, run_id: str) -> str:
    """One line: why the run was not derived (out of memory: the setting to raise)."""
    if memory.is_out_of_memory(exc):
        return memory.out_of_memory_line(f"the derive of run {run_id}")
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


def missing_views(warehouse: Warehouse, run_id: str, store: Path | None = None) -> list[str]:
    """The per-run views whose rows of this run are not kept (yet), in the derive's order."""
    kept = listing(store or store_dir(warehouse))
    return [v for v in per_run_views() if run_id not in kept.get(v, ())]


def is_derived(warehouse: Warehouse, run_id: str) -> bool:
    """Whether every per-run view's rows of this run are kept."""
    return not missing_views(warehouse, run_id)


def forget_derived(warehouse: Warehouse, run_id: str) -> int:
    """Remove every row kept of this run, of any fingerprint: for a change to what the run's views read
    besides its files (`tracehouse label`: labels state batch sizes and tokens, `hardware` picks the device
    peaks; a new requests file). Under the run's derive lock, so a derive running with the old rows
    finishes first and its rows go too; the next derive (or reader) computes them anew. How many removed."""
    removed = 0
    with _run_lock(warehouse, run_id):
        for path in derived_root(warehouse).glob(f"*/*/run_id={run_id}"):
            shutil.rmtree(path, ignore_errors=True)
            removed += 1
    return removed


def take_out_derived(warehouse: Warehouse, run_id: str, into: Path) -> list[Path]:
    """Move every row kept of this run, of any fingerprint, into the folder `into`, and drop its derive lock
    and log (a run removed: warehouse.remove). Under the run's derive lock, so a derive running now finishes
    first and its rows go too. The folders moved, in their new place."""
    root = derived_root(warehouse)
    moved = []
    with _run_lock(warehouse, run_id):
        for i, path in enumerate(sorted(root.glob(f"*/*/run_id={run_id}"))):
            into.mkdir(parents=True, exist_ok=True)
            target = into / f"{i}-{path.parent.name}"
            os.replace(path, target)
            moved.append(target)
        (root / ".logs" / f"{run_id}.log").unlink(missing_ok=True)
    (root / ".locks" / f"{run_id}.lock").unlink(missing_ok=True)
    return moved


def remove_unpublished(warehouse: Warehouse) -> None:
    """Delete the kept rows, derive lock and log of runs no longer published (what a removal killed midway
    left; readers never read them, and a run of the same files ingested again must not find them)."""
    root = derived_root(warehouse)
    if not root.is_dir():
        return
    published = set(published_runs(warehouse))
    for special, suffix in ((".locks", ".lock"), (".logs", ".log")):
        for path in (root / special).glob(f"*{suffix}"):
            if path.name[: -len(suffix)] not in published:
                path.unlink(missing_ok=True)
    for store in (Path(e.path) for e in os.scandir(root) if e.is_dir() and e.name not in SPECIAL):
        for view, runs in listing(store).items():
            for run_id in set(runs) - published:
                shutil.rmtree(store / view / f"run_id={run_id}", ignore_errors=True)


def remove_abandoned(warehouse: Warehouse, store: Path) -> None:
    """The one cleanup: the folders of other fingerprints (kept under code or rules no longer in use), in
    this store what a derive killed mid-way left (`.<name>.<pid>.tmp` whose process is gone), and the rows
    of runs no longer published (a `tracehouse rm` killed mid-way: readers never read them)."""
    root = derived_root(warehouse)
    if not root.is_dir():
        return
    for entry in os.scandir(root):
        if entry.is_dir() and entry.name not in SPECIAL and entry.path != str(store):
            shutil.rmtree(entry.path, ignore_errors=True)
    remove_unpublished(warehouse)
    for partial in [*store.glob(".*.tmp"), *store.glob("*/.*.tmp")]:
        pid = partial.name.split(".")[-2]
        if pid.isdigit() and not process_alive(int(pid)):
            shutil.rmtree(partial, ignore_errors=True) if partial.is_dir() else partial.unlink(
                missing_ok=True
            )


def compute_once(con, runs: list[str]) -> list[str]:
    """On a reader's connection focused on `runs` (engine.focused): every per-run view that does not read
    all of these runs kept, and the HELPERS under them, computed once as temp tables (catalog.materialize)
    in the derive's order, so the queries after read rows rather than recompute the views' trees. In
    memory and for this connection only: nothing is written to the store (the one writer is `derive`).
    The views computed, for drop_computed."""
    kept = {v: set(r) for v, r in kept_views(con).items()}
    views = [
        v for v in _compute_order(per_run_views()) if v in HELPERS or not set(runs) <= kept.get(v, set())
    ]
    if all(v in HELPERS for v in views):
        return []  # every per-run view read kept: nothing to compute
    materialize(con, views)
    return views


def drop_computed(con, views: list[str]) -> None:
    """Drop what compute_once made; the connection's views read the catalogue (and kept rows) again."""
    for view in views:
        con.execute(f"DROP TABLE IF EXISTS temp.{view}")


def view_order() -> list[str]:
    """Every view's name, each after the views it reads (ordered_views' order), without parsing sql/ where
    it was parsed before: kept beside the catalogue file, per catalogue fingerprint (parsing every view
    with sqlglot costs seconds per process; the derive and a live report need the order)."""
    return list(_view_order(catalog_fingerprint()))


@functools.lru_cache(maxsize=2)
def _view_order(fingerprint: str) -> tuple[str, ...]:
    path = cache_dir() / f"catalog-{fingerprint}.order.json"
    try:
        names = json.loads(path.read_text())
        if isinstance(names, list) and set(names) == set(view_files()):
            return tuple(names)
    except (OSError, ValueError):
        pass
    names = [name for name, _ in ordered_views()]
    try:  # written aside, renamed: a reader finds the whole list or none
        path.parent.mkdir(parents=True, exist_ok=True)
        aside = path.with_suffix(f".{os.getpid()}.tmp")
        aside.write_text(json.dumps(names))
        os.replace(aside, path)
    except OSError:
        pass  # a cache folder this user cannot write: parsed again next time
    return tuple(names)


def kept_views(con: duckdb.DuckDBPyConnection) -> dict[str, list[str]]:
    """{view: the runs `con` reads kept} (read_kept's, for the runs it sees now)."""
    [(made,)] = con.execute(f"SELECT getvariable('{KEPT_VIEWS}')").fetchall()
    out: dict[str, list[str]] = {}
    for entry in made or []:
        view, run_id = entry.split("/", 1)
        out.setdefault(view, []).append(run_id)
    return out


def _compute_order(kept: list[str]) -> list[str]:
    """The kept views and HELPERS, each after the views it reads (the catalogue's order)."""
    wanted = set(kept) | set(HELPERS)
    return [name for name in view_order() if name in wanted]


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


def _derive_run(warehouse: Warehouse, store: Path, order: list[str], run_id: str, memory_limit, progress):
    if not missing_views(warehouse, run_id, store):
        return
    with _run_lock(warehouse, run_id):
        missing = missing_views(warehouse, run_id, store)  # derived by the process we waited for?
        if not missing:
            return
        with _work_folder(store, run_id) as work:
            _compute(warehouse, store, work, order, missing, [run_id], memory_limit, progress)


def _derive_batch(
    warehouse: Warehouse, store: Path, order: list[str], run_ids: list[str], memory_limit, progress
):
    """Derive runs that have nothing kept together, under every run's lock (taken in sorted order: two
    derives of overlapping batches take turns, never deadlock); a run another process derived meanwhile is
    left out."""
    with ExitStack() as locks:
        for run_id in sorted(run_ids):
            locks.enter_context(_run_lock(warehouse, run_id))
        kept, views = listing(store), set(per_run_views())  # per_run_views reads every view file's header
        fresh = [r for r in run_ids if not any(r in kept.get(v, ()) for v in views)]
        if not fresh:
            return
        with _work_folder(store, "batch") as work:
            _compute(warehouse, store, work, order, views, fresh, memory_limit, progress)


@contextmanager
def _work_folder(store: Path, name: str):
    """A derive's work folder in the store (`.work-<name>.<pid>.tmp`, its spill folder inside), removed
    after; one a killed derive left is removed by the next (remove_abandoned)."""
    store.mkdir(parents=True, exist_ok=True)
    work = store / f".work-{name}.{os.getpid()}.tmp"
    shutil.rmtree(work, ignore_errors=True)
    (work / "spill").mkdir(parents=True)
    try:
        yield work
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _compute(warehouse, store: Path, work: Path, order, missing, run_ids, memory_limit, progress) -> None:
    # Not locked down (it writes its files; no user SQL runs on it); DuckDB spills to disk beyond the memory
    # limit. Each view is computed once and written to Parquet as its rows stream, and the views after it
    # read that file: nothing is held in memory between views, whatever the run's size.
    # The memory policy's settings, no row order kept (every query here says its own).
    settings = memory.settings(work / "spill", ordered=False)
    if memory_limit:
        settings |= {"memory_limit": memory_limit, "threads": str(memory.threads(memory_limit))}
    con = connect(warehouse, runs=run_ids, lockdown=False, settings=settings)
    try:
        for i, view in enumerate(order, 1):
            started = time.perf_counter()
            if view in HELPERS:
                target = work / f"{view}.parquet"
                types = _write_rows(con, f"SELECT {', '.join(HELPERS[view] or ['*'])} FROM {view}", target)
                con.execute(f"CREATE OR REPLACE TEMP VIEW {view} AS " + typed_read([target], types))
            elif view in missing:
                _keep(con, store, view, run_ids)
            else:
                continue  # kept already: the connection reads its rows (catalog.read_kept)
            if progress:
                runs = f", {len(run_ids)} runs" if len(run_ids) > 1 else ""
                progress(f"{view} ({i}/{len(order)}{runs}): {time.perf_counter() - started:.1f} s")
    finally:
        con.close()


def _keep(con, store: Path, view: str, run_ids: list[str]) -> None:
    """The view's rows of these runs, each run's into its run folder (written aside, renamed), its
    types.json once; the views after it read them. Several runs: one query, its rows split by run
    (PARTITION_BY), a run without rows given an empty file."""
    folders = {r: kept_file(store, view, r).parent for r in run_ids}
    aside = store / view / f".rows.{os.getpid()}.tmp"
    shutil.rmtree(aside, ignore_errors=True)
    aside.mkdir(parents=True)
    try:
        rows = f"SELECT * FROM {view} WHERE run_id IN ({', '.join(sql_string(r) for r in run_ids)})"
        # run_id is the folder's (hive partition), not a column of the file
        if len(run_ids) == 1:
            (aside / f"run_id={run_ids[0]}").mkdir()
            types = _write_rows(con, rows, aside / f"run_id={run_ids[0]}" / KEPT_FILE, leave_out=("run_id",))
        else:
            types = _write_rows(con, rows, aside, leave_out=("run_id",), split_by="run_id")
            _one_file_per_run(con, aside, run_ids, view)
        types_file = store / view / TYPES_FILE
        if not types_file.is_file():
            _into_place(aside / TYPES_FILE, types_file, json.dumps(types))
        for run_id, final in folders.items():
            _into_place(aside / f"run_id={run_id}", final)
    finally:  # an interrupt, a failure: nothing of this view is left aside (what is in place is whole)
        shutil.rmtree(aside, ignore_errors=True)
    files = [final / KEPT_FILE for final in folders.values()]
    con.execute(f"CREATE OR REPLACE TEMP VIEW {view} AS " + typed_read(files, types, hive=True))


def _one_file_per_run(con, aside: Path, run_ids: list[str], view: str) -> None:
    """After a PARTITION_BY write: each run's folder holds its rows as KEPT_FILE; a run without rows gets an
    empty file of the view's columns."""
    empty = None
    for run_id in run_ids:
        folder = aside / f"run_id={run_id}"
        files = sorted(folder.glob("*.parquet")) if folder.is_dir() else []
        if len(files) == 1:
            files[0].rename(folder / KEPT_FILE)
        elif files:  # DuckDB split a run's rows over several files: one
            con.execute(
                f"COPY (SELECT * FROM read_parquet([{', '.join(sql_string(f) for f in files)}], "
                "hive_partitioning = false)) "
                f"TO {sql_string(folder / KEPT_FILE)} (FORMAT parquet, COMPRESSION zstd)"
            )
            for f in files:
                f.unlink()
        else:
            if empty is None:
                empty = aside / ".empty.parquet"
                _write_rows(con, f"SELECT * FROM {view} WHERE false", empty, leave_out=("run_id",))
            folder.mkdir(exist_ok=True)
            shutil.copyfile(empty, folder / KEPT_FILE)
    if empty is not None:
        empty.unlink()


def _into_place(aside: Path, final: Path, text: str | None = None) -> None:
    """The one publish of the store: a file or folder written aside (text: write it first), renamed into
    place whole, so that a reader sees nothing or all of it. Where another process put it there first (same
    rows), the aside copy is dropped."""
    if text is not None:
        aside.write_text(text)
    try:
        os.rename(aside, final)
    except OSError:
        if not final.exists():
            raise
        shutil.rmtree(aside, ignore_errors=True) if aside.is_dir() else aside.unlink(missing_ok=True)


def _write_rows(
    con, select: str, target: Path, leave_out: tuple[str, ...] = (), split_by: str | None = None
) -> list[list[str]]:
    """Write a query's rows to one Parquet file (split_by: into the folder `target`, a `<column>=<value>`
    folder per value, without that column); its columns' DuckDB types (every column, also those left out
    of the file). The one HUGEINT workaround: Parquet has none (DuckDB would write a lossy DOUBLE), so
    such a column is written as DECIMAL(38, 0) and cast back on reading (catalog.typed_read)."""
    types = [[row[0], row[1]] for row in con.execute(f"DESCRIBE {select}").fetchall()]
    exact = ", ".join(
        f'CAST("{name}" AS DECIMAL(38, 0)) AS "{name}"' if kind == "HUGEINT" else f'"{name}"'
        for name, kind in types
        if name not in leave_out or name == split_by
    )
    split = f", PARTITION_BY ({split_by}), FILENAME_PATTERN 'rows'" if split_by else ""
    con.execute(
        f"COPY (SELECT {exact} FROM ({select})) TO {sql_string(target)} "
        f"(FORMAT parquet, COMPRESSION zstd{split})"
    )
    return types

"""The rows an export reads: the rank's window (SQL overlaps), record batches, the steps' walls, the base
tables scoped to one rank (and one span of steps) so that the analysis views compute over those rows only,
and the guard that turns a view out of memory into a note instead of a failed export."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

import duckdb
from tracehouse.reports.export.params import BATCH, MEMORY_LIMIT, SPILL_LIMIT, ExportSummary
from tracehouse.warehouse.quoting import sql_string


def overlaps(alias: str, start: str = "start_ns", dur: str = "dur_ns") -> str:
    """SQL: the row of `alias` overlaps its rank's window w (a zero-length one lies in it)."""
    s, d = f"{alias}.{start}", f"coalesce({alias}.{dur}, 0)"
    return f"({s} < w.end_ns AND ({s} + {d} > w.start_ns OR {s} >= w.start_ns))"


def batches(con, sql: str, params: list) -> Iterator[dict]:
    reader = con.sql(sql, params=params).to_arrow_reader(BATCH)
    for batch in reader:
        cols = batch.to_pydict()
        names = list(cols)
        for values in zip(*(cols[n] for n in names)):
            yield dict(zip(names, values))


def step_windows(con, run_id: str) -> list[tuple[int, int, int, int, int]]:
    """(rank, step, start, end, activities) of every step: its wall as step_breakdown defines it (the earlier
    of its host start and first GPU start to the later of its host end and last GPU end), from the tables."""
    return con.execute(
        """
        WITH gpu AS (
            SELECT rank, step, min(start_ns) AS first_ns, max(end_ns) AS last_ns, count(*) AS n
            FROM kernels WHERE run_id = ? AND step IS NOT NULL GROUP BY rank, step
        )
        SELECT s.rank, s.step, least(s.start_ns, coalesce(g.first_ns, s.start_ns)),
               greatest(s.end_ns, coalesce(g.last_ns, s.end_ns)), coalesce(g.n, 0)
        FROM step_spans AS s LEFT JOIN gpu AS g ON g.rank = s.rank AND g.step = s.step
        WHERE s.run_id = ? ORDER BY s.rank, s.step""",
        [run_id, run_id],
    ).fetchall()


def steps_in(con, run_id: str, rank: int, lo: int, hi: int) -> list[int]:
    """The steps of the rank with GPU work whose wall overlaps [lo, hi)."""
    return [st for r, st, a, b, n in step_windows(con, run_id) if r == rank and n and a < hi and b > lo]


# the base tables the analysis views read, scoped per rank (and per batch of steps) by scope
# (start, length) of each timed table's rows; kernel_sites follows the scoped kernels (its rows are theirs)
SCOPED_TABLES = {
    "kernels": ("start_ns", "coalesce(dur_ns, 0)"),
    "cpu_ops": ("start_ns", "coalesce(dur_ns, 0)"),
    "python_frames": ("start_ns", "coalesce(dur_ns, 0)"),
    "step_spans": ("start_ns", "end_ns - start_ns"),
    "flows": ("least(src_ns, dst_ns)", "abs(dst_ns - src_ns)"),
    "kernel_sites": "kernels",
    "streams": None,
}


def guard(summary: ExportSummary, what: str, compute: Callable, *args):
    """compute(*args), or None when DuckDB cannot finish it within the export's memory (or spill space): the
    track is then not written, and a note says so (stderr and the file's notes), never silently."""
    try:
        return compute(*args)
    except (duckdb.OutOfMemoryException, duckdb.IOException) as e:
        first = str(e).strip().splitlines()[0][:160]
        summary.notes.append(
            f"{what} not drawn: {first} (memory limit {MEMORY_LIMIT}, spill {SPILL_LIMIT}: export "
            "a --step or --window, or raise TRACEHOUSE_MEMORY_LIMIT / TRACEHOUSE_EXPORT_SPILL)"
        )
        return None


def fetch(con, sql: str, params: list) -> list:
    return con.execute(sql, params).fetchall()


def temp_table(con, name: str, sql: str, params: list) -> int:
    con.execute(f"CREATE OR REPLACE TEMP TABLE {name} AS {sql}", params)
    return con.execute(f"SELECT count(*) FROM temp.{name}").fetchone()[0]


def batch_span(con, run_id: str, rank: int, steps: list[int], walls) -> tuple[int, int]:
    """[lo, hi): from the earliest of the steps' walls and the launch calls of their GPU activities (work
    queued from before the step) to the latest wall end: every row a per-step view of these steps reads."""
    chosen = set(steps)
    lo = min(a for r, st, a, b, _ in walls if r == rank and st in chosen)
    hi = max(b for r, st, a, b, _ in walls if r == rank and st in chosen)
    (launch,) = con.execute(
        f"""
        SELECT min(o.start_ns) FROM kernels AS k JOIN cpu_ops AS o
          ON o.run_id = k.run_id AND o.rank = k.rank AND o.op_id = k.launch_op_id
        WHERE k.run_id = ? AND k.rank = ? AND k.step IN ({", ".join(map(str, steps))})""",
        [run_id, rank],
    ).fetchone()
    return (min(lo, launch) if launch is not None else lo), hi + 1


def catalog_schema(con) -> str:
    """Where the catalogue's views live: the attached catalog database, else main."""
    (attached,) = con.execute(
        "SELECT count(*) FROM duckdb_databases() WHERE database_name = 'catalog'"
    ).fetchone()
    return "catalog.main" if attached else "main"


@contextmanager
def scope(con, run_id: str, rank: int, span: tuple[int, int] | None):
    """While inside: the base tables as temp views of this rank's rows (and, with a span, of the rows that
    overlap it), so the analysis views compute over those only; the catalogue's views read them by name."""
    schema = catalog_schema(con)
    rows = f"run_id = {sql_string(run_id)} AND rank = {int(rank)}"
    try:
        for table, timed in SCOPED_TABLES.items():
            where = rows
            if span is not None and isinstance(timed, tuple):
                start, dur = timed
                where += f" AND {start} < {int(span[1])} AND {start} + {dur} >= {int(span[0])}"
            elif span is not None and timed == "kernels":
                where += " AND kernel_id IN (SELECT kernel_id FROM temp.kernels)"
            # a span's rows are few (one batch of steps): a temp table, read once; the views would re-scan the
            # rank's files at every reference (the critical path reads kernels a dozen times: 25x slower on a
            # 300 MB run). A whole rank stays a view (a table would hold it in memory)
            what = "TABLE" if span is not None else "VIEW"
            con.execute(
                f"CREATE OR REPLACE TEMP {what} {table} AS SELECT * FROM {schema}.{table} WHERE {where}"
            )
        yield
    finally:
        for table in SCOPED_TABLES:
            con.execute(f"DROP {'TABLE' if span is not None else 'VIEW'} IF EXISTS temp.{table}")

"""Idle gaps (sql/idle_gaps, device scope, not tiny) and exposed communication (sql/export_exposed_comm) of a
rank's window, computed per tile of params.step_batch steps over the rows each tile's figures read (the same
rows as the whole-rank views), and their tracks."""

from __future__ import annotations

from itertools import pairwise

from tracehouse.reports.export import scoped
from tracehouse.reports.export.params import FAR
from tracehouse.reports.export.scoped import overlaps
from tracehouse.reports.export.tracks import ExportContext

GAP_SQL = f"""
    SELECT g.device, g.step, g.gap_start_ns, g.gap_ns, g.class, g.wait_ns, g.host_ns, g.queued_ns,
           g.host_op, g.host_op_ns, g.next_name, g.next_kernel_id
    FROM idle_gaps AS g JOIN export_window AS w ON w.rank = g.rank
    WHERE g.run_id = ? AND g.rank = ? AND g.scope = 'device' AND g.class <> 'tiny'
      AND g.gap_end_ns >= ? AND g.gap_end_ns < ? AND {overlaps("g", "gap_start_ns", "gap_ns")}"""
COMM_SQL = """
    SELECT x.device, greatest(x.start_ns, ?) AS start_ns, least(x.end_ns, ?) AS end_ns
    FROM export_exposed_comm AS x WHERE x.run_id = ? AND x.rank = ? AND x.start_ns < ? AND x.end_ns > ?"""
# touching pieces (of one interval cut by tile bounds) joined: the view's islands
JOIN_PIECES_SQL = f"""
    CREATE OR REPLACE TEMP TABLE export_comm AS
    SELECT x.device, x.start_ns, x.dur_ns FROM (
        SELECT device, min(start_ns) AS start_ns, max(end_ns) - min(start_ns) AS dur_ns
        FROM (SELECT *, sum(CASE WHEN start_ns = prev_end THEN 0 ELSE 1 END)
                            OVER (PARTITION BY device ORDER BY start_ns) AS island
              FROM (SELECT *, lag(end_ns) OVER (PARTITION BY device ORDER BY start_ns) AS prev_end
                    FROM temp.export_comm_pieces) AS p) AS q
        GROUP BY device, island) AS x
    JOIN export_window AS w ON w.rank = ?
    WHERE {overlaps("x")}"""
GAP_ARGS = (
    "step",
    "class",
    "wait_ns",
    "host_ns",
    "queued_ns",
    "host_op",
    "host_op_ns",
    "next_name",
    "next_kernel_id",
)


def step_tiles(walls, rank: int, step_batch: int) -> list[tuple[int, int]]:
    """The rank's time cut into tiles [lo, hi) of step_batch steps each (cut at the wall start of every
    step_batch-th step, in start order), the first from -FAR, the last to FAR: they tile all of its time."""
    starts = sorted(a for r, _, a, _, _ in walls if r == rank)
    edges = [-FAR, *sorted(set(starts[step_batch::step_batch])), FAR]
    return list(pairwise(edges))


def _tile_span(con, run_id: str, rank: int, lo: int, hi: int) -> tuple[int, int]:
    """The rows a tile's idle gaps read: from the earliest of lo, the latest end before lo on each device (where
    the first gap of the tile starts: it runs from the end of whatever ran before it) and the launch calls of
    the tile's activities, to hi (or a later launch call)."""
    if lo == -FAR:
        return lo, hi
    (before,) = con.execute(
        """
        SELECT min(pe) FROM (SELECT max(end_ns) AS pe FROM kernels WHERE run_id = ? AND rank = ? AND start_ns < ?
                             GROUP BY device)""",
        [run_id, rank, lo],
    ).fetchone()
    first, last = con.execute(
        """
        SELECT min(launch_start_ns), max(launch_start_ns) FROM kernels
        WHERE run_id = ? AND rank = ? AND start_ns >= ? AND start_ns < ?""",
        [run_id, rank, lo, hi],
    ).fetchone()
    start = min(x for x in (lo, before, first) if x is not None)
    return start, max(hi, last + 1 if last is not None else hi)


def _has_temp(con, table: str) -> bool:
    return bool(
        con.execute(
            "SELECT count(*) FROM duckdb_tables() WHERE temporary AND table_name = ?", [table]
        ).fetchone()[0]
    )


class _GapTiles:
    """Idle gaps and exposed communication of one rank that overlap [lo, hi), per tile of step_batch steps
    (step_tiles), each over the rows its figures read (scoped.scope): the same rows as the whole-rank views. A
    gap belongs to the tile where it ends (its next activity starts); the tile's rows reach back to where it
    begins (_tile_span). Exposed communication is exact at every instant inside a tile whose rows overlap it, so
    each tile gives its pieces clipped to the tile, and touching pieces are joined into the intervals after the
    last tile (as the view joins them). Results go to temp tables export_gaps and export_comm (written whole,
    or, when a tile does not fit, dropped: the track is not drawn and said). Tiles read: those overlapping the
    window, those after it up to each device's first activity after it (a gap across the window's end), and,
    for exposed communication, neighbours while an interval runs across the tile's bound."""

    def __init__(self, ctx: ExportContext, rank: int, walls):
        self.ctx, self.rank = ctx, rank
        self.lo, self.hi = ctx.windows[rank]
        self.tiles = step_tiles(walls, rank, ctx.params.step_batch)
        self.ok = {"gaps": True, "comm": True}
        self.done: set[int] = set()

    def _after(self) -> int | None:
        """Each device's first activity at or after the window's end, the latest of them (None: open window)."""
        if self.hi >= FAR:
            return None
        (after,) = self.ctx.con.execute(
            """
            SELECT max(first) FROM (SELECT min(start_ns) AS first FROM kernels
                                    WHERE run_id = ? AND rank = ? AND start_ns >= ? GROUP BY device)""",
            [self.ctx.run_id, self.rank, self.hi],
        ).fetchone()
        return after

    def tile(self, i: int) -> None:
        if i in self.done:
            return
        self.done.add(i)
        ctx, rank, run_id = self.ctx, self.rank, self.ctx.run_id
        t_lo, t_hi = self.tiles[i]
        ctx.say(f"rank {rank}: idle gaps and exposed communication, tile {i + 1} of {len(self.tiles)}")
        # a single tile is the whole rank: its rows stay a view (scoped.scope)
        span = None if (t_lo, t_hi) == (-FAR, FAR) else _tile_span(ctx.con, run_id, rank, t_lo, t_hi)
        with scoped.scope(ctx.con, run_id, rank, span):
            self._append("gaps", "idle gaps", "export_gaps", GAP_SQL, [run_id, rank, t_lo, t_hi])
            self._append(
                "comm",
                "exposed communication",
                "export_comm_pieces",
                COMM_SQL,
                [t_lo, t_hi, run_id, rank, t_hi, t_lo],
            )

    def _append(self, key: str, what: str, target: str, sql: str, params: list) -> None:
        """The tile's rows of one figure appended to temp.<target> (or the figure marked not drawn)."""
        if not self.ok[key]:
            return
        con, name = self.ctx.con, f"export_{key}_tile"
        if (
            scoped.guard(
                self.ctx.summary, f"rank {self.rank}: {what}", scoped.temp_table, con, name, sql, params
            )
            is None
        ):
            self.ok[key] = False
            return
        if _has_temp(con, target):
            con.execute(f"INSERT INTO temp.{target} SELECT * FROM temp.{name}")
        else:
            con.execute(f"CREATE TEMP TABLE {target} AS SELECT * FROM temp.{name}")
        con.execute(f"DROP TABLE temp.{name}")

    def _touching(self, at: int, column: str) -> bool:
        """An exposed interval's piece ends (or starts) at the tile bound `at`: it runs on into the next tile."""
        con = self.ctx.con
        if not self.ok["comm"] or at in (-FAR, FAR) or not _has_temp(con, "export_comm_pieces"):
            return False
        return bool(
            con.execute(f"SELECT count(*) FROM temp.export_comm_pieces WHERE {column} = ?", [at]).fetchone()[
                0
            ]
        )

    def compute(self) -> tuple[bool, bool]:
        """Whether each of temp.export_gaps and temp.export_comm holds its track (False: nothing to write, not
        drawn, said by scoped.guard, or no row at all)."""
        con, tiles = self.ctx.con, self.tiles
        after = self._after()
        for t in ("export_gaps", "export_comm_pieces", "export_comm"):
            con.execute(f"DROP TABLE IF EXISTS temp.{t}")
        wanted = [
            i
            for i, (a, b) in enumerate(tiles)
            if b > self.lo and (a < self.hi or (after is not None and a <= after))
        ]
        for i in wanted:
            self.tile(i)
        if wanted:
            first, last = wanted[0], wanted[-1]
            while first > 0 and self._touching(tiles[first][0], "start_ns"):
                first -= 1
                self.tile(first)
            while last < len(tiles) - 1 and self._touching(tiles[last][1], "end_ns"):
                last += 1
                self.tile(last)
        have = {
            t for (t,) in con.execute("SELECT table_name FROM duckdb_tables() WHERE temporary").fetchall()
        }
        if self.ok["comm"] and "export_comm_pieces" in have:
            con.execute(JOIN_PIECES_SQL, [self.rank])
        con.execute("DROP TABLE IF EXISTS temp.export_comm_pieces")
        if not self.ok["gaps"]:
            con.execute("DROP TABLE IF EXISTS temp.export_gaps")
        return self.ok["gaps"] and "export_gaps" in have, self.ok["comm"] and "export_comm_pieces" in have


def gap_and_comm_tracks(ctx: ExportContext, rank: int, group: int, walls) -> tuple[int, int]:
    """The idle-gap tracks (one per device) and exposed-communication tracks of the rank's window, each written
    whole or, when a tile does not fit, not at all and said so; (gaps, intervals) written."""
    con, tracks, pid = ctx.con, ctx.tracks, rank + 1
    has_gaps, has_comm = _GapTiles(ctx, rank, walls).compute()
    gaps = comm = 0
    if has_gaps:
        for row in scoped.batches(con, "SELECT * FROM temp.export_gaps ORDER BY device, gap_start_ns", []):
            track = tracks.track(
                group,
                ("gaps", rank, row["device"]),
                f"idle gaps GPU {row['device']}",
                pid,
                "sql/idle_gaps (scope device): why no stream of the device was busy; gaps under "
                "1 us (class tiny) are left out",
            )
            args = {k: row[k] for k in GAP_ARGS}
            tracks.slice_on(
                track, row["gap_start_ns"], row["gap_ns"], f"idle: {row['class']}", "idle_gap", args
            )
            gaps += 1
    if has_comm:
        for row in scoped.batches(con, "SELECT * FROM temp.export_comm ORDER BY device, start_ns", []):
            track = tracks.track(
                group,
                ("comm", rank, row["device"]),
                f"exposed communication GPU {row['device']}",
                pid,
                "sql/export_exposed_comm: communication running with no compute beside it",
            )
            tracks.slice_on(
                track,
                row["start_ns"],
                row["dur_ns"],
                "exposed communication",
                "exposed_comm",
                {"dur_ns": row["dur_ns"]},
            )
            comm += 1
    con.execute("DROP TABLE IF EXISTS temp.export_gaps")
    con.execute("DROP TABLE IF EXISTS temp.export_comm")
    return gaps, comm

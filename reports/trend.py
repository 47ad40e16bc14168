"""The trend report: every metric of run_metrics across the runs of a series, with regressions flagged.

How it is computed: the run_metrics rows (rank NULL) of the selected runs are fetched once from the
warehouse; the trend and regression views (sql/runs/trend_params.sql, sql/runs/trend.sql, sql/runs/regression.sql,
the same files the warehouse catalogue registers) then run over those rows in a small in-memory DuckDB
(`evaluate`: warehouse.engine.open_tables). So the regression rule has one definition whether it reads a warehouse or, as in
bench/trend_bench.py, a table of synthesized metrics.
"""

from __future__ import annotations

import fnmatch
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute
from tracehouse.reports.charts import sparkline
from tracehouse.reports.render import render
from tracehouse.warehouse.engine import Connection, focused, open_tables

from tracehouse.errors import TracehouseError

RULE_VIEWS = ("trend_params", "trend", "regression")


@dataclass
class Point:
    seq: int
    run_id: str
    commit: str | None
    commit_time: str
    value: float
    baseline: float | None
    noise: float | None
    change_pct: float | None
    flagged: bool
    first_commit: str | None
    band: float | None = None  # half-width of the band the value was judged against (regression.band)


@dataclass
class MetricLine:
    metric: str
    better: str
    points: list[Point]
    last_value: float | None
    last_change_pct: float | None
    sparkline: str
    flagged_last: bool
    about: str | None = None  # what the line is, where its name does not say (a graph node's kernel)


@dataclass
class Regression:
    series: str
    phase: str
    metric: str
    run_id: str
    commit: str | None
    first_commit: str | None
    value: float
    baseline: float
    noise: float
    change_pct: float
    in_last_run: bool
    band: float | None = None
    flagged_runs: int = 1  # runs flagged in this shift (listed once, at the commit where it starts)
    about: str | None = None  # as MetricLine.about


@dataclass
class SeriesTrend:
    series: str
    phase: str
    runs: int  # runs shown (within since/last)
    last_run_id: str
    last_commit: str | None
    metrics: list[MetricLine]
    runs_total: int = 0  # runs of the series in the whole history (what the rule judges from)
    runs_needed: int = (
        0  # the fewest runs for which the last run can be judged (trend_params.min_history + 1)
    )

    @property
    def judged(self) -> bool:
        """Whether the regression rule could judge the series' last run: it needs min_history earlier runs."""
        return self.runs_total >= self.runs_needed

    @property
    def too_few_runs(self) -> str:
        """The line said when the rule cannot judge: '3 runs: need at least 6 to flag a regression'."""
        return f"{self.runs_total} run{'s' if self.runs_total != 1 else ''}: need at least {self.runs_needed} to flag a regression"

    HEADLINE = ("step_time_median_ns", "gpu_busy_pct", "exposed_comm_ns_per_step", "idle_pct")

    @property
    def headline(self) -> list[MetricLine]:
        """What the trend page leads with: metrics that regressed in the last run, then step time, GPU busy,
        exposed communication, idle, and the three categories with the most time per step."""
        by_name = {m.metric: m for m in self.metrics}
        cats = sorted(
            (m for m in self.metrics if m.metric.startswith("category.")), key=lambda m: -(m.last_value or 0)
        )[:3]
        chosen = [m for m in self.metrics if m.flagged_last]
        chosen += [by_name[k] for k in self.HEADLINE if k in by_name] + cats
        seen, out = set(), []
        for m in chosen:
            if m.metric not in seen:
                seen.add(m.metric)
                out.append(m)
        return out

    @property
    def rest(self) -> list[MetricLine]:
        shown = {m.metric for m in self.headline}
        return [m for m in self.metrics if m.metric not in shown]


@dataclass
class TrendReport:
    filters: dict[str, str]
    metric_patterns: list[str]
    since: str | None
    last: int | None
    series: list[SeriesTrend]
    regressions: list[Regression]  # flagged points shown (within since/last)
    failing: list[Regression]  # flagged points in the last run of their series
    params: dict[str, float] = field(default_factory=dict)

    @property
    def unjudged(self) -> list[SeriesTrend]:
        """Series whose last run the rule cannot judge: too few runs (said, never read as 'no regression')."""
        return [s for s in self.series if not s.judged]


def gate(report: TrendReport) -> tuple[int, list[str]]:
    """What `trend --fail-on-regression` exits with, and the lines it says on stderr: 3 and one line per
    regression in the last run of its series; else 1 and one line per series the rule cannot judge (too
    few runs: a gate that cannot judge must not pass); else 0."""
    if report.failing:
        return 3, [
            f"regression: {g.series} {g.phase} {g.metric} {g.change_pct:+.2f} % at {g.commit} "
            f"(shift from {g.first_commit})"
            for g in report.failing
        ]
    if report.unjudged or not report.series:
        lines = [f"cannot judge {s.series} {s.phase}: {s.too_few_runs}" for s in report.unjudged]
        return 1, lines or ["cannot judge: no metric of these runs"]
    return 0, []


def shifts(flagged: list[Regression]) -> list[Regression]:
    """Flagged points, one per shift: the points of one (series, phase, metric) that name the same first
    commit are one shift, listed once at the commit where it starts (its first flagged point, with how many
    runs were flagged and whether the last run is one of them)."""
    out: dict[tuple, Regression] = {}
    for g in flagged:
        key = (g.series, g.phase, g.metric, g.first_commit or g.commit)
        if key in out:
            first = out[key]
            first.flagged_runs += 1
            first.in_last_run = first.in_last_run or g.in_last_run
        else:
            out[key] = g
    return list(out.values())


def evaluate(runs: pa.Table, metrics: pa.Table) -> Connection:
    """A fresh in-memory connection holding `runs` and `run_metrics` as tables and the rule views over
    them (warehouse.engine.open_tables); regression reads trend three times: trend is computed once.

    runs needs run_id, ingested_at, labels, framework, model, hardware, commit, commit_time, series;
    metrics needs run_id, rank, phase, metric, value, better, spread.
    """
    return open_tables({"runs": runs, "run_metrics": metrics}, RULE_VIEWS, computed=["trend"])


def _arrow(cursor) -> pa.Table:
    """The result as a pyarrow Table, across DuckDB versions (to_arrow_table in 2.x)."""
    for name in ("to_arrow_table", "fetch_arrow_table", "arrow"):
        if hasattr(cursor, name):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                table = getattr(cursor, name)()
            return table.read_all() if hasattr(table, "read_all") else table
    raise RuntimeError("this DuckDB cannot return Arrow tables")


def _metric_filter(patterns: list[str], names: list[str]) -> list[str]:
    if not patterns:
        return names
    return [n for n in names if any(n == p or fnmatch.fnmatchcase(n, p) for p in patterns)]


def trend_inputs(
    con: Connection,
    where: dict[str, str] | None = None,
    warehouse=None,
    before_reading: Callable[[list[str]], None] | None = None,
) -> tuple[pa.Table, pa.Table | None]:
    """The selected runs and their run_metrics rows of rank NULL, as `evaluate` takes them. With
    `warehouse`, the rows come from the per-run store (warehouse.metrics: kept per run where it is
    derived); else from the run_metrics view of `con`. before_reading(run ids) is called once the runs are
    selected (the CLI derives them there, as a report does: reports.write.derive_first)."""
    where = dict(where or {})
    clauses = " AND ".join(
        "(labels[?] = ? OR (? = 'series' AND series = ?) OR (? = 'commit' AND commit = ?))" for _ in where
    )
    params: list = []
    for k, v in where.items():
        params += [k, v, k, v, k, v]
    runs = _arrow(
        con.execute(
            "SELECT run_id, ingested_at, labels, framework, model, hardware, commit, commit_time, series FROM runs"
            + (f" WHERE {clauses}" if clauses else ""),
            params,
        )
    )
    run_ids = runs.column("run_id").to_pylist()
    if not run_ids:
        return runs, None
    if before_reading is not None:
        before_reading(run_ids)
    if warehouse is not None:
        from tracehouse.warehouse.metrics import run_metric_rows

        return runs, _rank_null(run_metric_rows(warehouse, run_ids))
    with focused(con, run_ids) as on:  # run_metrics computed for these runs only
        return runs, _arrow(
            on.execute(
                "SELECT run_id, rank, phase, metric, value, better, spread FROM run_metrics "
                "WHERE rank IS NULL AND run_id IN (SELECT unnest(?))",
                [run_ids],
            )
        )


def build_trend(
    con: Connection,
    where: dict[str, str] | None = None,
    metrics: list[str] | None = None,
    since: str | None = None,
    last: int | None = None,
    warehouse=None,
    graph_nodes: tuple[str, ...] | None = None,
    before_reading: Callable[[list[str]], None] | None = None,
) -> TrendReport:
    """The trend report. With `warehouse`, run metrics come from the per-run store
    (warehouse.metrics: computed once per run); else from the run_metrics view of `con`.
    graph_nodes: the lines are CUDA-graph nodes instead (reports.graph_node_trend; () every node, else the
    node ids to follow), with each run's step_time_median_ns beside them."""
    metrics = list(metrics or [])
    runs, rows = trend_inputs(con, where, warehouse, before_reading)
    if runs.num_rows == 0:
        raise _no_runs(con, where)
    about: dict[str, str] = {}
    if graph_nodes is not None and rows is not None:
        from tracehouse.reports.graph_node_trend import node_rows, with_reference

        found, about = node_rows(con, runs.column("run_id").to_pylist(), tuple(graph_nodes))
        rows = with_reference(found, rows, rows.schema)
    if rows is not None and metrics:
        names = sorted(set(rows.column("metric").to_pylist()))
        chosen = _metric_filter(metrics, names)
        if not chosen:  # a gate over nothing must not pass
            families = sorted({n.split(".", 1)[0] + (".*" if "." in n else "") for n in names})
            raise TracehouseError(
                f"--metric {' '.join(metrics)} matches no metric of these runs",
                hint="metrics: " + ", ".join(families),
            )
        rows = rows.filter(pa.compute.is_in(rows.column("metric"), pa.array(sorted(chosen) or [""])))
    report = build_trend_from_tables(runs, rows, where=where, metrics=metrics, since=since, last=last)
    for item in [m for s in report.series for m in s.metrics] + report.regressions + report.failing:
        item.about = about.get(item.metric)
    return report


def _no_runs(con: Connection, where: dict[str, str] | None) -> TracehouseError:
    """Matching no run is an error that names what exists (a CI gate over nothing must not pass)."""
    if not where:
        return TracehouseError(
            "the warehouse holds no runs", hint="ingest traces with `tracehouse ingest PATH`"
        )
    parts = []
    for key in sorted(where):
        column = key if key in ("series", "commit") else None
        values = con.execute(
            f"SELECT DISTINCT {column} FROM runs WHERE {column} IS NOT NULL ORDER BY 1 LIMIT 13"
            if column
            else "SELECT DISTINCT labels[?] FROM runs WHERE labels[?] IS NOT NULL ORDER BY 1 LIMIT 13",
            [] if column else [key, key],
        ).fetchall()
        shown = ", ".join(str(v) for (v,) in values[:12]) + (", ..." if len(values) > 12 else "")
        parts.append(f"{key}: {shown or 'no run has this label'}")
    asked = " ".join(f"{k}={v}" for k, v in sorted(where.items()))
    return TracehouseError(f"no run matches --where {asked}", hint="; ".join(parts))


def _rank_null(rows: pa.Table) -> pa.Table:
    """The rank-NULL rows: each run's metrics aggregated over its ranks."""
    return rows.filter(pa.compute.is_null(rows.column("rank")))


def build_trend_from_tables(
    runs: pa.Table,
    rows: pa.Table | None,
    *,
    where: dict[str, str] | None = None,
    metrics: list[str] | None = None,
    since: str | None = None,
    last: int | None = None,
) -> TrendReport:
    report = TrendReport(dict(where or {}), list(metrics or []), since, last, [], [], [])
    if rows is None or rows.num_rows == 0:
        con = open_tables({}, ["trend_params"])
        cur = con.execute("SELECT * FROM trend_params")
        report.params = dict(zip([d[0] for d in cur.description], cur.fetchone()))
        return report
    ev = evaluate(runs, rows)
    p = ev.execute("SELECT * FROM trend_params").fetchone()
    report.params = dict(zip([d[0] for d in ev.description], p))
    result = ev.execute(
        "SELECT series, phase, metric, better, seq, run_id, commit, CAST(commit_time AS VARCHAR), value, baseline, "
        "noise, change_pct, flagged, first_commit, band, "
        "max(commit_time) OVER (PARTITION BY series, phase) AS series_last_time, "
        "commit_time = max(commit_time) OVER (PARTITION BY series, phase) AS in_last_run "
        "FROM regression ORDER BY series, phase, metric, seq"
    ).fetchall()
    series: dict[tuple[str, str], dict[str, list]] = {}
    last_runs: dict[tuple[str, str], tuple[str, str | None, str]] = {}
    for (
        s,
        ph,
        metric,
        better,
        seq,
        run_id,
        commit,
        ctime,
        value,
        baseline,
        noise,
        change,
        flagged,
        first,
        band,
        _last_time,
        in_last,
    ) in result:
        key = (s, ph)
        series.setdefault(key, {}).setdefault(metric, []).append(
            (
                better,
                Point(seq, run_id, commit, ctime, value, baseline, noise, change, bool(flagged), first, band),
                bool(in_last),
            )
        )
        if in_last:
            last_runs[key] = (run_id, commit, ctime)
        if flagged:
            reg = Regression(
                s, ph, metric, run_id, commit, first, value, baseline, noise, change, bool(in_last), band
            )
            if in_last:
                report.failing.append(reg)
    needed = int(report.params["min_history"]) + 1
    for key in sorted(series):
        lines = []
        n_runs = set()
        all_runs = {it[1].run_id for items in series[key].values() for it in items}
        for metric in sorted(series[key]):
            items = series[key][metric]
            pts = [it[1] for it in items]
            if since:
                pts = [pt for pt in pts if pt.commit_time >= since]
            if last:
                pts = pts[-last:]
            if not pts:
                continue
            n_runs.update(pt.run_id for pt in pts)
            final = items[-1]
            lines.append(
                MetricLine(
                    metric,
                    items[0][0],
                    pts,
                    pts[-1].value,
                    pts[-1].change_pct,
                    _spark([pt.value for pt in pts]),
                    final[1].flagged and final[2],
                )
            )
            for pt in pts:
                if pt.flagged:
                    report.regressions.append(
                        Regression(
                            key[0],
                            key[1],
                            metric,
                            pt.run_id,
                            pt.commit,
                            pt.first_commit,
                            pt.value,
                            pt.baseline,
                            pt.noise,
                            pt.change_pct,
                            final[2] and pt.run_id == final[1].run_id,
                            pt.band,
                        )
                    )
        if lines:
            lr = last_runs.get(key, ("", None, ""))
            report.series.append(
                SeriesTrend(key[0], key[1], len(n_runs), lr[0], lr[1], lines, len(all_runs), needed)
            )
    report.regressions = shifts(report.regressions)
    return report


def _spark(values):
    return sparkline(values)


@dataclass(frozen=True)
class TrendParams:
    """What `tracehouse trend` asks for: label filters, metric names or globs, the points shown (since a
    commit time, the last N runs), and the per-run metric store (None: run_metrics of the connection)."""

    where: dict[str, str] = field(default_factory=dict)
    metrics: tuple[str, ...] = ()
    since: str | None = None
    last: int | None = None
    store: Any = None  # warehouse.store.Warehouse
    graph_nodes: tuple[str, ...] | None = None  # None: run metrics; (): every CUDA-graph node; else these
    before_reading: Callable[[list[str]], None] | None = None  # the selected run ids, before any figure


def build(con, params: TrendParams) -> TrendReport:
    """The trend's context (reports.render: every report is build(connection, params) -> context)."""
    return build_trend(
        con,
        dict(params.where),
        list(params.metrics),
        params.since,
        params.last,
        warehouse=params.store,
        graph_nodes=params.graph_nodes,
        before_reading=params.before_reading,
    )


def render_trend(report: TrendReport, fmt: str, template_dir: str | Path | None = None) -> str:
    return render("trend", report, fmt, template_dir)

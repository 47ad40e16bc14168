"""`tracehouse trend`: metrics across the runs of each series, regressions flagged (reports.trend)."""

from __future__ import annotations

import click

from tracehouse.commands.common import (
    CONTEXT_SETTINGS,
    connect,
    engine_options,
    output_option,
    parse_labels,
    report_format_option,
    template_dir_option,
    write_report,
)


@click.command(context_settings=CONTEXT_SETTINGS)
@click.option(
    "--where", "where", multiple=True, metavar="K=V", help="Only runs with this label (repeatable)."
)
@click.option(
    "--metric",
    "metrics",
    multiple=True,
    metavar="M",
    help="Only this metric; glob patterns allowed, e.g. 'category.*' (repeatable).",
)
@click.option("--since", metavar="DATE", help="Show points from this commit time on (ISO date).")
@click.option("--last", type=click.IntRange(min=1), metavar="N", help="Show the last N runs of each series.")
@click.option(
    "--graph-nodes",
    "all_nodes",
    is_flag=True,
    help="Trend every CUDA-graph node (its GPU time per step, kernels.graph_node_id) instead of the run "
    "metrics: the regressions name the nodes that got slower.",
)
@click.option(
    "--graph-node",
    "nodes",
    multiple=True,
    metavar="ID",
    help="Follow this CUDA-graph node (its node id, or GRAPH.NODE); implies --graph-nodes (repeatable).",
)
@report_format_option()
@output_option
@click.option(
    "--fail-on-regression",
    is_flag=True,
    help="Exit with code 3 when the last run of a series has a flagged regression; with code 1 when a "
    "series has too few runs for the rule to judge (it says how many it needs).",
)
@template_dir_option
@engine_options
@click.pass_context
def command(
    ctx,
    where,
    metrics,
    since,
    last,
    all_nodes,
    nodes,
    fmt,
    output,
    fail_on_regression,
    template_dir,
    engine,
    master,
):
    """Metrics across the runs of each series, ordered by commit, with regressions flagged.

    Baselines and noise always use the whole history; --since and --last only bound what is shown.

    \b
    Example:
      tracehouse trend --where series=decode-bench --metric 'category.*' --last 20 --fail-on-regression
      tracehouse trend --where series=decode-bench --engine spark --master yarn
      tracehouse trend --where series=decode-bench --graph-nodes --fail-on-regression
    """
    from tracehouse.reports.trend import gate, render_trend

    graph_nodes = tuple(nodes) if nodes or all_nodes else None
    con = connect(ctx, engine, master)
    report = trend_report(con, parse_labels(where), tuple(metrics), since, last, graph_nodes)
    write_report(render_trend(report, fmt, template_dir), output)
    if fail_on_regression:
        code, lines = gate(report)  # 3: a regression in a last run; 1: too few runs to judge
        for line in lines:
            click.echo(line, err=True)
        ctx.exit(code)


def trend_report(
    con,
    where: dict[str, str],
    metrics: tuple[str, ...],
    since: str | None,
    last: int | None,
    graph_nodes: tuple[str, ...] | None = None,
):
    """The trend of the runs with these labels (`tracehouse trend`, and `tracehouse mcp`'s trend): every
    series' metrics by commit, its regressions flagged (reports.trend.build); run_metrics from the per-run
    store where the engine's are kept there (DuckDB's), else computed on con. graph_nodes: the lines are
    CUDA-graph nodes instead (() every node, else these node ids)."""
    from tracehouse.reports.trend import TrendParams, build
    from tracehouse.reports.write import derives_first
    from tracehouse.warehouse.engine import store_of

    params = TrendParams(
        where,
        metrics,
        since,
        last,
        store=store_of(con),
        graph_nodes=graph_nodes,
        before_reading=derives_first(con),  # the selected runs derived first, as a report's are
    )
    return build(con, params)

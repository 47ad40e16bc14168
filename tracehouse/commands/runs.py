"""`tracehouse runs`: the runs, oldest first, what tells them apart and their headline figures
(reports.runs_table)."""

from __future__ import annotations

import click

from tracehouse.commands.common import (
    CONTEXT_SETTINGS,
    connect,
    format_option,
    labels_text,
    open_warehouse,
    parse_labels,
    progress_enabled,
)
from tracehouse.errors import TracehouseError
from tracehouse.output import print_rows, terminal_width


@click.command(context_settings=CONTEXT_SETTINGS)
@click.option(
    "--where", "where", multiple=True, metavar="K=V", help="Only runs with this label (repeatable)."
)
@click.option(
    "--wide",
    is_flag=True,
    help="Every column of the `runs` table beside the headline figures, no value cut.",
)
@format_option(
    ("table", "md", "csv", "json", "ndjson"),
    json_help="json records of every `runs` column with the headline figures",
)
@click.pass_context
def command(ctx, where, wide, fmt):
    """List runs, oldest first: id, when, what ran, ranks, commit, labels, files and headline figures.

    `what` is model · framework · phase · GPU; labels that differ between the listed runs come first;
    files shows the first file's name and how many more. Step time (median, ms), GPU busy % and the top
    category are of the phase with the most steps, over all ranks (run_metrics); `warn` (shown when a
    run has any) counts the kinds of warnings at ingest. The table fits the terminal (120 columns when
    not a terminal), cutting what, labels, files and top at their end; --wide and the csv, json and
    ndjson formats keep every value whole. The first listing of a run computes its figures once
    (seconds), later ones read them.

    \b
    Example:
      tracehouse runs
      tracehouse runs --where model=llama-8b --format ndjson
      tracehouse runs --format md
      tracehouse runs --wide
    """
    from tracehouse.reports.runs_table import FLEXIBLE

    filters = parse_labels(where, "--where")
    whole = wide or fmt in ("csv", "json", "ndjson")
    columns, rows = listing(open_warehouse(ctx), connect(ctx), filters, whole, progress_enabled())
    if whole:
        print_rows(columns, rows, fmt, max_width=None)
    elif fmt == "md":
        print_rows(columns, rows, fmt)
    else:
        print_rows(columns, rows, fmt, max_width=None, fit=terminal_width(), flexible=FLEXIBLE)


def listing(
    store, con, filters: dict[str, str], whole: bool, progress: bool = False
) -> tuple[list[str], list[tuple]]:
    """The runs with these labels, oldest first, as `tracehouse runs` (and `tracehouse mcp`'s runs) shows
    them: whole, every `runs` column with the headline figures (--wide, csv, json, ndjson); else the
    narrow columns of reports.runs_table. (columns, rows)."""
    from tracehouse.reports.runs_table import headlines, narrow_rows
    from tracehouse.warehouse.metrics import run_metric_rows

    columns, records = _runs(con, filters)
    if records and progress:
        click.echo("  reading the runs' figures (computed once per run)", err=True)
    figures = headlines(run_metric_rows(store, [r["run_id"] for r in records]))
    if not whole:
        return narrow_rows(records, figures)
    for r in records:
        h = figures.get(r["run_id"])
        r.update(
            headline_phase=h and h.phase,
            steps=h and h.steps,
            step_time_median_ms=h and h.step_ms,
            gpu_busy_pct=h and h.busy_pct,
            top_category=h and h.top,
        )
    return (list(records[0]) if records else columns), [tuple(r.values()) for r in records]


def _runs(con, filters: dict[str, str]) -> tuple[list[str], list[dict]]:
    """The `runs` rows with these labels, oldest first: (columns, records); none with a filter: one line
    naming the label keys there are."""
    clauses = " AND ".join("labels[?] = ?" for _ in filters)
    params = [x for kv in filters.items() for x in kv]
    cursor = con.execute(
        "SELECT * FROM runs" + (f" WHERE {clauses}" if clauses else "") + " ORDER BY ingested_at, run_id",
        params,
    )
    columns = [d[0] for d in cursor.description]
    records = [dict(zip(columns, row)) for row in cursor.fetchall()]
    if filters and not records:
        known = con.execute("SELECT DISTINCT unnest(map_keys(labels)) FROM runs ORDER BY 1").fetchall()
        raise TracehouseError(
            f"no run has {labels_text(filters)}",
            hint="label keys in the warehouse: " + (", ".join(k for (k,) in known) or "none"),
        )
    return columns, records

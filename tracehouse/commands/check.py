"""`tracehouse check`: the warehouse's invariants (the view invariant_violations)."""

from __future__ import annotations

import click

from tracehouse.commands.common import CONTEXT_SETTINGS, connect, format_option
from tracehouse.output import print_rows


@click.command(context_settings=CONTEXT_SETTINGS)
@format_option()
@click.pass_context
def command(ctx, fmt):
    """Check the warehouse's invariants; exit 1 when one is broken.

    Unique keys, non-negative durations, flow endpoints that exist, category shares that sum to 1 per
    run and phase, and the timeline identity compute + exposed comm + exposed memory + idle = span.

    \b
    Example:
      tracehouse check --format json
    """
    con = connect(ctx)
    cursor = con.execute("SELECT check_name, run_id, detail FROM invariant_violations ORDER BY ALL")
    rows = cursor.fetchall()
    if rows or fmt != "table":
        print_rows(["check_name", "run_id", "detail"], rows, fmt)
    else:
        click.echo("all invariants hold")
    if rows:
        ctx.exit(1)

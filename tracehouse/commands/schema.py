"""`tracehouse schema`: the tables and views, or one view's columns (warehouse.schema_docs)."""

from __future__ import annotations

import click

from tracehouse.commands.common import CONTEXT_SETTINGS, connect, format_option
from tracehouse.output import print_rows


@click.command(context_settings=CONTEXT_SETTINGS)
@click.argument("name", required=False, metavar="[VIEW]")
@format_option()
@click.pass_context
def command(ctx, name, fmt):
    """The tables and views you can query, with what one row is; with VIEW, its columns and their meaning.

    Views are documented in their sql/ file's header (the same text DuckDB keeps as comments:
    `select * from duckdb_columns()`); tables list their columns and types (docs/tables.md says
    what each holds).

    \b
    Example:
      tracehouse schema
      tracehouse schema gpu_timeline_run
    """
    from tracehouse.warehouse.schema_docs import describe, overview

    con = connect(ctx)
    if name is None:
        print_rows(["name", "kind", "one row is"], overview(con), fmt, max_width=110)
    else:
        print_rows(["column", "type", "meaning"], describe(con, name), fmt, max_width=200)

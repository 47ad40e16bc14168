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
    columns, rows, widest = schema_rows(connect(ctx), name)
    print_rows(columns, rows, fmt, max_width=widest)


def schema_rows(con, name: str | None = None) -> tuple[list[str], list[tuple], int]:
    """What `tracehouse schema` (and `tracehouse mcp`'s schema) shows: the tables and views with what one
    row is, or one view's columns with their meanings; (columns, rows, the table's widest value)."""
    from tracehouse.warehouse.schema_docs import describe, overview

    if name is None:
        return ["name", "kind", "one row is"], overview(con), 110
    return ["column", "type", "meaning"], describe(con, name), 200

"""`tracehouse mcp`: the warehouse's verbs as a Model Context Protocol server on stdio (tracehouse.mcp_server),
for an agent (Claude Desktop, Claude Code, any MCP client). Needs the optional extra: pip install
'tracehouse[mcp]'."""

from __future__ import annotations

import click

from tracehouse.commands.common import CONTEXT_SETTINGS, open_warehouse
from tracehouse.errors import TracehouseError


@click.command(context_settings=CONTEXT_SETTINGS)
@click.option(
    "--row-limit",
    type=click.IntRange(min=1),
    default=1000,
    show_default=True,
    help="The most rows the sql tool returns (it says when a query has more).",
)
@click.pass_context
def command(ctx, row_limit):
    """Serve the warehouse to an agent: a Model Context Protocol server on stdin/stdout.

    Its tools are the warehouse's verbs, answering as the commands do: runs (with label filters), report
    (Markdown or JSON, one phase, one section), schema, sql (read-only, the same check as `tracehouse
    sql`, at most --row-limit rows), diff (with its comparability verdict), trend (with its regressions)
    and export (a finding's window to a Perfetto file). An error is the tool's answer, in one line; the
    server keeps serving. An MCP client starts it (see the README's "Agents (MCP)"); it runs until the
    client closes stdin. Needs the optional extra: pip install 'tracehouse[mcp]'.

    \b
    Example:
      tracehouse mcp --warehouse ./tracehouse-data
      claude mcp add tracehouse -- tracehouse mcp --warehouse /data/tracehouse
    """
    try:
        import mcp  # noqa: F401 - the optional extra
    except ImportError:
        raise TracehouseError(
            "tracehouse mcp needs the Model Context Protocol SDK (the mcp package)",
            hint="pip install 'tracehouse[mcp]'",
        ) from None
    from tracehouse.mcp_server import serve

    serve(open_warehouse(ctx), row_limit)

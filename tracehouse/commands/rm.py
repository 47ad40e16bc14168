"""`tracehouse rm`: remove stored runs, each whole (warehouse.remove.remove_runs)."""

from __future__ import annotations

import sys

import click

from tracehouse.commands.common import CONTEXT_SETTINGS, connect, open_warehouse
from tracehouse.errors import TracehouseError


@click.command(context_settings=CONTEXT_SETTINGS)
@click.argument("runs", nargs=-1, required=True, metavar="RUN...")
@click.option("-y", "--yes", is_flag=True, help="Remove without asking (needed when stdin is no terminal).")
@click.pass_context
def command(ctx, runs, yes):
    """Remove stored runs: their rows in every table, what was derived from them, their runs row.

    RUN: run id, a unique prefix of one, `latest` or `latest~N`, as `report` and `diff` take it; every
    RUN is found before anything is removed (one not found: nothing is removed). Asks first on a
    terminal; elsewhere --yes is needed. Each run goes whole, even when the command is interrupted or
    killed: it is either still there with all its ranks or gone. `latest` then names the run ingested
    before, and `trend` no longer counts it. Prints what went, one line per run.

    \b
    Example:
      tracehouse rm latest
      tracehouse rm 3f2a 9b1c --yes
    """
    from tracehouse.warehouse.remove import remove_runs
    from tracehouse.warehouse.runs import resolve_run

    con = connect(ctx)
    run_ids = list(dict.fromkeys(resolve_run(con, text) for text in runs))
    con.close()
    if not yes:
        if not on_terminal():
            raise TracehouseError(
                f"rm removes {_runs_text(run_ids)} for good: add --yes to do it without a terminal"
            )
        if not click.confirm(f"remove {_runs_text(run_ids)}?", default=False, err=True):
            click.echo("nothing removed", err=True)
            ctx.exit(1)
    for removed in remove_runs(open_warehouse(ctx), run_ids):
        click.echo(
            f"removed {removed.run_id}\t{removed.n_ranks} rank(s), {removed.rows} row(s) in "
            f"{removed.files} file(s), {removed.derived} derived view(s)"
        )


def on_terminal() -> bool:
    """Whether a person can answer the question (stdin is a terminal)."""
    return sys.stdin.isatty()


def _runs_text(run_ids: list[str]) -> str:
    return ("run " if len(run_ids) == 1 else f"{len(run_ids)} runs ") + ", ".join(run_ids)

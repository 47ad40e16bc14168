"""`tracehouse derive`: compute runs' derived rows now (ingest.load.derive_runs)."""

from __future__ import annotations

import click

from tracehouse.commands.common import CONTEXT_SETTINGS, open_warehouse, progress_enabled
from tracehouse.errors import TracehouseError


@click.command(context_settings=CONTEXT_SETTINGS)
@click.argument("runs", nargs=-1)
@click.pass_context
def command(ctx, runs):
    """Compute runs' derived rows now: the kept rows of the `materialized: per_run` views (the report's
    views and step, the diff's facts, run_metrics; nothing that is there already). Ingest returns without deriving
    its new runs (unless --wait): this derives them, as a run's first report does, and every run again after
    an upgrade (small runs together, on one connection); two at once on one run take turns.
    RUNS: run ids (default: every run).

    \b
    Example:
      tracehouse derive 3f2a9c1d0b7e4a55
    """
    from tracehouse.ingest.load import derive_runs
    from tracehouse.warehouse.catalog import published_runs

    store = open_warehouse(ctx)
    known = published_runs(store)
    unknown = [r for r in runs if r not in known]
    if unknown:
        raise TracehouseError(
            f"no run {unknown[0]} in the warehouse", hint="`tracehouse runs` lists the run ids"
        )
    wanted = list(runs or known)
    outcomes = derive_runs(store, wanted, _progress(wanted[0] if len(wanted) == 1 else f"{len(wanted)} runs"))
    for run_id, ok in outcomes.items():
        click.echo(f"{run_id}\t{'derived' if ok else 'not derived'}")
    if not all(outcomes.values()):
        ctx.exit(1)


def _progress(what: str):
    """On a terminal: each view as it is kept (a 1 GB run takes minutes); None when stderr is piped."""
    if not progress_enabled():
        return None
    return lambda message: click.echo(f"  {what}: {message}", err=True)

"""`tracehouse label`: set or remove labels of a stored run (warehouse.labels.set_labels)."""

from __future__ import annotations

import click

from tracehouse.commands.common import (
    CONTEXT_SETTINGS,
    connect,
    default_derive,
    derive_runs,
    labels_text,
    open_warehouse,
    parse_labels,
)


@click.command(context_settings=CONTEXT_SETTINGS)
@click.argument("run")
@click.argument("labels", nargs=-1, required=True, metavar="K=V...")
@click.pass_context
def command(ctx, run, labels):
    """Set (K=V) or remove (K=) labels of a stored run; prints its labels.

    Ingesting the same files again stores nothing, new labels included: this changes them. Keys with
    meaning (model, commit, commit_time, series, framework, hardware) update their column too; phase
    cannot change after ingest. What was derived from the run is computed anew (labels give batch sizes,
    `hardware` the device peaks): as after ingest, left to `tracehouse derive` or the next report
    (readers compute meanwhile; $TRACEHOUSE_DERIVE=wait: before returning).

    \b
    Example:
      tracehouse label latest series=decode-bench commit=1a2b3c
      tracehouse label 3f2a config=      # removes the label `config`
    """
    from tracehouse.warehouse.labels import set_labels
    from tracehouse.warehouse.runs import resolve_run

    changes = {k: (v if v != "" else None) for k, v in parse_labels(labels, "LABELS").items()}
    run_id = resolve_run(connect(ctx), run)
    store = open_warehouse(ctx)
    new = set_labels(store, run_id, changes)  # and forgets what was derived from the old labels
    click.echo(f"{run_id}\t{labels_text(new)}")
    derive_runs(store, [run_id], default_derive())

"""`tracehouse whatif`: the predicted step time if some GPU work were K times faster (warehouse.whatif)."""

from __future__ import annotations

import click

from tracehouse.commands.common import CONTEXT_SETTINGS, connect, format_option
from tracehouse.errors import InvalidArgument
from tracehouse.output import rows_text
from tracehouse.warehouse.whatif import Change

SHOWN = (
    "rank",
    "step",
    "observed_ms",
    "predicted_ms",
    "change_ms",
    "change_pct",
    "matched",
    "path_changes",
    "peers_missing",
    "if_waiting_ms",
    "if_transfer_ms",
)


@click.command(context_settings=CONTEXT_SETTINGS)
@click.argument("run")
@click.option("--kernel", metavar="PATTERN", help="Activities whose name matches this regex (searched).")
@click.option(
    "--category", metavar="C", help="Activities of this category (activity_category: moe, gemm, ...)."
)
@click.option("--fusion", metavar="ROW", help="The chains of this fusion_match row (its pattern_id), fused.")
@click.option("--speedup", type=float, default=2.0, show_default=True, help="K: matched activities last 1/K.")
@click.option(
    "--step", "step_text", metavar="N|report", help="One step: its number, or `report` (the report's)."
)
@format_option(("table", "csv", "json", "ndjson"))
@click.pass_context
def command(ctx, run, kernel, category, fusion, speedup, step_text, fmt):
    """Replay each step's dependency graph with the matched GPU activities K times faster (or a fusion row
    fused) and print the step time observed and predicted, the change, and the critical-path segments
    whose time changed. The model is docs/interpretation.md's "What-if": each activity starts when the
    last of its dependencies (launch, stream order, event waits, host syncs) is ready plus what that
    dependency costs in the trace; with no change it reproduces the trace exactly. A fusion row's chains
    become one kernel as long as their longest member (--speedup does not apply).

    The step time is the step's GPU span (its first activity's start to its last activity's end).

    Communication made faster is its transfer: the part of a collective after the last rank of its group
    arrived. Where a sped-up collective's peers are not all in the run (ranks of the world not ingested,
    an instance not found on every rank of its group), the trace cannot tell its wait from its transfer
    (peers_missing counts those activities): where that changes the step, it is not predicted, and
    if_waiting_ms / if_transfer_ms give the step if all of their time were waiting for a peer / transfer.

    \b
    Example:
      tracehouse whatif latest --category moe --speedup 2
      tracehouse whatif latest --kernel 'nvjet|cutlass' --speedup 1.5 --step report
      tracehouse whatif latest --fusion sgl_allreduce_add_rmsnorm --format json

    On a synthesized run the simulator gives the truth: `tracehouse synth serving-decode -o /tmp/a` and
    `tracehouse synth serving-decode --slow-kernel 'GroupProblemShape:0.5' -o /tmp/b` (same seed, the MoE
    GEMMs 2x faster); the span_ns of /tmp/b's ground_truth.json steps is what `whatif --kernel
    GroupProblemShape` predicts from /tmp/a.
    """
    click.echo(
        whatif_text(connect(ctx), run, Change(kernel, category, fusion, speedup), step_text, fmt), nl=False
    )


def whatif_text(con, run: str, change: Change, step_text: str | None, fmt: str) -> str:
    """What `tracehouse whatif` prints (and the `whatif` tool of `tracehouse mcp` answers)."""
    from tracehouse.warehouse.runs import resolve_run
    from tracehouse.warehouse.whatif import whatif

    run_id = resolve_run(con, run)
    step = _step(con, run_id, step_text)
    rows = whatif(con, run_id, change, step=step)
    out = [
        (
            r["rank"],
            r["step"],
            _ms(r["observed_ns"]),
            _ms(r["predicted_ns"]),
            _ms(r["change_ns"]),
            r["change_pct"],
            r["matched"],
            r["path_changes"],
            r["peers_missing"],
            _ms(r["predicted_if_waiting_ns"]) if r["predicted_ns"] is None else None,
            _ms(r["predicted_if_transfer_ns"]) if r["predicted_ns"] is None else None,
        )
        for r in rows
    ]
    if fmt != "table":
        return rows_text(list(SHOWN), out, fmt)
    head = f"run {run_id}: {change.describe()}\n"
    text = head + rows_text(list(SHOWN), [_rounded(r) for r in out], fmt, max_width=None)
    if any(r["predicted_ns"] is None for r in rows):
        text += _peers_note(con, run_id)
    return text


def _ms(ns: int | None) -> float | None:
    return None if ns is None else ns / 1e6


def _peers_note(con, run_id: str) -> str:
    """Why some steps are not predicted: the sped-up collectives' peers that the run does not hold."""
    from tracehouse.warehouse.whatif import ranks_held

    n_ranks, world = ranks_held(con, run_id)
    if world and world > n_ranks:
        held = f"{n_ranks} of {world} ranks in the run"
    else:
        held = "no peer rank in the run" if n_ranks <= 1 else "collectives not on every rank of their group"
    return (
        f"not predicted where peers_missing > 0 changes the step ({held}): those collectives' wait for a peer "
        "cannot be told from their transfer, which alone gets faster; if_waiting_ms / if_transfer_ms: the step "
        "if all of their time were waiting / transfer\n"
    )


def _step(con, run_id: str, text: str | None) -> int | None:
    from tracehouse.warehouse.whatif import report_step

    if text is None:
        return None
    if text == "report":
        return report_step(con, run_id)
    try:
        return int(text)
    except ValueError:
        raise InvalidArgument(f"--step {text!r}: give a step number or `report`") from None


def _rounded(row: tuple) -> tuple:
    rank, step, obs, pred, change, pct, matched, path, missing, waiting, transfer = row

    def f(v, spec):
        return None if v is None else format(v, spec)

    return (
        rank,
        step,
        f(obs, ".3f"),
        f(pred, ".3f"),
        f(change, "+.3f"),
        f(pct, "+.2f"),
        matched,
        path,
        missing,
        f(waiting, ".3f"),
        f(transfer, ".3f"),
    )

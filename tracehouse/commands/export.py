"""`tracehouse export`: a run to Perfetto with the analysis tracks (reports.export.export_run)."""

from __future__ import annotations

import click

from tracehouse.commands.common import CONTEXT_SETTINGS, open_warehouse, output_option


@click.command(context_settings=CONTEXT_SETTINGS)
@click.argument("run")
@click.option("--rank", type=int, help="Only this rank (default: every rank, one process each).")
@click.option("--step", type=int, help="Only this step's window (per rank: its host window and GPU span).")
@click.option(
    "--window",
    metavar="START:END",
    help="Only slices overlapping [START, END): ns in the trace's time base (as kernels.start_ns; "
    "us / ms suffixes allowed).",
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["perfetto", "json"]),
    default="perfetto",
    show_default=True,
    help="perfetto: a protobuf .pftrace for ui.perfetto.dev; json: Chrome-trace JSON, same content.",
)
@click.option("--no-analysis", is_flag=True, help="Only the trace's own activities, no analysis tracks.")
@click.option(
    "--analysis-steps",
    type=click.IntRange(min=0),
    default=64,
    show_default=True,
    help="Draw the critical path and layers of at most this many steps per rank (the first ones).",
)
@click.option(
    "--no-align",
    is_flag=True,
    help="Keep every rank's own clock (default: ranks whose collectives end a clock offset away from "
    "the lowest rank's are shifted onto its clock; said on stderr and in the file).",
)
@output_option(required=True, help="The file to write (its folder must exist; written whole, or not at all).")
@click.pass_context
def command(ctx, run, rank, step, window, fmt, no_analysis, analysis_steps, no_align, output):
    """Export a run to Perfetto with tracehouse's analysis written into it.

    GPU activities per device and stream (overlapping ones on sub-tracks, none dropped), host ops and
    Python frames per thread, launch -> kernel flows, and analysis tracks: the critical path, idle gaps
    by cause, exposed communication, layers, data-quality flags and the report's takeaways. Every
    finding of `tracehouse report` names the export command of its window. Ranks stamped by another
    host's clock are shifted onto the lowest rank's (estimated from their collectives' ends; said on
    stderr; --no-align keeps raw times). A track that cannot be computed within the export's memory
    limit is left out and said so.

    \b
    Example:
      tracehouse export latest -o run.pftrace
      tracehouse export 3f2a --rank 0 --step 12 -o step12.pftrace
      tracehouse export 3f2a --window 1765000000000000000:1765000000004000000 --format json -o w.json
    """
    summary = export_window(
        open_warehouse(ctx),
        run,
        output,
        rank,
        step,
        window,
        fmt,
        not no_analysis,
        analysis_steps,
        not no_align,
    )
    click.echo(summary.head())
    for note in summary.notes:
        click.echo(f"note: {note}", err=True)


def export_window(
    store,
    run: str,
    output,
    rank: int | None = None,
    step: int | None = None,
    window: str | None = None,
    fmt: str = "perfetto",
    analysis: bool = True,
    analysis_steps: int = 64,
    align: bool = True,
):
    """Write the run (a rank, a step's window or a START:END window of it) to `output`, as `tracehouse
    export` (and `tracehouse mcp`'s export) does: reports.export.export_run's summary."""
    from tracehouse.reports.export import export_run, parse_window, progress_printer

    if step is not None and window:
        raise click.UsageError("give --step or --window, not both")
    return export_run(
        store,
        run,
        output,
        rank=rank,
        step=step,
        window=parse_window(window) if window else None,
        fmt=fmt,
        analysis=analysis,
        analysis_steps=analysis_steps,
        align=align,
        progress=progress_printer(),
    )

"""`tracehouse demo`: synthesize a history of runs, ingest it, write its reports (tracehouse.demo)."""

from __future__ import annotations

from pathlib import Path

import click

from tracehouse.commands.common import CONTEXT_SETTINGS, progress_enabled


@click.command(context_settings=CONTEXT_SETTINGS)
@click.argument("folder", default="tracehouse-demo", type=click.Path(path_type=Path, file_okay=False))
def command(folder):
    """Synthesize a history of runs, ingest it, and write a run report and a trend report.

    Two series of DeepSeek-style decode runs (2 and 4 ranks) over 12 commits, with an injected 8 %
    GEMM slowdown from one commit on. Prints where everything is and a three-line summary.

    \b
    Example:
      tracehouse demo              # into ./tracehouse-demo
      tracehouse --warehouse tracehouse-demo/warehouse runs
    """
    from tracehouse.demo import run_demo

    def progress(message: str) -> None:
        if progress_enabled():
            click.echo(f"  {message}", err=True)

    result = run_demo(folder, progress)
    click.echo(f"traces:    {result.folder / 'traces'}")
    click.echo(
        f"warehouse: {result.warehouse}   (query it: tracehouse --warehouse {result.warehouse} sql ...)"
    )
    for report in result.reports:
        click.echo(f"report:    {report}")
    click.echo("")
    for line in result.summary:
        click.echo(line)
    click.echo(f"({result.runs} runs in {result.seconds:.0f} s)")

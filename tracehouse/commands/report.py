"""`tracehouse report`: the run report (reports.write.write_run_report)."""

from __future__ import annotations

from pathlib import Path

import click

from tracehouse.commands.common import (
    CONTEXT_SETTINGS,
    engine_options,
    engine_warehouse,
    output_option,
    report_format_option,
    template_dir_option,
    write_report,
)


@click.command(context_settings=CONTEXT_SETTINGS)
@click.option(
    "--run",
    "run",
    required=True,
    metavar="RUN",
    help="Run id, a unique prefix of one, `latest` or `latest~N` (N runs before it).",
)
@click.option(
    "--phase", type=click.Choice(["prefill", "decode", "mixed", "unknown"]), help="Only this phase."
)
@click.option("--mapping", metavar="RUN", help="A graph-off run of the same workload (mapping/formal mode).")
@report_format_option()
@output_option
@template_dir_option
@click.option(
    "--with-trace",
    is_flag=True,
    help="Also export the step the report shows (every rank) to a Perfetto file beside -o, linked "
    "from the HTML (see `tracehouse export`).",
)
@engine_options
@click.pass_context
def command(ctx, run, phase, mapping, fmt, output, template_dir, with_trace, engine, master):
    """The run report: kernels per phase, overlap and fusion opportunities, and one step's breakdown.

    Markdown for reading in a terminal or a PR, one self-contained HTML file with charts, or JSON
    with the same content for scripts.

    \b
    Example:
      tracehouse report --run latest
      tracehouse report --run 3f2a --format html -o run.html
      tracehouse report --run latest --engine spark --master spark://head:7077
      tracehouse report --run latest --format html -o run.html --with-trace   # + run.pftrace
    """
    from tracehouse.reports.write import write_run_report

    if with_trace and output is None:
        raise click.UsageError("--with-trace writes the trace beside the report: give -o FILE")
    text = write_run_report(
        engine_warehouse(ctx),
        run,
        fmt,
        None,
        phase,
        mapping,
        template_dir,
        engine=engine,
        master=master,
        trace_path=Path(output).with_suffix(".pftrace") if with_trace else None,
    )
    write_report(text, output)

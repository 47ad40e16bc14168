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
@click.argument("run_arg", required=False, metavar="RUN")
@click.option(
    "--run",
    "run",
    metavar="RUN",
    help="The run, as the argument RUN (kept for scripts): run id, a unique prefix of one, `latest` or "
    "`latest~N` (N runs before it).",
)
@click.option(
    "--phase", type=click.Choice(["prefill", "decode", "mixed", "unknown"]), help="Only this phase."
)
@click.option(
    "--mapping",
    metavar="RUN",
    help="A graph-off run of the same workload (mapping/formal mode): Python locations of graph replays "
    "from it.",
)
@report_format_option(extra=("triage",))
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
def command(ctx, run_arg, run, phase, mapping, fmt, output, template_dir, with_trace, engine, master):
    """The run report: kernels per phase, overlap and fusion opportunities, and one step's breakdown.

    RUN: run id, a unique prefix of one, `latest` or `latest~N` (N runs before it), as `diff`,
    `export` and `label` take it (`--run RUN` too). Markdown for reading in a terminal or a PR, one
    self-contained HTML file with charts, or JSON with the same content for scripts. `--format triage`
    prints the kernel, overlap-opportunity and fuse-opportunity tables per phase as Markdown, with the
    columns of the llm-torch-profiler-analysis skill's Triage View (docs/interpretation.md).

    \b
    Example:
      tracehouse report latest
      tracehouse report 3f2a --format html -o run.html
      tracehouse report latest --engine spark --master spark://head:7077
      tracehouse report latest --format html -o run.html --with-trace   # + run.pftrace
      tracehouse report latest --format triage --mapping latest~1   # sites from a graph-off run
    """
    from tracehouse.reports.write import write_run_report, write_triage_report

    if run_arg is not None and run is not None and run_arg != run:
        raise click.UsageError(f"two runs given: {run_arg} and --run {run}; give one")
    run = run_arg or run
    if run is None:
        raise click.UsageError(
            "give the run: tracehouse report RUN (e.g. latest; `tracehouse runs` lists them)"
        )

    if fmt == "triage":
        if with_trace:
            raise click.UsageError(
                "--with-trace goes with the run report (md, html, json), not --format triage"
            )
        text = write_triage_report(
            engine_warehouse(ctx), run, phase, mapping, template_dir, engine=engine, master=master
        )
        write_report(text, output)
        return
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

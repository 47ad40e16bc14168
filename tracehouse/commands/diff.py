"""`tracehouse diff`: what changed between two runs (reports.diff)."""

from __future__ import annotations

import click

from tracehouse.commands.common import (
    CONTEXT_SETTINGS,
    connect,
    engine_options,
    output_option,
    report_format_option,
    template_dir_option,
    write_report,
)


@click.command(context_settings=CONTEXT_SETTINGS)
@click.argument("base")
@click.argument("target")
@report_format_option()
@output_option
@template_dir_option
@engine_options
@click.pass_context
def command(ctx, base, target, fmt, output, template_dir, engine, master):
    """What changed between two runs: per category and kernel, time per step, delta and ratio.

    First a verdict: whether the runs compare step for step (same model, hardware, phases, batch
    sizes, steps; both runs' data-quality flags). When a run has no step markers (its one step is
    the whole trace window) the diff compares per launch and says so. Per kernel, the change is split
    into the change of time per launch and the change of launch count.

    BASE and TARGET are run ids, unique prefixes of one, `latest` or `latest~N` (the N-th run
    ingested before the latest). Kernels are matched by exact name, then by normalized name (template
    arguments, tile sizes, hashes removed), then by category.

    \b
    Example:
      tracehouse diff latest~1 latest
      tracehouse diff 3f2a latest --format html -o diff.html
      tracehouse diff 3f2a latest --engine spark
    """
    con = connect(ctx, engine, master)
    write_report(diff_text(con, base, target, fmt, template_dir), output)


def diff_text(con, base: str, target: str, fmt: str, template_dir=None) -> str:
    """The diff of two runs in this format (md, html, json), its comparability verdict first: what `tracehouse
    diff` (and `tracehouse mcp`'s diff) writes. The two runs are derived first where they are not
    (reports.write.derives_first), so each run's figures come from its kept rows (warehouse.derived)."""
    from tracehouse.reports.diff import DiffParams, build, render_diff
    from tracehouse.reports.write import derives_first

    params = DiffParams(base, target, before_reading=derives_first(con))
    return render_diff(build(con, params), fmt, template_dir)

"""`tracehouse synth`: write a synthetic run or situation with its ground truth (synth.write_scenario,
synth.situations.write_situation)."""

from __future__ import annotations

from pathlib import Path

import click

from tracehouse.commands.common import CONTEXT_SETTINGS


@click.command(context_settings=CONTEXT_SETTINGS)
@click.argument("scenario", required=False)
@click.option(
    "--list", "list_all", is_flag=True, help="List the scenarios and situations, one a line, and exit."
)
@click.option(
    "-o",
    "--out",
    "out",
    type=click.Path(path_type=Path, file_okay=False),
    help="Folder to write the run into (trace files, capture_traces/, ground_truth.json; gzipped, .json.gz, when over 8 MB).",
)
@click.option("--ranks", default=2, show_default=True, help="Ranks (one trace file each).")
@click.option("--steps", default=4, show_default=True, help="Steps (decode iterations / training steps).")
@click.option("--layers", default=4, show_default=True, help="Transformer layers per step.")
@click.option(
    "--vendor",
    type=click.Choice(["nvidia", "amd"]),
    default="nvidia",
    show_default=True,
    help="GPU vendor of the synthetic trace: CUDA kernels and runtime calls, or HIP.",
)
@click.option("--seed", default=0, show_default=True, help="Same seed, same bytes.")
@click.option(
    "--target-size",
    help="Grow the run to about this much uncompressed JSON (e.g. 2GB), streaming; progress on a terminal.",
)
@click.option("--straggler-rank", help="R:US - rank R arrives US µs late at every collective.")
@click.option("--host-stall-us", default=0.0, help="A host stall of this many µs before some steps.")
@click.option("--slow-kernel", help="REGEX:FACTOR - kernels matching REGEX run FACTOR times longer.")
@click.option(
    "--write-ranks",
    metavar="R,R...",
    help="Write only these ranks' trace files (every rank is simulated): a run holding part of its world.",
)
def command(scenario, list_all, out, **shape):
    """Write a realistic synthetic run, plus ground_truth.json with every figure it should give.

    SCENARIO is a whole run (serving-decode, serving-prefill, training: the options below shape it), a
    situation: a small trace of one shape that analyses get wrong (a blocking copy at the end of a step,
    a DataLoader stall, eager attention ...), whose ground_truth.json says what a correct analysis
    concludes, or a sessions layout: a folder of several profiling sessions (two-sessions-sglang ...),
    whose ground_truth.json says which files form which run. `--list` names them all.

    \b
    Example:
      tracehouse synth serving-decode --ranks 4 --slow-kernel 'nvjet:1.08' -o /tmp/decode-run
      tracehouse ingest /tmp/decode-run
      tracehouse synth training --ranks 8 --straggler-rank 3:900 --write-ranks 0 -o /tmp/rank0-of-8
      tracehouse synth --list
      tracehouse synth blocking-d2h-copy -o /tmp/blocking-copy
    """
    from tracehouse.synth import SCENARIOS

    if list_all or not scenario:
        _list(list_all)
        return
    if out is None:
        raise click.UsageError("-o DIR is required: the folder to write the run into")
    from tracehouse.synth.sessions import LAYOUTS, write_layout

    if scenario in LAYOUTS:  # a folder of several profiling sessions (ground truth: which files are a run)
        click.echo(str(write_layout(scenario, out)))
        return
    if scenario not in SCENARIOS:
        from tracehouse.synth.situations import write_situation

        try:
            click.echo(str(write_situation(scenario, out)))
        except ValueError as exc:
            raise click.BadParameter(f"{exc}; or a scenario: {', '.join(SCENARIOS)}", param_hint="SCENARIO")
        return
    click.echo(str(_write_run(scenario, out, **shape)))


def _list(list_all: bool) -> None:
    from tracehouse.synth import SCENARIOS
    from tracehouse.synth.sessions import LAYOUTS
    from tracehouse.synth.situations import SITUATIONS

    if not list_all:
        raise click.UsageError("name a SCENARIO or a situation (tracehouse synth --list names them)")
    for name in SCENARIOS:
        click.echo(f"{name}\tscenario")
    for name, sit in sorted(SITUATIONS.items()):
        click.echo(f"{name}\tsituation: {sit.summary}")
    for name, lay in sorted(LAYOUTS.items()):
        click.echo(f"{name}\tsessions: {lay.summary}")


def _write_run(
    scenario,
    out,
    ranks,
    steps,
    layers,
    vendor,
    seed,
    target_size,
    straggler_rank,
    host_stall_us,
    slow_kernel,
    write_ranks,
) -> Path:
    from tracehouse.synth import truth_path, write_scenario
    from tracehouse.synth.progress import size_progress

    straggler = _pair(straggler_rank, "R:US")
    slow = _pair(slow_kernel, "REGEX:FACTOR")
    size = _size(target_size) if target_size else None
    progress = size_progress() if size else None  # on a terminal only: a --target-size run takes minutes
    try:
        path = write_scenario(
            scenario,
            out,
            ranks=ranks,
            steps=steps,
            layers=layers,
            vendor=vendor,
            seed=seed,
            target_size=size,
            straggler=(int(straggler[0]), straggler[1]) if straggler else None,
            host_stall_us=host_stall_us,
            slow_kernel=slow,
            progress=progress,
            write_ranks=_ranks(write_ranks),
        )
    except ValueError as exc:
        raise click.BadParameter(str(exc))
    if progress is not None:
        progress.done(f"; ground truth: {truth_path(path).name}")
    return path


def _ranks(text: str | None) -> tuple[int, ...] | None:
    """'0,2' -> (0, 2), for --write-ranks."""
    if not text:
        return None
    try:
        return tuple(int(x) for x in text.split(","))
    except ValueError:
        raise click.BadParameter(
            f"{text!r}: give rank numbers separated by commas", param_hint="--write-ranks"
        )


def _pair(text: str | None, what: str, cast=float):
    """'A:B' -> (A, cast(B)), for --straggler-rank and --slow-kernel."""
    if text is None:
        return None
    head, sep, tail = text.rpartition(":")
    try:
        if not sep:
            raise ValueError
        return head, cast(tail)
    except ValueError:
        raise click.BadParameter(f"{text!r} is not {what}")


def _size(text: str) -> int:
    """'500MB', '2GB', '1.5G', '300KB', '1000000' -> bytes (decimal units); a bad or non-positive size: one line."""
    units = {"": 1, "B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "K": 10**3, "M": 10**6, "G": 10**9}
    number = text.strip().upper()
    unit = next((u for u in sorted(units, key=len, reverse=True) if u and number.endswith(u)), "")
    try:
        size = int(float(number[: len(number) - len(unit)]) * units[unit])
    except (ValueError, OverflowError):  # not a number; nan; inf
        size = None
    if size is None or size <= 0:
        raise click.BadParameter(f"{text!r} is not a size like 500MB or 2GB", param_hint="--target-size")
    return size

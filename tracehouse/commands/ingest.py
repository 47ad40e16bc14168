"""`tracehouse ingest`: trace files or profile folders into the warehouse (ingest.load.ingest_paths). Each new
run is published and left underived (its readers compute; `tracehouse derive` or its first report keeps the
rows), or derived in this process before returning with --wait (ingest.load.derive_one)."""

from __future__ import annotations

from pathlib import Path

import click

from tracehouse.commands.common import (
    CONTEXT_SETTINGS,
    connect,
    default_derive,
    derive_runs,
    labels_text,
    open_warehouse,
    parse_labels,
    progress_enabled,
)
from tracehouse.errors import TracehouseError


@click.command(context_settings=CONTEXT_SETTINGS)
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--label", "labels", multiple=True, metavar="K=V", help="A label for the run (repeatable).")
@click.option("--commit", help="The commit the run was taken at (same as --label commit=SHA).")
@click.option(
    "--capture",
    type=click.Path(path_type=Path, file_okay=False),
    help="Folder of capture traces (default: capture_traces/ beside the traces).",
)
@click.option(
    "--wait",
    "derive",
    flag_value="wait",
    help="Derive the new runs' rows (kept views, report steps) before returning (default: not; "
    "$TRACEHOUSE_DERIVE=wait makes it the default).",
)
@click.option(
    "--no-derive",
    "--no-analyses",
    "derive",
    flag_value="none",
    help="Derive nothing (the default): readers compute; `tracehouse derive` or the first report derives "
    "the run.",
)
@click.option(
    "--requests",
    "requests_file",
    type=click.Path(path_type=Path, dir_okay=False),
    help="A serving run's requests per step (.csv, .jsonl or .json: step, request_id, tokens, kv_tokens, "
    "phase, rank), for the per-request cost (view request_cost); replaces the run's requests if it "
    "is stored already. One run per call.",
)
@click.option(
    "--one-run",
    is_flag=True,
    help="Each directory, and the files named together, is one run, whatever sessions its files say.",
)
@click.pass_context
def command(ctx, paths, labels, commit, capture, derive, requests_file, one_run):
    """Ingest trace files or profile directories into the warehouse.

    Each profiling session is one run (its files are the ranks): the files of a directory, or named
    together, are grouped by what they say (session id and time in the name, rank and world size,
    process, Nsight Systems session), each group said on stderr; --one-run keeps them one run.
    The same files ingested twice give the same run id and store nothing new. Prints the run ids.
    Ingest publishes each run and returns without deriving it: every query reads the same views at
    once, computed; `tracehouse derive` (or the run's first `tracehouse report`, which derives its
    runs before reading) keeps the rows of every `materialized: per_run` view (the report's, the
    diff's, run_metrics), which later queries and reports then read: the same rows either way.
    --wait derives the new runs before returning (default: $TRACEHOUSE_DERIVE, wait or none; else none).

    \b
    Example:
      tracehouse ingest ./sglang-profile/ --label model=DeepSeek-R1 --label config=tp8-ep8 --commit 1a2b3c
      tracehouse ingest ./sglang-profile/ --requests ./sglang-profile/requests.csv
    """
    label_map = parse_labels(labels)
    if commit:
        label_map["commit"] = commit
    _check_paths(paths, capture)
    requests = _read_requests(requests_file, paths, capture, one_run)
    derive = derive or default_derive()
    store = open_warehouse(ctx, must_exist=False)
    # with --requests, the run is derived once they are attached (its diff facts read them)
    outcomes = _ingest(store, paths, label_map, capture, "none" if requests is not None else derive, one_run)
    failed = 0
    new_runs = []
    for outcome in outcomes:
        for problem in outcome.problems:
            click.echo(f"error: {problem.message}", err=True)
            failed += 1
        if outcome.run_id is None:
            continue
        if outcome.stored:
            new_runs.append(outcome.run_id)
        state = "stored" if outcome.stored else "already in the warehouse"
        click.echo(f"{outcome.run_id}\t{state}\t{len(outcome.files) - len(outcome.problems)} file(s)")
        if not outcome.stored and label_map:
            _note_unchanged_labels(ctx, outcome.run_id, label_map)
        for key, count in sorted(outcome.warnings.items()):
            click.echo(f"  warning: {key}: {count}", err=True)
        if requests is not None:
            _attach_requests(store, outcome.run_id, requests, requests_file, replaced=not outcome.stored)
            derive_runs(store, [outcome.run_id], derive)  # what was derived before them is forgotten
    if derive == "none" and new_runs and progress_enabled():  # a hint for a person: quiet when piped
        _note_not_derived(new_runs)
    if failed:
        ctx.exit(1)


def _note_not_derived(run_ids: list[str]) -> None:
    """The closing line on a terminal (stderr: stdout keeps the run ids): the new runs are not derived, and what
    derives them."""
    derive = "tracehouse derive " + " ".join(run_ids) if len(run_ids) <= 3 else "tracehouse derive"  # all
    click.echo(
        f"  not derived yet: queries compute the report views; `{derive}` (or the first "
        "`tracehouse report`) keeps their rows for later readers (`ingest --wait`: derive before returning)",
        err=True,
    )


def _check_paths(paths, capture) -> None:
    if capture is not None and not capture.is_dir():
        raise TracehouseError(
            f"--capture {capture}: no such folder",
            hint="a capture_traces/ folder beside the traces is found without --capture",
        )
    for path in paths:
        if not path.exists():
            raise TracehouseError(
                f"{path}: no such file or directory",
                hint="give your profile directory or trace files: *.json, *.json.gz",
            )


def _read_requests(requests_file, paths, capture, one_run):
    """--requests, read and checked before any work: a bad file stops nothing half-done."""
    if requests_file is None:
        return None
    from tracehouse.ingest.requests import read_requests
    from tracehouse.ingest.run import plan_runs

    requests = read_requests(requests_file)
    if len(plan_runs(list(paths), capture, one_run)) != 1:
        raise click.UsageError("--requests describes one run: give the files or the folder of one run")
    return requests


def _ingest(store, paths, label_map, capture, derive, one_run):
    """ingest_paths, with a live line per rank on a terminal (bytes read, %, ETA); nothing when piped."""
    from tracehouse.ingest.load import ingest_paths

    if not progress_enabled():
        return ingest_paths(store, list(paths), label_map, capture, None, derive=derive, one_run=one_run)
    from tracehouse.ingest.progress import IngestProgress
    from tracehouse.ingest.run import assign_ranks, plan_runs

    files = [
        (f, r)
        for plan in plan_runs(list(paths), capture, one_run)
        for f, r in zip(plan.files, assign_ranks(plan.files)[0])
    ]
    with IngestProgress(store.root, files) as shown:
        return ingest_paths(
            store, list(paths), label_map, capture, shown.message, derive=derive, one_run=one_run
        )


def _attach_requests(store, run_id: str, requests, path: Path, replaced: bool) -> None:
    from tracehouse.ingest.requests import attach_requests

    counts = attach_requests(store, run_id, requests)
    verb = "replaced by" if replaced else "from"
    click.echo(f"  requests of {run_id} {verb} {path}: {counts['rows']} row(s)", err=True)
    if counts["unmatched"]:
        click.echo(
            f"  warning: requests rows whose step the run does not have: {counts['unmatched']} (see "
            f"`tracehouse sql \"select rank, step, name from steps where run_id = '{run_id}'\"`)",
            err=True,
        )


def _note_unchanged_labels(ctx, run_id: str, wanted: dict[str, str]) -> None:
    """Re-ingest stores nothing, labels included: say so when they differ, and how to set them."""
    con = connect(ctx)
    row = con.execute("SELECT labels FROM runs WHERE run_id = ?", [run_id]).fetchone()
    stored = dict(row[0] or {}) if row else {}
    differ = {k: v for k, v in wanted.items() if stored.get(k) != v}
    if differ:
        args = " ".join(f"{k}={v}" for k, v in sorted(differ.items()))
        click.echo(
            f"  note: labels not changed (the run was ingested before, with {labels_text(stored)}); "
            f"to set them: tracehouse label {run_id} {args}",
            err=True,
        )

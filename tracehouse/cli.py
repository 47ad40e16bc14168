"""tracehouse: a SQL warehouse for GPU profiler (Kineto / PyTorch profiler) traces.

Thin on purpose: each command parses its options, calls one function, and prints the result.
"""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path

import click

from tracehouse.errors import TracehouseError
from tracehouse.output import error_line, print_answers, print_rows

CONTEXT_SETTINGS = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


def _warehouse(ctx: click.Context, must_exist: bool = True):
    """The warehouse; a command that reads one refuses a folder that holds none (a typo'd --warehouse
    would otherwise be created, empty, and answer 0 rows). Only ingest creates it."""
    from warehouse.store import Warehouse

    store = Warehouse(ctx.obj["warehouse"])
    if must_exist and not store.exists():
        where = "TRACEHOUSE_WAREHOUSE" if ctx.obj.get("warehouse_from_env") else "--warehouse"
        raise TracehouseError(
            f"no warehouse at {ctx.obj['warehouse']} ({where})",
            hint="check the path, or create one with `tracehouse ingest PATH`",
        )
    return store


def _engine_warehouse(ctx: click.Context):
    """The warehouse as an engine reads it: a URI (s3a://, gs://, hdfs://) as it is, for the engine to read
    or refuse (warehouse.engine.open); a local folder must hold a warehouse."""
    from warehouse.engine import is_uri

    root = ctx.obj["warehouse"]
    return root if is_uri(root) else _warehouse(ctx)


def _connect(ctx: click.Context, engine: str = "duckdb", master: str | None = None):
    """The command's connection: warehouse.engine.open, the one connection factory (DuckDB or Spark)."""
    from warehouse.engine import open as open_connection

    return open_connection(_engine_warehouse(ctx), engine, master=master)


def _progress_enabled() -> bool:
    return sys.stderr.isatty()


def engine_options(fn):
    """--engine and --master, the same on every command that reads the views (the engines: warehouse.engine)."""
    from warehouse.engine import ENGINES

    fn = click.option(
        "--master",
        envvar="SPARK_MASTER",
        default=None,
        help="Spark master URL for --engine spark (env SPARK_MASTER; default local[2]).",
    )(fn)
    return click.option(
        "--engine",
        type=click.Choice(list(ENGINES)),
        default="duckdb",
        show_default=True,
        help="Query engine: spark runs the same views, transpiled by sqlglot, on a SparkSession "
        "(pip install 'tracehouse[spark]'; Java 17+).",
    )(fn)


_FORMAT_HELP = {
    "table": "an aligned table for people",
    "csv": "csv for scripts",
    "json": "json records for scripts",
    "md": "Markdown for a terminal or a PR",
    "html": "one self-contained HTML page",
}


def format_option(choices=("table", "csv", "json"), default="table", json_help: str | None = None):
    """--format, its help naming exactly the choices this command has."""
    parts = [json_help if c == "json" and json_help else _FORMAT_HELP[c] for c in choices]
    return click.option(
        "--format",
        "fmt",
        type=click.Choice(choices),
        default=default,
        show_default=True,
        help="Output format: " + "; ".join(f"{c}: {h}" for c, h in zip(choices, parts)) + ".",
    )


def output_option(
    fn=None,
    *,
    required: bool = False,
    help: str = "Write the report to this file (its folder must exist); default: stdout.",
):
    """-o FILE, checked before any work: a folder that does not exist fails at once, in one line."""
    if fn is None:
        return lambda f: output_option(f, required=required, help=help)

    def check(ctx, param, value):
        if value is None:
            return None
        path = Path(value)
        if path.is_dir():
            raise TracehouseError(f"-o {value}: is a folder", hint="give a file name, e.g. -o report.html")
        if not path.parent.is_dir():
            raise TracehouseError(
                f"-o {value}: the folder {path.parent} does not exist",
                hint="create it first or write elsewhere",
            )
        return path

    return click.option(
        "-o",
        "--output",
        type=click.Path(dir_okay=False, path_type=Path),
        callback=check,
        required=required,
        help=help,
    )(fn)


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("tracehouse")
    except PackageNotFoundError:  # running from a checkout that was never installed
        import tomllib

        return tomllib.loads((Path(__file__).resolve().parent.parent / "pyproject.toml").read_text())[
            "project"
        ]["version"]


def _print_version(ctx: click.Context, _param, value: bool) -> None:
    """--version, read when asked (importlib.metadata costs every other command 0.02-0.09 s at import)."""
    if value and not ctx.resilient_parsing:
        click.echo(f"tracehouse {_version()}")
        ctx.exit()


class TracehouseGroup(click.Group):
    """Turns expected failures into one line on stderr and exit code 1; tracebacks only with --debug."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except TracehouseError as exc:
            if ctx.obj and ctx.obj.get("debug"):
                raise
            click.echo(error_line(exc), err=True)
            ctx.exit(1)


@click.group(cls=TracehouseGroup, context_settings=CONTEXT_SETTINGS)
@click.option(
    "--warehouse",
    envvar="TRACEHOUSE_WAREHOUSE",
    default="./tracehouse-data",
    show_default=True,
    help="Warehouse folder (env TRACEHOUSE_WAREHOUSE).",
)
@click.option("--debug", is_flag=True, help="Show tracebacks for errors.")
@click.option(
    "-V",
    "--version",
    is_flag=True,
    expose_value=False,
    is_eager=True,
    callback=_print_version,
    help="Show the version and exit.",
)
@click.pass_context
def main(ctx: click.Context, warehouse: str, debug: bool) -> None:
    """A SQL warehouse for GPU profiler traces.

    Ingest PyTorch-profiler (Kineto) traces once, then ask questions in SQL.

    \b
    Example:
      tracehouse ingest ./profiles/run-42 --label model=llama-8b --commit abc123
      tracehouse runs
      tracehouse sql "select name, sum(dur_ns)/1e6 as ms from kernels group by 1 order by 2 desc limit 10"
    """
    ctx.ensure_object(dict)
    ctx.obj["warehouse"] = warehouse
    ctx.obj["warehouse_from_env"] = (
        ctx.get_parameter_source("warehouse") == click.core.ParameterSource.ENVIRONMENT
    )
    ctx.obj["debug"] = debug


def _parse_labels(items: tuple[str, ...], hint: str = "--label") -> dict[str, str]:
    labels = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise click.BadParameter(f"{item!r} is not KEY=VALUE", param_hint=hint)
        labels[key.strip()] = value
    return labels


@main.command(context_settings=CONTEXT_SETTINGS)
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
    help="Derive the new runs' rows (kept views, report steps) before returning.",
)
@click.option(
    "--no-derive",
    "--no-analyses",
    "derive",
    flag_value="none",
    help="Derive nothing (readers compute; the first report derives the run).",
)
@click.option(
    "--requests",
    "requests_file",
    type=click.Path(path_type=Path, dir_okay=False),
    help="A serving run's requests per step (.csv, .jsonl or .json: step, request_id, tokens, kv_tokens, "
    "phase, rank), for the per-request cost (view request_cost); replaces the run's requests if it "
    "is stored already. One run per call.",
)
@click.pass_context
def ingest(ctx, paths, labels, commit, capture, derive, requests_file):
    """Ingest trace files or profile directories into the warehouse.

    A directory is one run (its files are the ranks); files named together are one run.
    The same files ingested twice give the same run id and store nothing new. Prints the run ids.
    Once a run is published, ingest returns and `tracehouse derive RUN` computes its derived rows in the
    background (the kept rows of every `materialized: per_run` view: the report's, the diff's, run_metrics),
    which later queries and reports read; a query asked before they are kept computes them itself, with
    the same rows. --wait derives before returning, --no-derive not at all (default: background, or
    $TRACEHOUSE_DERIVE: wait, background or none).

    \b
    Example:
      tracehouse ingest ./sglang-profile/ --label model=DeepSeek-R1 --label config=tp8-ep8 --commit 1a2b3c
      tracehouse ingest ./sglang-profile/ --requests ./sglang-profile/requests.csv
    """
    from ingest.load import ingest_paths

    label_map = _parse_labels(labels)
    if commit:
        label_map["commit"] = commit
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

    from tracehouse.client import start_server

    start_server()  # warm by the time the run is published: its first questions are answered at once
    requests = None
    if requests_file is not None:  # read and checked before any work: a bad file stops nothing half-done
        from ingest.requests import read_requests
        from ingest.run import plan_runs

        requests = read_requests(requests_file)
        if len(plan_runs(list(paths), capture)) != 1:
            raise click.UsageError("--requests describes one run: give the files or the folder of one run")

    derive = derive or _default_derive()
    # with --requests, the run is derived once they are attached (its diff facts read them)
    now = "none" if requests is not None else derive
    store = _warehouse(ctx, must_exist=False)
    if _progress_enabled():  # a terminal: a live line per rank (bytes read, %, ETA); nothing when piped
        from ingest.progress import IngestProgress
        from ingest.run import assign_ranks, plan_runs

        files = [
            (f, r)
            for plan in plan_runs(list(paths), capture)
            for f, r in zip(plan.files, assign_ranks(plan.files)[0])
        ]
        with IngestProgress(store.root, files) as shown:
            outcomes = ingest_paths(store, list(paths), label_map, capture, shown.message, derive=now)
    else:
        outcomes = ingest_paths(store, list(paths), label_map, capture, None, derive=now)
    failed = 0
    for outcome in outcomes:
        for problem in outcome.problems:
            click.echo(f"error: {problem.message}", err=True)
            failed += 1
        if outcome.run_id is None:
            continue
        state = "stored" if outcome.stored else "already in the warehouse"
        click.echo(f"{outcome.run_id}\t{state}\t{len(outcome.files) - len(outcome.problems)} file(s)")
        if not outcome.stored and label_map:
            _note_unchanged_labels(ctx, outcome.run_id, label_map)
        for key, count in sorted(outcome.warnings.items()):
            click.echo(f"  warning: {key}: {count}", err=True)
        if requests is not None:
            _attach_requests(store, outcome.run_id, requests, requests_file, replaced=not outcome.stored)
            _derive(store, [outcome.run_id], derive)  # what was derived before them is forgotten
    if failed:
        ctx.exit(1)


def _derive(store, run_ids: list[str], mode: str) -> None:
    """Derive these runs' rows as `mode` says: 'wait' (now), 'background' (a detached process), 'none'."""
    if mode == "none":
        return
    from ingest.load import derive_one, start_derive

    if mode == "wait":
        for run_id in run_ids:
            derive_one(store, run_id)
    else:
        start_derive(store, run_ids)


def _default_derive() -> str:
    """ingest's default for its new runs' derived rows: $TRACEHOUSE_DERIVE, else background."""
    import os

    from ingest.load import DERIVE_CHOICES

    value = os.environ.get("TRACEHOUSE_DERIVE") or "background"
    if value not in DERIVE_CHOICES:
        raise TracehouseError(
            f"TRACEHOUSE_DERIVE={value}: not a choice", hint="one of " + ", ".join(DERIVE_CHOICES)
        )
    return value


@main.command(context_settings=CONTEXT_SETTINGS)
@click.argument("runs", nargs=-1)
@click.option("--background", is_flag=True, hidden=True, help="Started by ingest: at a lower priority.")
@click.pass_context
def derive(ctx, runs, background):
    """Compute runs' derived rows now: the kept rows of the `materialized: per_run` views (the report's
    views and step, the diff's facts, run_metrics; nothing that is there already). Ingest starts this in the background for its
    new runs; two at once on one run take turns. RUNS: run ids (default: every run).

    \b
    Example:
      tracehouse derive 3f2a9c1d0b7e4a55
    """
    import os

    from ingest.load import derive_one
    from warehouse.catalog import published_runs

    if background:  # behind the user's own commands: the CPU only when they leave it idle
        import time

        from tracehouse.client import seconds_env

        # and after the questions that follow an ingest at once (a run's readers compute what is not kept
        # yet: on 2 cores, a derive beside them, even at idle priority, slowed them by 0.15-0.3 s)
        time.sleep(seconds_env("TRACEHOUSE_DERIVE_DELAY", 3.0))
        try:
            os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))  # Linux; inherited by DuckDB's threads
        except (AttributeError, OSError):
            os.nice(19)
    store = _warehouse(ctx)
    known = published_runs(store)
    unknown = [r for r in runs if r not in known]
    if unknown:
        raise TracehouseError(
            f"no run {unknown[0]} in the warehouse", hint="`tracehouse runs` lists the run ids"
        )

    def progress(message: str) -> None:  # on a terminal: each view as it is kept (a 1 GB run takes minutes)
        if _progress_enabled() and not background:
            click.echo(f"  {run_id}: {message}", err=True)

    failed = 0
    for run_id in runs or known:
        ok = derive_one(store, run_id, progress)
        failed += not ok
        click.echo(f"{run_id}\t{'derived' if ok else 'not derived'}")
    if failed:
        ctx.exit(1)


def _attach_requests(store, run_id: str, requests, path: Path, replaced: bool) -> None:
    from ingest.requests import attach_requests

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
    con = _connect(ctx)
    row = con.execute("SELECT labels FROM runs WHERE run_id = ?", [run_id]).fetchone()
    stored = dict(row[0] or {}) if row else {}
    differ = {k: v for k, v in wanted.items() if stored.get(k) != v}
    if differ:
        args = " ".join(f"{k}={v}" for k, v in sorted(differ.items()))
        click.echo(
            f"  note: labels not changed (the run was ingested before, with {_labels_text(stored)}); "
            f"to set them: tracehouse label {run_id} {args}",
            err=True,
        )


def _labels_text(labels: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted(labels.items())) or "no labels"


@main.command(context_settings=CONTEXT_SETTINGS)
@click.argument("run")
@click.argument("labels", nargs=-1, required=True, metavar="K=V...")
@click.pass_context
def label(ctx, run, labels):
    """Set (K=V) or remove (K=) labels of a stored run; prints its labels.

    Ingesting the same files again stores nothing, new labels included: this changes them. Keys with
    meaning (model, commit, commit_time, series, framework, hardware) update their column too; phase
    cannot change after ingest. What was derived from the run is computed anew (labels give batch sizes,
    `hardware` the device peaks): in the background, as after ingest ($TRACEHOUSE_DERIVE).

    \b
    Example:
      tracehouse label latest series=decode-bench commit=1a2b3c
      tracehouse label 3f2a config=      # removes the label `config`
    """
    from warehouse.labels import set_labels
    from warehouse.runs import resolve_run

    changes = {k: (v if v != "" else None) for k, v in _parse_labels(labels, "LABELS").items()}
    run_id = resolve_run(_connect(ctx), run)
    store = _warehouse(ctx)
    new = set_labels(store, run_id, changes)  # and forgets what was derived from the old labels
    click.echo(f"{run_id}\t{_labels_text(new)}")
    _derive(store, [run_id], _default_derive())


@main.command(context_settings=CONTEXT_SETTINGS)
@click.option(
    "--where", "where", multiple=True, metavar="K=V", help="Only runs with this label (repeatable)."
)
@click.option(
    "--wide", is_flag=True, help="Every column of the `runs` table instead of the headline figures."
)
@format_option(json_help="json records of every `runs` column with the headline figures")
@click.pass_context
def runs(ctx, where, wide, fmt):
    """List runs, oldest first: when, what ran, ranks, steps, step time, GPU busy %, top category.

    Step time (median, ms), GPU busy % and the top category are of the phase with the most steps,
    over all ranks (run_metrics); `warn` counts the kinds of warnings at ingest. The first listing
    of a run computes its figures once (seconds), later ones read them.

    \b
    Example:
      tracehouse runs
      tracehouse runs --where model=llama-8b --format json
      tracehouse runs --wide
    """
    from reports.runs_table import headlines, narrow_rows

    con = _connect(ctx)
    filters = _parse_labels(where, "--where")
    clauses = " AND ".join("labels[?] = ?" for _ in filters)
    params = [x for kv in filters.items() for x in kv]
    cursor = con.execute(
        "SELECT * FROM runs" + (f" WHERE {clauses}" if clauses else "") + " ORDER BY ingested_at, run_id",
        params,
    )
    columns = [d[0] for d in cursor.description]
    records = [dict(zip(columns, row)) for row in cursor.fetchall()]
    if filters and not records:
        known = con.execute("SELECT DISTINCT unnest(map_keys(labels)) FROM runs ORDER BY 1").fetchall()
        raise TracehouseError(
            f"no run has {_labels_text(filters)}",
            hint="label keys in the warehouse: " + (", ".join(k for (k,) in known) or "none"),
        )
    if wide and fmt == "table":
        print_rows(columns, [tuple(r.values()) for r in records], fmt)
        return
    from warehouse.metrics import run_metric_rows

    if records and _progress_enabled():
        click.echo("  reading the runs' figures (computed once per run)", err=True)
    figures = headlines(run_metric_rows(_warehouse(ctx), [r["run_id"] for r in records]))
    if fmt != "table" or wide:
        for r in records:
            h = figures.get(r["run_id"])
            r.update(
                headline_phase=h and h.phase,
                steps=h and h.steps,
                step_time_median_ms=h and h.step_ms,
                gpu_busy_pct=h and h.busy_pct,
                top_category=h and h.top,
            )
        print_rows(list(records[0]) if records else columns, [tuple(r.values()) for r in records], fmt)
        return
    names, rows = narrow_rows(records, figures)
    print_rows(names, rows, fmt, max_width=22)


@main.command(context_settings=CONTEXT_SETTINGS)
@click.argument("query", required=False)
@format_option()
@engine_options
@click.pass_context
def sql(ctx, query, fmt, engine, master):
    """Run read-only SQL queries over the warehouse's tables and views.

    Statements that write, attach, copy, install, change settings or read files are refused.
    The query is written in DuckDB's dialect with either engine. Without QUERY (or with `-`), the
    queries are read from stdin, one per `;`, and run on one catalogue, each result after the last
    (a blank line between them); every query of the script is checked before the first one runs.

    \b
    Example:
      tracehouse sql "select kind, count(*), sum(dur_ns) from kernels group by kind"
      tracehouse sql "show tables" --format csv
      tracehouse sql < questions.sql
      tracehouse sql --engine spark --master spark://head:7077 "select * from category_summary"
    """
    from warehouse.engine import opens_quickly, served
    from warehouse.query import check_read_only
    from warehouse.session import split_statements

    if query is None and sys.stdin.isatty():  # nothing piped: say so rather than wait on the terminal
        raise click.UsageError(
            "no query given (as an argument, or on stdin; `tracehouse shell` for a prompt)"
        )
    # parse and check on the connection the queries run on where it opens quickly (DuckDB: a second
    # database cost 0.03-0.1 s); for an engine that starts a JVM, before it starts
    con = _connect(ctx, engine, master) if opens_quickly(engine) else None
    if query is None or query == "-":
        queries = split_statements(sys.stdin.read(), con)
        if not queries:
            raise click.UsageError("no query given (as an argument, or on stdin)")
    else:
        queries = [query]
    for text in queries:  # refuse a script before any of it runs
        check_read_only(text, con)
    if con is None:
        con = _connect(ctx, engine, master)
    print_answers(con, queries, fmt)
    if served(engine):  # the next question is answered by a warm reader (tracehouse.serve)
        from tracehouse.client import start_server

        start_server()


@main.command(context_settings=CONTEXT_SETTINGS)
@click.option("--stop", is_flag=True, help="Stop the running query server and exit.")
@click.option(
    "--idle",
    type=float,
    default=None,
    help="Seconds without a question before the server leaves (env TRACEHOUSE_SERVE_IDLE; default 600).",
)
def serve(stop, idle):
    """Run the query server in the foreground: it answers `tracehouse sql` for the other processes.

    `tracehouse sql` and `ingest` start one in the background when none is running, so a question
    costs its query, not a process's imports and catalogue (tens of milliseconds instead of ~0.2 s).
    It holds one reader per warehouse asked about, sees new runs and kept rows before each question,
    answers exactly what `sql` prints (or lets `sql` answer itself), and leaves after --idle seconds
    without a question. One per user and version of the code, on a socket only the user can open
    (/tmp/tracehouse-UID, or TRACEHOUSE_SERVE_DIR). TRACEHOUSE_SERVE=off: never start nor use one.

    \b
    Example:
      tracehouse serve --idle 3600
      tracehouse serve --stop
    """
    from tracehouse import serve as server
    from tracehouse.client import server_running, socket_path

    if stop:
        click.echo("stopped" if server.stop() else "no query server was running")
        return
    path = socket_path()
    if path is not None and server_running(path):
        click.echo("a query server is running already (`tracehouse serve --stop` stops it)")
        return
    code = server.run(idle)
    if code:
        raise TracehouseError("the query server cannot run here", hint="see the line above")


@main.command(context_settings=CONTEXT_SETTINGS)
@format_option()
@click.option(
    "--history",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="History file (default ~/.tracehouse_history; env TRACEHOUSE_HISTORY).",
)
@click.pass_context
def shell(ctx, fmt, history):
    """Ask many read-only queries on one catalogue: a prompt with history (readline).

    A query ends with `;` (it may span lines). `.tables` lists the tables and views, `.quit` (or
    Ctrl-D) leaves. A refused or failing query prints its one-line error and the shell goes on; runs
    ingested by another process meanwhile are seen by the next query. On a pipe (not a terminal) it
    reads the queries without a prompt and exits 1 if any of them failed.

    \b
    Example:
      tracehouse shell
      th> select name, gpu_time_ns from kernel_summary order by 2 desc limit 5;
    """
    import os

    from warehouse.session import Session, split_statements

    session = Session(_warehouse(ctx))
    interactive = sys.stdin.isatty()
    history_file = history or Path(
        os.environ.get("TRACEHOUSE_HISTORY") or Path.home() / ".tracehouse_history"
    )
    readline = None
    if interactive:
        try:
            import readline
        except ImportError:  # platforms without readline: no history
            readline = None
        if readline is not None:
            with contextlib.suppress(OSError):
                readline.read_history_file(history_file)
    buffer: list[str] = []
    failed = False
    while True:
        try:
            line = input("th> " if not buffer else "... ") if interactive else sys.stdin.readline()
        except (EOFError, KeyboardInterrupt):
            break
        if not interactive and line == "":
            break
        line = line.rstrip("\n")
        command = line.strip() if not buffer else ""
        if command in (".quit", ".exit"):
            break
        if command == ".tables":
            line = (
                "select table_name as name, table_type as kind from information_schema.tables "
                "where not starts_with(table_name, '_') order by 1;"
            )
        buffer.append(line)
        text = "\n".join(buffer)
        if not text.strip().endswith(";"):
            continue
        buffer = []
        for query in split_statements(text, session.con):
            try:
                columns, rows = session.sql(query)
            except TracehouseError as exc:
                hint = f" ({exc.hint})" if exc.hint else ""
                click.echo(f"error: {exc}{hint}", err=True)
                failed = True
                continue
            print_rows(columns, rows, fmt)
    if buffer and "".join(buffer).strip():  # a last query without its `;`
        click.echo("error: the last query has no `;`: not run", err=True)
        failed = True
    if readline is not None:
        with contextlib.suppress(OSError):
            readline.write_history_file(history_file)
    session.close()
    if failed and not interactive:
        ctx.exit(1)


@main.command(context_settings=CONTEXT_SETTINGS)
@click.argument("name", required=False, metavar="[VIEW]")
@format_option()
@click.pass_context
def schema(ctx, name, fmt):
    """The tables and views you can query, with what one row is; with VIEW, its columns and their meaning.

    Views are documented in their sql/ file's header (the same text DuckDB keeps as comments:
    `select * from duckdb_columns()`); tables list their columns and types (docs/tables.md says
    what each holds).

    \b
    Example:
      tracehouse schema
      tracehouse schema gpu_timeline_run
    """
    from warehouse.schema_docs import describe, overview

    con = _connect(ctx)
    if name is None:
        print_rows(["name", "kind", "one row is"], overview(con), fmt, max_width=110)
    else:
        print_rows(["column", "type", "meaning"], describe(con, name), fmt, max_width=200)


@main.command(context_settings=CONTEXT_SETTINGS)
@format_option()
@click.pass_context
def check(ctx, fmt):
    """Check the warehouse's invariants; exit 1 when one is broken.

    Unique keys, non-negative durations, flow endpoints that exist, category shares that sum to 1 per
    run and phase, and the timeline identity compute + exposed comm + exposed memory + idle = span.

    \b
    Example:
      tracehouse check --format json
    """
    con = _connect(ctx)
    cursor = con.execute("SELECT check_name, run_id, detail FROM invariant_violations ORDER BY ALL")
    rows = cursor.fetchall()
    if rows or fmt != "table":
        print_rows(["check_name", "run_id", "detail"], rows, fmt)
    else:
        click.echo("all invariants hold")
    if rows:
        ctx.exit(1)


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


@main.command(context_settings=CONTEXT_SETTINGS)
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
def synth(
    scenario,
    list_all,
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
):
    """Write a realistic synthetic run, plus ground_truth.json with every figure it should give.

    SCENARIO is a whole run (serving-decode, serving-prefill, training: the options below shape it) or a
    situation: a small trace of one shape that analyses get wrong (a blocking copy at the end of a step,
    a DataLoader stall, eager attention ...), whose ground_truth.json says what a correct analysis
    concludes. `--list` names them all.

    \b
    Example:
      tracehouse synth serving-decode --ranks 4 --slow-kernel 'nvjet:1.08' -o /tmp/decode-run
      tracehouse ingest /tmp/decode-run
      tracehouse synth --list
      tracehouse synth blocking-d2h-copy -o /tmp/blocking-copy
    """
    from synth import SCENARIOS, write_scenario

    if list_all or not scenario:
        from synth.situations import SITUATIONS

        if not list_all:
            raise click.UsageError("name a SCENARIO or a situation (tracehouse synth --list names them)")
        for name in SCENARIOS:
            click.echo(f"{name}\tscenario")
        for name, sit in sorted(SITUATIONS.items()):
            click.echo(f"{name}\tsituation: {sit.summary}")
        return
    if out is None:
        raise click.UsageError("-o DIR is required: the folder to write the run into")
    if scenario not in SCENARIOS:
        from synth.situations import write_situation

        try:
            click.echo(str(write_situation(scenario, out)))
        except ValueError as exc:
            raise click.BadParameter(f"{exc}; or a scenario: {', '.join(SCENARIOS)}", param_hint="SCENARIO")
        return

    from synth import truth_path
    from synth.progress import size_progress

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
        )
    except ValueError as exc:
        raise click.BadParameter(str(exc))
    if progress is not None:
        progress.done(f"; ground truth: {truth_path(path).name}")
    click.echo(str(path))


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


@main.command(context_settings=CONTEXT_SETTINGS)
@click.argument("folder", default="tracehouse-demo", type=click.Path(path_type=Path, file_okay=False))
def demo(folder):
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
        if _progress_enabled():
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


template_dir_option = click.option(
    "--template-dir",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    metavar="DIR",
    help="A folder of templates searched before the shipped ones: a file of a shipped name (run.html.j2, "
    "diff.md.j2, _cells.html.j2, base.html.j2 ...) overrides it, every other name falls back.",
)


@main.command(context_settings=CONTEXT_SETTINGS)
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
@format_option(choices=("md", "html", "json"), default="md", json_help="the same content as JSON for scripts")
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
def report(ctx, run, phase, mapping, fmt, output, template_dir, with_trace, engine, master):
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
    from reports.write import write_run_report

    if with_trace and output is None:
        raise click.UsageError("--with-trace writes the trace beside the report: give -o FILE")
    text = write_run_report(
        _engine_warehouse(ctx),
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
    _write_report(text, output)


@main.command(context_settings=CONTEXT_SETTINGS)
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
def export(ctx, run, rank, step, window, fmt, no_analysis, analysis_steps, no_align, output):
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
    from reports.export import export_run, parse_window, progress_printer

    if step is not None and window:
        raise click.UsageError("give --step or --window, not both")
    summary = export_run(
        _warehouse(ctx),
        run,
        output,
        rank=rank,
        step=step,
        window=parse_window(window) if window else None,
        fmt=fmt,
        analysis=not no_analysis,
        analysis_steps=analysis_steps,
        align=not no_align,
        progress=progress_printer(),
    )
    click.echo(summary.head())
    for note in summary.notes:
        click.echo(f"note: {note}", err=True)


# ---- diff and trend (issue 7) -------------------------------------------------------------------
def _write_report(text: str, output) -> None:
    if output:
        try:
            Path(output).write_text(text, encoding="utf-8")
        except OSError as exc:
            raise TracehouseError(f"-o {output}: cannot write ({exc.strerror})") from None
        click.echo(f"wrote {output}", err=True)
    else:
        click.echo(text, nl=False)


@main.command(context_settings=CONTEXT_SETTINGS)
@click.argument("base")
@click.argument("target")
@format_option(choices=("md", "html", "json"), default="md", json_help="the same content as JSON for scripts")
@output_option
@template_dir_option
@engine_options
@click.pass_context
def diff(ctx, base, target, fmt, output, template_dir, engine, master):
    """What changed between two runs: per category and kernel, time per step, delta and ratio.

    BASE and TARGET are run ids, unique prefixes of one, `latest` or `latest~N` (the N-th run
    ingested before the latest). Kernels are matched by exact name, then by normalized name (template
    arguments, tile sizes, hashes removed), then by category.

    \b
    Example:
      tracehouse diff latest~1 latest
      tracehouse diff 3f2a latest --format html -o diff.html
      tracehouse diff 3f2a latest --engine spark
    """
    from reports.diff import DiffParams, build, render_diff

    con = _connect(ctx, engine, master)
    # each run's figures from its kept rows where the run is derived (warehouse.derived), computed otherwise
    _write_report(render_diff(build(con, DiffParams(base, target)), fmt, template_dir), output)


@main.command(context_settings=CONTEXT_SETTINGS)
@click.option(
    "--where", "where", multiple=True, metavar="K=V", help="Only runs with this label (repeatable)."
)
@click.option(
    "--metric",
    "metrics",
    multiple=True,
    metavar="M",
    help="Only this metric; glob patterns allowed, e.g. 'category.*' (repeatable).",
)
@click.option("--since", metavar="DATE", help="Show points from this commit time on (ISO date).")
@click.option("--last", type=click.IntRange(min=1), metavar="N", help="Show the last N runs of each series.")
@format_option(choices=("md", "html", "json"), default="md", json_help="the same content as JSON for scripts")
@output_option
@click.option(
    "--fail-on-regression",
    is_flag=True,
    help="Exit with code 3 when the last run of a series has a flagged regression.",
)
@template_dir_option
@engine_options
@click.pass_context
def trend(ctx, where, metrics, since, last, fmt, output, fail_on_regression, template_dir, engine, master):
    """Metrics across the runs of each series, ordered by commit, with regressions flagged.

    Baselines and noise always use the whole history; --since and --last only bound what is shown.

    \b
    Example:
      tracehouse trend --where series=decode-bench --metric 'category.*' --last 20 --fail-on-regression
      tracehouse trend --where series=decode-bench --engine spark --master yarn
    """
    from reports.trend import TrendParams, build, render_trend
    from warehouse.engine import store_of

    con = _connect(ctx, engine, master)
    # run_metrics from the per-run store where the engine's are kept there (DuckDB's), else computed on con
    report = build(con, TrendParams(_parse_labels(where), tuple(metrics), since, last, store=store_of(con)))
    _write_report(render_trend(report, fmt, template_dir), output)
    if fail_on_regression and report.failing:
        for g in report.failing:
            click.echo(
                f"regression: {g.series} {g.phase} {g.metric} {g.change_pct:+.2f} % at {g.commit} "
                f"(shift from {g.first_commit})",
                err=True,
            )
        ctx.exit(3)


if __name__ == "__main__":
    main()


def entry() -> None:
    """The `tracehouse` process: run the command, flush, and leave without tearing down what the OS frees
    anyway (DuckDB's buffers and caches: 1.7 s at exit after a 1 GB ingest). Every file a command writes is
    complete when the command returns (written aside, then renamed), so nothing is lost. With Spark loaded
    the ordinary exit runs (its atexit handlers stop the JVM)."""
    import os

    try:
        main()
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        if isinstance(exc.code, str):
            print(exc.code, file=sys.stderr)
    if "pyspark" in sys.modules:
        sys.exit(code)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe (`| head`): nothing more to say
            code = code or 1
    os._exit(code)

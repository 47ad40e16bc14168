"""What the commands share: the warehouse and connection of a command, the options several commands take
(--engine/--master, --format, -o, --template-dir), labels given as K=V, and writing a report.

Imports only click at the top: a command's module is imported for its command alone (tracehouse.cli), and
what it calls (ingest/, warehouse/, reports/) is imported when it runs.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from tracehouse.errors import TracehouseError

CONTEXT_SETTINGS = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


def open_warehouse(ctx: click.Context, must_exist: bool = True):
    """The warehouse; a command that reads one refuses a folder that holds none (a typo'd --warehouse
    would otherwise be created, empty, and answer 0 rows). Only ingest creates it."""
    from tracehouse.warehouse.store import Warehouse

    store = Warehouse(ctx.obj["warehouse"])
    if must_exist and not store.exists():
        where = "TRACEHOUSE_WAREHOUSE" if ctx.obj.get("warehouse_from_env") else "--warehouse"
        raise TracehouseError(
            f"no warehouse at {ctx.obj['warehouse']} ({where})",
            hint="check the path, or create one with `tracehouse ingest PATH`",
        )
    return store


def engine_warehouse(ctx: click.Context):
    """The warehouse as an engine reads it: a URI (s3a://, gs://, hdfs://) as it is, for the engine to read
    or refuse (warehouse.engine.open); a local folder must hold a warehouse."""
    from tracehouse.warehouse.engine import is_uri

    root = ctx.obj["warehouse"]
    return root if is_uri(root) else open_warehouse(ctx)


def connect(ctx: click.Context, engine: str = "duckdb", master: str | None = None):
    """The command's connection: warehouse.engine.open, the one connection factory (DuckDB or Spark)."""
    from tracehouse.warehouse.engine import open as open_connection

    return open_connection(engine_warehouse(ctx), engine, master=master)


def progress_enabled() -> bool:
    """Progress lines go to a terminal only (nothing when stderr is piped)."""
    return sys.stderr.isatty()


def engine_options(fn):
    """--engine and --master, the same on every command that reads the views (the engines: warehouse.engine)."""
    from tracehouse.warehouse.engine import ENGINES

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


FORMAT_HELP = {
    "table": "an aligned table for people",
    "csv": "csv for scripts",
    "json": "json records for scripts",
    "md": "Markdown for a terminal or a PR",
    "ndjson": "one JSON object a line for scripts, every value whole",
    "html": "one self-contained HTML page",
    "triage": "the kernel, overlap and fuse tables per phase as Markdown, laid out as the "
    "llm-torch-profiler-analysis skill prints its Triage View",
}


def format_option(choices=("table", "csv", "json"), default="table", json_help: str | None = None):
    """--format, its help naming exactly the choices this command has."""
    parts = [json_help if c == "json" and json_help else FORMAT_HELP[c] for c in choices]
    return click.option(
        "--format",
        "fmt",
        type=click.Choice(choices),
        default=default,
        show_default=True,
        help="Output format: " + "; ".join(f"{c}: {h}" for c, h in zip(choices, parts)) + ".",
    )


def report_format_option(extra: tuple[str, ...] = ()):
    """--format of the reports (report, diff, trend): md, html or json, and a report's own (`extra`)."""
    return format_option(
        ("md", "html", "json") + extra, "md", json_help="the same content as JSON for scripts"
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
        return None if value is None else output_path(value)

    return click.option(
        "-o",
        "--output",
        type=click.Path(dir_okay=False, path_type=Path),
        callback=check,
        required=required,
        help=help,
    )(fn)


def output_path(value, option: str = "-o") -> Path:
    """A file to write, checked before any work: not a folder, in a folder that exists (one line if not)."""
    path = Path(value)
    if path.is_dir():
        raise TracehouseError(f"{option} {value}: is a folder", hint="give a file name, e.g. -o report.html")
    if not path.parent.is_dir():
        raise TracehouseError(
            f"{option} {value}: the folder {path.parent} does not exist",
            hint="create it first or write elsewhere",
        )
    return path


def template_dir_option(fn):
    """--template-dir of the reports (made when a command applies it: click.Path imports locale)."""
    return click.option(
        "--template-dir",
        type=click.Path(exists=True, file_okay=False, path_type=Path),
        metavar="DIR",
        help="A folder of templates searched before the shipped ones: a file of a shipped name (run.html.j2, "
        "diff.md.j2, _cells.html.j2, base.html.j2 ...) overrides it, every other name falls back.",
    )(fn)


def write_report(text: str, output) -> None:
    """A report to -o FILE (saying so on stderr), or to stdout."""
    if output:
        try:
            Path(output).write_text(text, encoding="utf-8")
        except OSError as exc:
            raise TracehouseError(f"-o {output}: cannot write ({exc.strerror})") from None
        click.echo(f"wrote {output}", err=True)
    else:
        click.echo(text, nl=False)


def parse_labels(items: tuple[str, ...], hint: str = "--label") -> dict[str, str]:
    """K=V items -> {K: V}; an item without `=` or without a key is a usage error naming the option."""
    labels = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise click.BadParameter(f"{item!r} is not KEY=VALUE", param_hint=hint)
        labels[key.strip()] = value
    return labels


def labels_text(labels: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted(labels.items())) or "no labels"


def default_derive() -> str:
    """What ingest and label do with a run's derived rows: $TRACEHOUSE_DERIVE (wait or none), else none:
    ingest publishes and returns, and `tracehouse derive` or the run's first report keeps its rows (the
    readers before it compute the same rows; issue 35: ingest never waits for derived rows)."""
    import os

    from tracehouse.ingest.load import DERIVE_CHOICES

    value = os.environ.get("TRACEHOUSE_DERIVE") or "none"
    if value not in DERIVE_CHOICES:
        raise TracehouseError(
            f"TRACEHOUSE_DERIVE={value}: not a choice", hint="one of " + ", ".join(DERIVE_CHOICES)
        )
    return value


def derive_runs(store, run_ids: list[str], mode: str) -> None:
    """Derive these runs' rows in this process ('wait'; ingest.load.derive_one), or not at all ('none')."""
    if mode == "none":
        return
    from tracehouse.ingest.load import derive_one

    for run_id in run_ids:
        derive_one(store, run_id)

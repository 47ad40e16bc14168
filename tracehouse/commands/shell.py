"""`tracehouse shell`: many read-only queries on one reader (warehouse.session.Session), at a prompt with
history, or from a pipe."""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path

import click

from tracehouse.commands.common import CONTEXT_SETTINGS, format_option, open_warehouse
from tracehouse.errors import TracehouseError
from tracehouse.output import error_line, print_rows

TABLES = (
    "select table_name as name, table_type as kind from information_schema.tables "
    "where not starts_with(table_name, '_') order by 1;"
)


@click.command(context_settings=CONTEXT_SETTINGS)
@format_option()
@click.option(
    "--history",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="History file (default ~/.tracehouse_history; env TRACEHOUSE_HISTORY).",
)
@click.pass_context
def command(ctx, fmt, history):
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
    from tracehouse.warehouse.session import Session

    interactive = sys.stdin.isatty()
    history_file = history or Path(
        os.environ.get("TRACEHOUSE_HISTORY") or Path.home() / ".tracehouse_history"
    )
    with Session(open_warehouse(ctx)) as session, _history(history_file if interactive else None):
        failed = False
        for text in _scripts(interactive):
            failed |= _answer(session, text, fmt)
    if failed and not interactive:
        ctx.exit(1)


def _scripts(interactive: bool):
    """Each text typed up to a line ending with `;` (`.tables` is a query too) until `.quit`, Ctrl-D or the
    end of the pipe; a last text without its `;` is said, not run."""
    buffer: list[str] = []
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
        buffer.append(TABLES if command == ".tables" else line)
        text = "\n".join(buffer)
        if text.strip().endswith(";"):
            buffer = []
            yield text
    if buffer and "".join(buffer).strip():
        click.echo("error: the last query has no `;`: not run", err=True)
        yield None


def _answer(session, text: str | None, fmt: str) -> bool:
    """Print the answers of a text's statements; whether one of them failed (its one-line error said)."""
    from tracehouse.warehouse.session import split_statements

    if text is None:
        return True
    failed = False
    for query in split_statements(text, session.con):
        try:
            columns, rows = session.sql(query)
        except TracehouseError as exc:
            click.echo(error_line(exc), err=True)
            failed = True
            continue
        print_rows(columns, rows, fmt)
    return failed


@contextlib.contextmanager
def _history(path: Path | None):
    """readline's history read from `path` and written back at the end (a terminal; None: no history)."""
    readline = None
    if path is not None:
        try:
            import readline
        except ImportError:  # platforms without readline: no history
            readline = None
    if readline is not None:
        with contextlib.suppress(OSError):
            readline.read_history_file(path)
    try:
        yield
    finally:
        if readline is not None:
            with contextlib.suppress(OSError):
                readline.write_history_file(path)

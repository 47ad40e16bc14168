"""`tracehouse sql`: read-only queries, one from the command line or many from stdin, answered by one
reader (warehouse.session.Session on DuckDB; engine.open's connection on Spark). Ctrl-C cancels the
running query (tracehouse.interrupts.Interrupted: one line, exit 130, as every command)."""

from __future__ import annotations

import os
import signal
import sys
import threading
from contextlib import contextmanager

import click

from tracehouse.commands.common import (
    CONTEXT_SETTINGS,
    connect,
    engine_options,
    format_option,
    open_warehouse,
)
from tracehouse.interrupts import Interrupted  # SIGINT while cancel_on_sigint's block ran


@click.command(context_settings=CONTEXT_SETTINGS)
@click.argument("query", required=False)
@format_option()
@engine_options
@click.pass_context
def command(ctx, query, fmt, engine, master):
    """Run read-only SQL queries over the warehouse's tables and views.

    Statements that write, attach, copy, install, change settings or read files are refused.
    The query is written in DuckDB's dialect with either engine. Without QUERY (or with `-`), the
    queries are read from stdin, one per `;`-terminated statement (a statement may span lines; the last
    `;` may be left out), and answered by one reader in this process on the warehouse as it was when the
    command started, each result after the last (a blank line between them); every query of the script
    is checked before the first one runs.
    Ctrl-C cancels the running query and exits with code 130.

    \b
    Example:
      tracehouse sql "select kind, count(*), sum(dur_ns) from kernels group by kind"
      tracehouse sql "show tables" --format csv
      tracehouse sql - < questions.sql
      tracehouse sql --engine spark --master spark://head:7077 "select * from category_summary"
    """
    from tracehouse.output import print_answers
    from tracehouse.warehouse.engine import answers_in_session
    from tracehouse.warehouse.query import check_read_only

    if query is None and sys.stdin.isatty():  # nothing piped: say so rather than wait on the terminal
        raise click.UsageError(
            "no query given (as an argument, or on stdin; `tracehouse shell` for a prompt)"
        )
    try:
        # DuckDB: the queries are split and checked on the reader they run on (a second database cost
        # 0.03-0.1 s); Spark starts a JVM, which a refused query must not pay for: checked before it starts
        session = _session(ctx) if answers_in_session(engine) else None
        queries = _queries(query, session.con if session else None)
        for text in queries:  # refuse a script before any of it runs
            check_read_only(text, session.con if session else None)
        from tracehouse.warehouse.engine import run_query

        if session is not None:  # the warehouse as the session opened it (a second signature of its kept
            # rows, Session.sql's refresh, would cost a cold process a stat of every kept file again)
            with cancel_on_sigint(session.con) as check:
                print_answers(lambda text: check() or run_query(session.con, text), queries, fmt)
            return
        con = connect(ctx, engine, master)
        print_answers(lambda text: run_query(con, text), queries, fmt)
    except KeyboardInterrupt:  # Interrupted too (cancel_on_sigint): the group says it, exit 130
        raise Interrupted("the query was cancelled") from None


def _session(ctx):
    from tracehouse.warehouse.session import Session

    return Session(open_warehouse(ctx))


def _queries(query: str | None, con) -> list[str]:
    """The queries: QUERY, or stdin's statements (query None or `-`)."""
    if query not in (None, "-"):
        return [query]
    from tracehouse.warehouse.session import split_statements

    queries = split_statements(sys.stdin.read(), con)
    if not queries:
        raise click.UsageError("no query given (as an argument, or on stdin)")
    return queries


@contextmanager
def cancel_on_sigint(con):
    """While inside, SIGINT (Ctrl-C) cancels the query running on the DuckDB connection `con`, and the block
    ends with Interrupted; the block calls the check function it is given before each query (a signal
    that came between queries: Interrupted there).

    Python runs a signal's handler only between the main thread's bytecodes, and the main thread is inside
    DuckDB's query until it ends: so the byte the C-level handler writes (signal.set_wakeup_fd) is read by a
    watchdog thread, which calls con.interrupt(); DuckDB stops the query and the main thread's call
    returns with an error, which Interrupted replaces. Outside the main thread (where no handler can be
    set), the block runs as it is."""
    if threading.current_thread() is not threading.main_thread():
        yield lambda: None
        return
    hit = threading.Event()
    read_fd, write_fd = os.pipe()
    os.set_blocking(write_fd, False)
    previous_handler = signal.signal(signal.SIGINT, lambda signum, frame: hit.set())
    previous_fd = signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
    stop = b"\xff"  # not a signal number: the block is over

    def watch() -> None:
        while True:
            byte = os.read(read_fd, 1)
            if byte in (stop, b""):
                return
            if byte[0] == signal.SIGINT:
                hit.set()
                con.interrupt()

    watchdog = threading.Thread(target=watch, name="sigint-watchdog", daemon=True)
    watchdog.start()

    def check() -> None:
        if hit.is_set():
            raise Interrupted

    try:
        yield check
        if hit.is_set():
            raise Interrupted
    except Exception:
        if hit.is_set():
            raise Interrupted from None  # DuckDB's "INTERRUPT Error" (a QueryError by now) says no more
        raise
    finally:
        signal.set_wakeup_fd(previous_fd)
        signal.signal(signal.SIGINT, previous_handler)
        os.write(write_fd, stop)
        watchdog.join()
        os.close(read_fd)
        os.close(write_fd)

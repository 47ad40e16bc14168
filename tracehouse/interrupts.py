"""Interrupts (Ctrl-C's SIGINT, a supervisor's SIGTERM): what a command does when asked to stop.

`watching()` (the CLI's whole command; ingest and derive for their own work when called as a library)
makes both signals raise `Interrupted` in the main thread and remembers that one came (`received()`).
SIGTERM is turned into SIGINT first: DuckDB's Python client stops its running query on SIGINT only (it
then raises RuntimeError('Query interrupted') in place of our exception, so code that catches errors asks
`received()` before it treats one as a bad file or a failed derive). `held()` keeps a signal out of a
block that must run whole (the publish of a run, the removal of one): it is delivered when the block ends.
A worker process (ingest's pool) answers neither: it starts with both blocked (`spawning()`), ignores
them (`ignore()`), and its parent, interrupted, stops it. The CLI says one line and exits
INTERRUPTED_EXIT on either signal.
"""

from __future__ import annotations

import os
import signal
import threading
from contextlib import contextmanager

INTERRUPTED_EXIT = 130  # 128 + SIGINT, as a shell reports a command stopped by Ctrl-C
SIGNALS = (signal.SIGINT, signal.SIGTERM)

_received: list[int] = []  # the signals this process was sent while watching, first first


class Interrupted(KeyboardInterrupt):
    """A command was asked to stop (SIGINT or SIGTERM). `said`: what it leaves, in words (one line)."""

    def __init__(self, said: str = "") -> None:
        super().__init__(said)
        self.said = said


def received() -> int | None:
    """The first signal that asked this process to stop, or None."""
    return _received[0] if _received else None


def forget() -> None:
    """The interrupt was answered and the process goes on (the shell's prompt after Ctrl-C)."""
    _received.clear()


def check(said: str = "") -> None:
    """Raise Interrupted if a signal came: the point after which nothing may be stored."""
    if _received:
        raise Interrupted(said)


def is_interrupt(exc: BaseException) -> bool:
    """Whether this exception is how an interrupt surfaced (ours, or what DuckDB made of it)."""
    return isinstance(exc, KeyboardInterrupt) or bool(_received)


def _on_signal(signum, frame) -> None:
    _received.append(signum)
    if signum == signal.SIGTERM:
        os.kill(os.getpid(), signal.SIGINT)  # DuckDB stops its query on SIGINT alone; that handler raises
        return
    raise Interrupted


def _main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


@contextmanager
def watching():
    """SIGINT and SIGTERM raise Interrupted inside the block (main thread; elsewhere it runs as it is).
    Nested, or under install(), the outer one stays in charge; the outermost forgets the signal when it
    ends (a long-lived process, a notebook, goes on)."""
    if not _main_thread() or signal.getsignal(signal.SIGINT) is _on_signal:
        yield
        return
    previous = {s: signal.getsignal(s) for s in SIGNALS}
    forget()
    for s in SIGNALS:
        signal.signal(s, _on_signal)
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        forget()


def install() -> None:
    """The process's handlers for good (the `tracehouse` process: tracehouse.cli.entry)."""
    if _main_thread():
        for s in SIGNALS:
            signal.signal(s, _on_signal)


@contextmanager
def held():
    """The block runs whole: SIGINT and SIGTERM that arrive inside are delivered when it ends (to the
    handlers that were there before it: an exception there, or the default end of the process)."""
    if not _main_thread():
        yield
        return
    pending: list[int] = []
    previous = {s: signal.signal(s, lambda signum, frame: pending.append(signum)) for s in SIGNALS}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        for s in dict.fromkeys(pending):
            signal.raise_signal(s)


@contextmanager
def spawning():
    """Processes started inside the block begin with SIGINT and SIGTERM blocked (a process inherits the
    mask), so a Ctrl-C (the terminal's whole process group) cannot reach one before `ignore()`; a signal
    that comes meanwhile reaches this process when the block ends."""
    if not hasattr(signal, "pthread_sigmask"):
        yield
        return
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def ignore() -> None:
    """In a worker process: SIGINT and SIGTERM are its parent's to answer (ingest.run.RankPool stops it)."""
    for s in SIGNALS:
        signal.signal(s, signal.SIG_IGN)
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, SIGNALS)

"""The one exception hierarchy of tracehouse.

Everything a user can cause raises a subclass of TracehouseError; the CLI turns it into one line on
stderr and exit code 1. Anything else is a bug and keeps its traceback (with --debug).
"""

from __future__ import annotations


class TracehouseError(Exception):
    """Base class: an expected failure caused by the user's input."""

    hint: str = ""

    def __init__(self, message: str, hint: str = "") -> None:
        super().__init__(message)
        if hint:
            self.hint = hint


class TraceFormatError(TracehouseError):
    """A trace file that cannot be read: names the file, what is wrong and where."""

    def __init__(self, path: str, what: str, where: str = "", hint: str = "") -> None:
        self.path, self.what, self.where = path, what, where
        location = f" at {where}" if where else ""
        super().__init__(
            f"{path}: {what}{location}",
            hint=hint
            or "the file was skipped and the other files still land; check that it is a "
            "complete PyTorch-profiler trace (copy or export it again)",
        )


class RunNotFound(TracehouseError):
    hint = "list runs with `tracehouse runs`"


class QueryRefused(TracehouseError):
    hint = "ad-hoc SQL is read-only: use SELECT, WITH, DESCRIBE or SHOW over the warehouse's tables and views"


class QueryError(TracehouseError):
    hint = "`tracehouse schema` lists the tables and views, `tracehouse schema VIEW` its columns"


class InvalidArgument(TracehouseError, ValueError):
    """An argument naming nothing that exists (an unknown scenario, situation or vendor) or out of range.
    Also a ValueError, for callers that validate arguments that way."""


class SparkUnavailable(TracehouseError):
    """--engine spark without pyspark installed, or Spark cannot start (no Java)."""

    hint = "or use --engine duckdb"

"""What the CLI prints for rows and errors, in one place: every tabular command's table / CSV / JSON
(`print_rows`), `sql`'s answers (`print_answers`) and an expected failure's one line (`error_line`)."""

from __future__ import annotations

import csv
import io
import json
from decimal import Decimal

import click

from tracehouse.errors import TracehouseError


def _to_text(value) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, (dict, list)):
        return json.dumps(value, default=str)
    return str(value)


def print_rows(columns: list[str], rows: list[tuple], fmt: str, max_width: int = 60) -> None:
    """One output path for every tabular command: an aligned table, CSV, or JSON records."""

    if fmt == "json":
        records = [dict(zip(columns, row)) for row in rows]
        click.echo(json.dumps(records, default=str, indent=1))
        return
    if fmt == "csv":
        buffer = io.StringIO()
        writer = csv.writer(buffer)
        writer.writerow(columns)
        writer.writerows([[_to_text(v) for v in row] for row in rows])
        click.echo(buffer.getvalue(), nl=False)
        return
    numeric = [
        bool(rows)
        and all(
            v is None or (isinstance(v, (int, float, Decimal)) and not isinstance(v, bool))
            for v in (r[i] for r in rows)
        )
        for i in range(len(columns))
    ]
    cells = [[_to_text(v).replace("\n", " ") for v in row] for row in rows]
    widths = [min(max_width, max([len(c)] + [len(r[i]) for r in cells])) for i, c in enumerate(columns)]

    def cell(text: str, width: int, right: bool) -> str:
        if len(text) > width:  # cut, and say so: the whole value is in --format json / csv
            text = text[: width - 1] + "…"
        return text.rjust(width) if right else text.ljust(width)

    click.echo("  ".join(cell(c, w, n) for c, w, n in zip(columns, widths, numeric)).rstrip())
    click.echo("  ".join("-" * w for w in widths))
    for row in cells:
        click.echo("  ".join(cell(v, w, n) for v, w, n in zip(row, widths, numeric)).rstrip())
    if any(len(v) > w for row in cells for v, w in zip(row, widths)):
        click.echo(f"(values over {max_width} characters cut at …: --format json or csv shows them whole)")
    click.echo(f"({len(rows)} row{'s' if len(rows) != 1 else ''})")


def print_answers(ask, queries: list[str], fmt: str) -> None:
    """Each query's rows, in order, a blank line between them (`sql`); ask(query) -> (columns, rows) runs
    one checked query on the command's reader."""
    for i, text in enumerate(queries):
        columns, rows = ask(text)
        if i:
            click.echo("")
        print_rows(columns, rows, fmt)


def error_line(exc: TracehouseError) -> str:
    """What an expected failure prints: one line, with its hint."""
    return f"error: {exc}" + (f" ({exc.hint})" if exc.hint else "")

"""What the CLI prints for rows and errors, in one place: every tabular command's table / Markdown / CSV / JSON / NDJSON
(`print_rows`), `sql`'s answers (`print_answers`) and an expected failure's one line (`error_line`)."""

from __future__ import annotations

import csv
import io
import json
import shutil
import sys
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


def terminal_width() -> int:
    """The columns a table may take: the terminal's width when stdout is a terminal, else 120."""
    if sys.stdout.isatty():
        return shutil.get_terminal_size((120, 24)).columns
    return 120


def print_rows(columns: list[str], rows: list[tuple], fmt: str, **options) -> None:
    """One output path for every tabular command: `rows_text` printed (options: its max_width, fit,
    flexible)."""
    click.echo(rows_text(columns, rows, fmt, **options), nl=False)


def rows_text(
    columns: list[str],
    rows: list[tuple],
    fmt: str,
    max_width: int | None = 60,
    fit: int | None = None,
    flexible: tuple[str, ...] = (),
) -> str:
    """The rows as a tabular command prints them (and `tracehouse mcp` answers them): an aligned table,
    Markdown, CSV, JSON records or NDJSON (one JSON object a line), each line ending in a newline. The
    table cuts a value over max_width (None: never) and, with `fit`, cuts the `flexible` columns, widest
    first, until a line fits in `fit` characters; the other formats keep every value whole."""

    if fmt in ("json", "ndjson"):
        records = [dict(zip(columns, row)) for row in rows]
        if fmt == "json":
            return json.dumps(records, default=str, indent=1) + "\n"
        return "".join(json.dumps(record, default=str) + "\n" for record in records)
    if fmt == "csv":
        buffer = io.StringIO()
        writer = csv.writer(buffer)
        writer.writerow(columns)
        writer.writerows([[_to_text(v) for v in row] for row in rows])
        return buffer.getvalue()
    numeric = [
        bool(rows)
        and all(
            v is None or (isinstance(v, (int, float, Decimal)) and not isinstance(v, bool))
            for v in (r[i] for r in rows)
        )
        for i in range(len(columns))
    ]
    cells = [[_to_text(v).replace("\n", " ") for v in row] for row in rows]
    if fmt == "md":
        return "".join(line + "\n" for line in _markdown_lines(columns, cells, numeric))
    widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(columns)]
    if max_width is not None:
        widths = [min(max_width, w) for w in widths]
    if fit is not None:
        widths = fit_widths(columns, widths, fit, flexible, cells)

    def cell(text: str, width: int, right: bool) -> str:
        text = cut(text, width)  # and say so below: the whole value is in --format json / csv
        return text.rjust(width) if right else text.ljust(width)

    lines = ["  ".join(cell(c, w, n) for c, w, n in zip(columns, widths, numeric)).rstrip()]
    lines.append("  ".join("-" * w for w in widths))
    for row in cells:
        lines.append("  ".join(cell(v, w, n) for v, w, n in zip(row, widths, numeric)).rstrip())
    if any(len(v) > w for row in cells for v, w in zip(row, widths)):
        whole = f"over {max_width} characters " if fit is None else ""
        lines.append(f"(values {whole}cut at …: --format json or csv shows them whole)")
    lines.append(f"({len(rows)} row{'s' if len(rows) != 1 else ''})")
    return "".join(line + "\n" for line in lines)


MIN_CUT_WIDTH = 8  # a column cut to fit keeps at least this many characters (or its header's)


def cut(text: str, width: int) -> str:
    """The text in at most `width` characters: cut at its end, the cut marked by `…`."""
    return text if len(text) <= width else text[: width - 1] + "…"


def fit_widths(
    columns: list[str], widths: list[int], limit: int, flexible: tuple[str, ...], cells: list[list[str]]
) -> list[int]:
    """The widths with the flexible columns narrowed, the widest first, one character at a time, until a
    line (columns two spaces apart) is at most `limit`: first only as far as each column's values stay
    as distinct as they are whole (what tells the lines apart is kept), then to its minimum."""
    widths = list(widths)
    floor = {i: max(MIN_CUT_WIDTH, len(c)) for i, c in enumerate(columns) if c in flexible}
    apart = {i: _distinct_width([row[i] for row in cells], floor[i]) for i in floor}
    for keep in (apart, floor):
        while sum(widths) + 2 * (len(widths) - 1) > limit:
            cuttable = [i for i in floor if widths[i] > keep[i]]
            if not cuttable:
                break
            widest = max(cuttable, key=lambda i: (widths[i], -i))
            widths[widest] -= 1
    return widths


def _distinct_width(values: list[str], floor: int) -> int:
    """The least width >= floor at which the values, cut, are as many distinct ones as whole."""
    whole = len(set(values))
    width = floor
    while width < max(map(len, values), default=0) and len({cut(v, width) for v in values}) < whole:
        width += 1
    return width


def _markdown_lines(columns: list[str], cells: list[list[str]], numeric: list[bool]) -> list[str]:
    """A GitHub Markdown table: `|` in a value escaped, numbers right-aligned."""

    def line(values) -> str:
        return "| " + " | ".join(v.replace("|", "\\|") for v in values) + " |"

    rule = "|" + "|".join("---:" if n else "---" for n in numeric) + "|"
    return [line(columns), rule, *(line(row) for row in cells)]


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

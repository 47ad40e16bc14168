"""The shape of sql/'s views that keeps planning cheap: DuckDB binds a view's whole tree again at every
reference to it, so a view that reads another view twice doubles that tree's binding (and, inlined, its
work). Each view reads each other view once, through a CTE where it needs the rows twice."""

from __future__ import annotations

import re

from tracehouse.warehouse.catalog import view_files


def _code(text: str) -> str:
    """The SQL without comments and string literals (a view's name in either is no read)."""
    text = re.sub(r"--[^\n]*|/\*.*?\*/", " ", text, flags=re.DOTALL)
    return re.sub(r"'(?:[^']|'')*'", "''", text)


def view_reads(text: str, views: set[str]) -> dict[str, int]:
    """How many times the SQL reads each of these views (FROM or JOIN it)."""
    counts: dict[str, int] = {}
    for name in re.findall(r"\b(?:FROM|JOIN)\s+([A-Za-z_][A-Za-z0-9_]*)", _code(text), flags=re.IGNORECASE):
        if name in views:
            counts[name] = counts.get(name, 0) + 1
    return counts


def test_view_reads_counts_from_and_join_only():
    sql = (
        "-- FROM steps (a comment)\nSELECT 'JOIN steps' AS s, steps_n FROM steps AS a "
        "JOIN kernels k USING (run_id) JOIN steps_other x USING (run_id)"
    )
    assert view_reads(sql, {"steps", "kernels", "steps_other"}) == {
        "steps": 1,
        "kernels": 1,
        "steps_other": 1,
    }


def test_every_view_reads_each_other_view_once():
    files = view_files()
    twice = {}
    for name, path in files.items():
        reads = view_reads(path.read_text(), set(files) - {name})
        if any(n > 1 for n in reads.values()):
            twice[name] = {v: n for v, n in reads.items() if n > 1}
    assert twice == {}, f"read these views once, through a CTE (WITH all_x AS (SELECT * FROM x)): {twice}"

"""warehouse/quoting.py is the one SQL quoting helper: it quotes what it must, and no second one exists.

A second helper (or an inline `'...' + x.replace("'", "''")`) is found by reading every Python file of
the project; a path with a quote in it must still ingest, be stored and read (the places that cannot
take a parameter: COPY ... TO, read_json, read_parquet, ATTACH, SET).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import duckdb
from tracehouse.warehouse.quoting import sql_identifier, sql_string

ROOT = Path(__file__).resolve().parents[1]
HELPER = ROOT / "warehouse" / "quoting.py"
PROJECT = ("ingest", "warehouse", "reports", "tracehouse", "synth", "bench", "cli.py")

# a call that doubles quotes: .replace("'", "''") or .replace('"', '""') (any spelling, chr() included)
_DOUBLING = {("'", "''"), ('"', '""')}
# SQL text that puts a Python value straight between quotes: TO '{path}', read_json('{f}', ...)
_INLINE = re.compile(r"""(?:\bTO|\bATTACH|read_\w+\(\[?|\bSET\s+\w+\s*=|\bIS)\s*'\{""", re.IGNORECASE)


def project_files() -> list[Path]:
    out = []
    for top in PROJECT:
        path = ROOT / top
        out += [path] if path.is_file() else sorted(path.rglob("*.py"))
    return out


def _literal(node: ast.AST) -> str | None:
    """The string a node spells: a constant, chr(N), or chr(N) * k."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "chr"
        and len(node.args) == 1
        and isinstance(node.args[0], ast.Constant)
    ):
        return chr(node.args[0].value)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
        base, times = _literal(node.left), node.right
        if base is not None and isinstance(times, ast.Constant) and isinstance(times.value, int):
            return base * times.value
    return None


def quoting_sites(path: Path) -> list[str]:
    """Every `.replace(q, qq)` doubling a quote, and every SQL text that inlines a value between quotes."""
    found = []
    tree = ast.parse(path.read_text(), filename=str(path))
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "replace"
            and len(node.args) == 2
            and (_literal(node.args[0]), _literal(node.args[1])) in _DOUBLING
        ):
            found.append(f"{path.relative_to(ROOT)}:{node.lineno}: doubles quotes by hand")
        if isinstance(node, ast.JoinedStr):
            text = "".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.values)
            if _INLINE.search(text):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}: a value inlined between quotes in SQL")
    return found


def test_one_quoting_helper():
    sites = [s for p in project_files() if p != HELPER for s in quoting_sites(p)]
    assert not sites, "quote through warehouse.quoting (sql_string, sql_identifier):\n" + "\n".join(sites)


def test_the_scan_finds_what_it_forbids(tmp_path):
    # the scan itself must see each spelling, or the test above could not fail
    probe = tmp_path / "probe.py"
    probe.write_text(
        'def a(t):\n    return "\'" + t.replace("\'", "\'\'") + "\'"\n'
        "def b(k):\n    return k.replace(chr(34), chr(34) * 2)\n"
        "def c(con, path):\n    con.execute(f\"COPY t TO '{path}' (FORMAT parquet)\")\n"
        "def d(con, f):\n    con.execute(f\"SELECT * FROM read_parquet(['{f}'])\")\n"
        "def e(con, v):\n    con.execute(f\"SET temp_directory = '{v}'\")\n"
        "def ok(con, v):\n    con.execute(f\"SELECT '{{x}}' AS name\")\n"
    )
    global ROOT
    saved, ROOT = ROOT, tmp_path
    try:
        assert len(quoting_sites(probe)) == 5
    finally:
        ROOT = saved


def test_quoted_values_read_as_themselves(tmp_path):
    con = duckdb.connect()
    for text in ["plain", "it's", "''", "a'; DROP TABLE x; --", "line\nbreak", "ünï"]:
        assert con.execute(f"SELECT {sql_string(text)}").fetchone()[0] == text
        assert con.execute(f"SELECT 1 AS {sql_identifier(text)}").description[0][0] == text
    assert sql_string(Path("/a'b")) == "'/a''b'"
    odd = tmp_path / "it's here"
    odd.mkdir()
    target = odd / "t.parquet"
    con.execute(f"COPY (SELECT 42 AS x) TO {sql_string(target)} (FORMAT parquet)")
    assert con.execute(f"SELECT x FROM read_parquet([{sql_string(target)}])").fetchone()[0] == 42

"""No SQL is edited as text in the layers (issue 16): a statement is changed with parameters, a view, or its
sqlglot tree, never with `str.replace` on its text, so what a query says is what its file or string says.

The check reads every module of the layers (ingest, warehouse, sql, reports, tracehouse, cli.py) with `ast`
and fails on a `.replace(...)` call whose receiver is SQL text: a string literal that reads as SQL, a name
that says it holds SQL (`sql`, `query`, `statement`, `*_SQL`), the text of a `.sql` file, or whose
arguments are SQL (a keyword, a `/* marker */`). Quoting a value (`text.replace("'", "''")`) and
`os.replace` are not SQL text and pass. The checker is tested on the three edits it replaced.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LAYERS = ("ingest", "warehouse", "sql", "reports", "tracehouse")
SQL_WORDS = re.compile(
    r"\b(SELECT|FROM|WHERE|JOIN|CREATE|VIEW|TABLE|INSERT|GROUP BY|ORDER BY)\b|/\*|^\s*--", re.MULTILINE
)
SQL_NAME = re.compile(r"(^|_)(sql|query|queries|statement|stmt|ddl)($|_)", re.IGNORECASE)


def _text(node: ast.AST) -> str | None:
    """The literal text of a str constant or the constant parts of an f-string."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(
            v.value for v in node.values if isinstance(v, ast.Constant) and isinstance(v.value, str)
        )
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return (_text(node.left) or "") + (_text(node.right) or "")
    return None


def _is_sql(node: ast.AST) -> bool:
    text = _text(node)
    if text is not None:
        return bool(SQL_WORDS.search(text))
    if isinstance(node, ast.Name):
        return bool(SQL_NAME.search(node.id))
    if isinstance(node, ast.Attribute):
        return bool(SQL_NAME.search(node.attr))
    if isinstance(node, ast.Call):  # (SQL_DIR / "x.sql").read_text(), open(...).read(), sql_of(...)
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr in ("read_text", "read"):
            return ".sql" in ast.unparse(func.value) or "sql" in ast.unparse(func.value).lower()
        name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
        return bool(SQL_NAME.search(name))
    if isinstance(node, ast.Subscript):
        return _is_sql(node.value)
    return False


def sql_text_edits(source: str, filename: str = "<string>") -> list[str]:
    """`file:line: code` of every .replace( applied to SQL text (receiver or arguments) in `source`."""
    found = []
    for node in ast.walk(ast.parse(source, filename)):
        if not (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "replace"
        ):
            continue
        receiver = node.func.value
        if isinstance(receiver, ast.Name) and receiver.id == "os":
            continue
        if _is_sql(receiver) or any(_text(a) is not None and SQL_WORDS.search(_text(a)) for a in node.args):
            found.append(f"{filename}:{node.lineno}: {ast.unparse(node)[:120]}")
    return found


def _layer_files() -> list[Path]:
    files = [ROOT / "cli.py"]
    for layer in LAYERS:
        files += sorted((ROOT / layer).rglob("*.py"))
    return [f for f in files if f.exists()]


def test_no_replace_on_sql_text_in_the_layers():
    files = _layer_files()
    assert len(files) > 40  # the layers were found (a wrong ROOT would pass over nothing)
    found = [
        hit for f in files for hit in sql_text_edits(f.read_text(encoding="utf-8"), str(f.relative_to(ROOT)))
    ]
    assert not found, "SQL edited as text (use parameters, a view or sqlglot):\n" + "\n".join(found)


# the three edits the check replaced (reports/run.py, reports/trend.py, ingest/decode.py) and others like them
BAD = [
    '''rows = con.execute(f"""SELECT * FROM kernel_summary WHERE share >= ?""".replace(
    "FROM kernel_summary", "FROM (SELECT * FROM kernel_summary)"), [0.01])''',
    """sql = (SQL_DIR / f"{name}.sql").read_text()
sql = sql.replace("CREATE OR REPLACE VIEW trend AS", "CREATE OR REPLACE TABLE trend AS", 1)""",
    """con.execute(TYPE_EVENTS_SQL.replace("/* extra args columns */", extra))""",
    """text = (Path("sql") / "steps.sql").read_text().replace("x", "y")""",
    """q = query.replace("?", value)""",
    """con.execute("SELECT * FROM runs WHERE run_id = 'RUN'".replace("RUN", run_id))""",
    """con.execute(template.replace("WHERE true", "WHERE run_id = 'x'"))""",
]
GOOD = [
    '''return "'" + text.replace("'", "''") + "'"''',
    """os.replace(partial, path)""",
    """name = name.replace("(anonymous namespace)::", "")""",
    """bracket.replace(replacement)  # a sqlglot node replaced in its tree""",
    """cells = [v.replace("\\n", " ") for v in row]""",
]


def test_the_check_finds_sql_edited_as_text():
    for code in BAD:
        assert sql_text_edits(code), code
    for code in GOOD:
        assert not sql_text_edits(code), code

"""The documentation in each sql/ file's header comment, as DuckDB comments on the view and its columns.

A header says what one row is (the first paragraph) and, after a `Columns:` line, what each column
means, one entry per line: `--   name[, name...]   TYPE[, TYPE...]   description`, continued on
more-indented lines. TYPE is the column's DuckDB type as DESCRIBE spells it (BIGINT, VARCHAR[],
DECIMAL(5,4), MAP(VARCHAR, DOUBLE), ...): one type for every name of the entry, or one per name in
order. tests/test_docs.py checks each header's names and types against DESCRIBE of its view.
`tracehouse sql "select * from duckdb_columns()"` then shows every column's meaning.
"""

from __future__ import annotations

import re

from tracehouse.warehouse.quoting import sql_string

# a DuckDB type as DESCRIBE writes it
_TYPE = (
    r"(?:BIGINT|UBIGINT|HUGEINT|INTEGER|SMALLINT|TINYINT|DOUBLE|FLOAT|VARCHAR|BOOLEAN|DATE|TIMESTAMP"
    r"|DECIMAL\(\d+,\s?\d+\)|MAP\([A-Z]+, [A-Z]+\)|STRUCT\([^)]*\))(?:\[\])*"
)
# a single name is followed by two or more spaces; a list of names (a, b, c) by at least one; then the
# types (one, or one per name) and the description
_ENTRY = re.compile(
    r"^--\s{2,4}(?:([A-Za-z_]\w*(?:\s*,\s*[A-Za-z_]\w*)+)\s+|([A-Za-z_]\w*)\s{2,})"
    rf"(?:({_TYPE}(?:,\s*{_TYPE})*)(?:\s+|$))?(.*)$"
)
_ONE_TYPE = re.compile(_TYPE)
_CONTINUATION = re.compile(r"^--\s{5,}(\S.*)$")


def header(sql: str) -> list[str]:
    lines = []
    for line in sql.splitlines():
        if not line.startswith("--"):
            break
        lines.append(line.rstrip())
    return lines


def view_comment(sql: str) -> str:
    """The header up to its `Columns:` line, as one paragraph."""
    text = []
    for line in header(sql):
        body = line[2:].strip()
        if body.lower().startswith("columns"):
            break
        text.append(body)
    return " ".join(t for t in text if t)


def column_comments(sql: str) -> dict[str, str]:
    """{column: description} from the header's entries (one entry may document several columns)."""
    docs: dict[str, str] = {}
    in_columns = False
    current: list[str] = []
    for line in header(sql):
        body = line[2:].strip()
        if body.lower().startswith("columns"):
            in_columns = True
            continue
        if not in_columns:
            continue
        entry = _ENTRY.match(line)
        if entry:
            current = [name.strip() for name in (entry.group(1) or entry.group(2)).split(",")]
            for name in current:
                docs[name] = entry.group(4).strip()
        elif (cont := _CONTINUATION.match(line)) and current:
            for name in current:
                docs[name] = f"{docs[name]} {cont.group(1).strip()}"
    return docs


def column_types(sql: str) -> dict[str, str | None]:
    """{column: its DuckDB type as the header states it (None: no type given)} for every documented
    column, in the header's order."""
    types: dict[str, str | None] = {}
    in_columns = False
    for line in header(sql):
        body = line[2:].strip()
        if body.lower().startswith("columns"):
            in_columns = True
            continue
        entry = _ENTRY.match(line) if in_columns else None
        if not entry:
            continue
        names = [name.strip() for name in (entry.group(1) or entry.group(2)).split(",")]
        stated = _ONE_TYPE.findall(entry.group(3) or "")
        if len(stated) == 1:
            stated = stated * len(names)
        for i, name in enumerate(names):
            types[name] = stated[i] if len(stated) == len(names) else None
    return types


def comment_statements(view: str, sql: str, columns: list[str]) -> list[str]:
    """COMMENT ON statements for a view and those of its columns that the header documents."""
    out = [f"COMMENT ON VIEW {view} IS {sql_string(view_comment(sql))}"]
    docs = column_comments(sql)
    for column in columns:
        if column in docs:
            out.append(f'COMMENT ON COLUMN {view}."{column}" IS {sql_string(docs[column])}')
    return out

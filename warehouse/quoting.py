"""The one way tracehouse writes a value into SQL text: a string literal or a quoted identifier.

Values go in as parameters (`?`) wherever DuckDB takes them; what cannot be a parameter (a file path in
COPY ... TO, ATTACH, read_parquet([...]), a SET value, a COMMENT, a struct spec of read_json) is
quoted here, so that a path or a name holding a quote reads as itself and never ends the literal.
tests/test_sql_quoting.py fails on a second quoting helper anywhere in the project.
"""

from __future__ import annotations


def sql_string(text: object) -> str:
    """A SQL string literal of str(text): `'it''s'` for it's."""
    return "'" + str(text).replace("'", "''") + "'"


def sql_identifier(name: str) -> str:
    """A quoted SQL identifier: the name in double quotes, each double quote in it doubled."""
    return '"' + name.replace('"', '""') + '"'

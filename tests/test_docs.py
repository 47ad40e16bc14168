"""Tests that keep the documentation honest: commands, SQL files and view columns."""

from __future__ import annotations

import re

import pytest
import sqlglot
from sqlglot import exp
from tracehouse.warehouse.catalog import connect, ordered_views, view_dependencies, view_files
from tracehouse.warehouse.docs import column_comments, column_types, view_comment
from tracehouse.warehouse.store import ALL_TABLES, Warehouse

from tracehouse.cli import main

COMMANDS = sorted(main.commands)


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_has_help_with_an_example(cli_runner, command):
    for flag in ("-h", "--help"):
        result = cli_runner.invoke(main, [command, flag])
        assert result.exit_code == 0, result.output
        assert "Example" in result.output, f"`tracehouse {command} --help` shows no example"


@pytest.mark.parametrize("name", sorted(view_files()))
def test_sql_file_is_one_documented_view(name):
    """Only CREATE [OR REPLACE] VIEW, named as the file, with a header saying what a row is."""
    sql = view_files()[name].read_text()
    statements = [s for s in sqlglot.parse(sql, read="duckdb") if s is not None]
    assert len(statements) == 1
    create = statements[0]
    assert isinstance(create, exp.Create) and create.kind == "VIEW", f"sql/{name}.sql must only create a view"
    assert create.this.name == name
    assert view_comment(sql), f"sql/{name}.sql has no header comment"
    assert "row" in view_comment(sql).lower(), f"sql/{name}.sql: the header must say what one row is"


def test_view_dependencies_are_known_and_acyclic():
    known = (
        set(view_files())
        | set(ALL_TABLES)
        | {
            "category_rules",
            "fusion_patterns",
            "fusion_pattern_steps",
            "launch_site_rules",
            "device_peaks",
            "one_time_rules",
        }
    )
    for name, path in view_files().items():
        unknown = view_dependencies(path.read_text()) - known
        assert not unknown, f"sql/{name}.sql reads unknown tables {unknown}"
    assert len(ordered_views()) == len(view_files())  # graphlib raises on a cycle


def test_every_public_view_column_is_documented(tmp_path):
    con = connect(Warehouse(tmp_path / "wh"))
    missing = {}
    for name, path in view_files().items():
        if name.startswith("_"):
            continue
        docs = column_comments(path.read_text())
        columns = [r[0] for r in con.execute(f"DESCRIBE {name}").fetchall()]
        undocumented = [c for c in columns if c not in docs]
        if undocumented:
            missing[name] = undocumented
    assert missing == {}
    comments = con.execute("SELECT count(*) FROM duckdb_columns() WHERE comment IS NOT NULL").fetchone()[0]
    assert comments > 100


# ---- typed headers: each view's header names its columns and their types, as DESCRIBE does ---------------
EVERY_COLUMN_OF = re.compile(r"^--\s*Columns:\s*every column of `(\w+)`", re.MULTILINE)


def header_problems(sql: str, described: dict[str, str], tables: dict[str, dict[str, str]]) -> list[str]:
    """What a view's header gets wrong against DESCRIBE of the view ({column: type}): a column it does not
    list, a type missing or not DESCRIBE's, a name that is no column. `Columns: every column of `t``
    lists t's columns with t's types (tables: {t: {column: type}})."""
    stated: dict[str, str | None] = {}
    for table in EVERY_COLUMN_OF.findall(sql):
        stated |= tables[table]
    stated |= column_types(sql)
    problems = [
        f"{column}: header says {stated[column]!r}, DESCRIBE {kind!r}"
        if column in stated
        else f"{column} ({kind}): not in the header"
        for column, kind in described.items()
        if stated.get(column) != kind
    ]
    return problems + [
        f"{column}: in the header, not a column" for column in stated if column not in described
    ]


def test_header_problems_finds_each_mistake():
    sql = (
        "-- v: one row per x.\n-- Columns:\n--   a, b   BIGINT, VARCHAR  two\n--   c      DOUBLE  a third\n"
        "--   d      a fourth without a type\n--   gone   BIGINT  dropped from the view\n"
    )
    described = {"a": "BIGINT", "b": "VARCHAR", "c": "HUGEINT", "d": "BIGINT", "e": "VARCHAR"}
    assert header_problems(sql, described, {}) == [
        "c: header says 'DOUBLE', DESCRIBE 'HUGEINT'",
        "d: header says None, DESCRIBE 'BIGINT'",
        "e (VARCHAR): not in the header",
        "gone: in the header, not a column",
    ]
    whole = "-- v: one row per x.\n-- Columns: every column of `t`, plus\n--   c   HUGEINT  more\n"
    assert header_problems(whole, {"a": "BIGINT", "c": "HUGEINT"}, {"t": {"a": "BIGINT"}}) == []


def test_every_view_header_states_its_columns_and_types(synth_warehouse):
    """Each view's header lists every column of the view with the type DESCRIBE gives it on a synthesized
    warehouse, and nothing else: the header is the view's typed signature."""
    wh, _ = synth_warehouse
    con = connect(wh, kept=False)

    def describe(name: str) -> dict[str, str]:
        return {row[0]: row[1] for row in con.execute(f"DESCRIBE {name}").fetchall()}

    wrong = {}
    for name, path in view_files().items():
        sql = path.read_text()
        tables = {t: describe(t) for t in EVERY_COLUMN_OF.findall(sql)}
        problems = header_problems(sql, describe(name), tables)
        if problems:
            wrong[name] = problems
    assert wrong == {}

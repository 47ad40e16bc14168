"""One engine seam (issue 16): warehouse/engine.py is the one connection factory; outside the warehouse layer no
module builds a connection itself nor branches on the engine (the layers themselves: tests/test_layers.py)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.test_layers import (
    LAYERS,
    OUTSIDE,
    ROOT,
    Layer,
    imports_of,
    layer_of,
    project_modules,
    read_layers,
    top_package,
    toy_tree,
)

# ---- one engine seam (issue 16) -----------------------------------------------------------------------
# warehouse/engine.py is the one connection factory: outside warehouse/, no module builds a connection
# itself (duckdb.connect, the catalogue's or Spark's builders) nor branches on the engine.
SEAM_BUILDERS = {
    "warehouse.catalog": {"connect", "connect_base", "build_catalog"},
    "warehouse.spark": None,
    "warehouse.spark_connection": None,
}  # None: any name of the module
# ingest's in-memory DuckDB is its transform engine over one file's events (ingest/sql/), not a reader of
# the warehouse: it may call duckdb.connect, and nothing else of this list
DUCKDB_CONNECT_ALLOWED = ("ingest",)


def seam_breaches(root: Path, layers: list[Layer], engines: tuple[str, ...]) -> list[str]:
    """Each place outside the warehouse layer that opens a connection other than through warehouse.engine or
    branches on the engine: one line each."""
    tops = {top_package(p) for layer in layers for p in layer.prefixes}
    mods = project_modules(root, tops)
    known = set(mods) | set(project_modules(root, set(OUTSIDE)))
    problems = []
    for module, path in mods.items():
        layer = layer_of(module, layers)
        if layer is None or layer.name == "warehouse":
            continue
        rel = path.relative_to(root)
        for imp in imports_of(module, path, known):
            names = SEAM_BUILDERS.get(imp.target, set())
            if names is None or (imp.name in names):
                what = imp.target + (f".{imp.name}" if imp.name else "")
                problems.append(
                    f"{rel}:{imp.line}: {module} uses {what}: open a connection with warehouse.engine.open"
                )
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "connect"
                and isinstance(node.func.value, ast.Name)
                and node.func.value.id == "duckdb"
                and top_package(module) not in DUCKDB_CONNECT_ALLOWED
            ):
                problems.append(
                    f"{rel}:{node.lineno}: {module} calls duckdb.connect: open a connection with "
                    "warehouse.engine.open (or open_tables)"
                )
            elif (
                isinstance(node, ast.ImportFrom)
                and node.module == "duckdb"
                and any(a.name == "connect" for a in node.names)
                and top_package(module) not in DUCKDB_CONNECT_ALLOWED
            ):
                problems.append(f"{rel}:{node.lineno}: {module} imports duckdb.connect")
            elif isinstance(node, ast.Compare):
                sides = [node.left, *node.comparators]
                if any(isinstance(s, ast.Constant) and s.value in engines for s in sides):
                    problems.append(
                        f"{rel}:{node.lineno}: {module} branches on the engine: decide it in warehouse/engine.py"
                    )
            elif (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id == "isinstance"
                and len(node.args) == 2
                and "DuckDBPyConnection" in ast.unparse(node.args[1])
            ):
                problems.append(
                    f"{rel}:{node.lineno}: {module} asks which engine a connection is: decide it in "
                    "warehouse/engine.py"
                )
    return problems


def test_one_connection_factory_and_no_engine_branch_outside_the_warehouse():
    from tracehouse.warehouse.engine import ENGINES

    problems = seam_breaches(ROOT, LAYERS, ENGINES)
    assert not problems, "\n".join(problems)


TOY_SEAM_LAYERS = read_layers("""<!-- layers: -->
| layer | modules | may import |
|---|---|---|
| reports | `reports` | warehouse |
| ingest | `ingest` | warehouse |
| warehouse | `warehouse` | |
""")
_TOY_WAREHOUSE = {
    "warehouse/__init__.py": "",
    "warehouse/catalog.py": "def connect(): pass\ndef focus(): pass\n",
    "warehouse/spark.py": "def connect_spark(): pass\n",
    "warehouse/engine.py": "import duckdb\nfrom warehouse.catalog import connect\n"
    "def open(e):\n    return duckdb.connect() if e == 'duckdb' else None\n",
    "reports/__init__.py": "",
    "ingest/__init__.py": "",
}


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        ("from warehouse.catalog import connect\n", "uses warehouse.catalog.connect"),
        ("def f():\n    from warehouse.spark import connect_spark\n", "uses warehouse.spark.connect_spark"),
        ("import warehouse.spark\n", "uses warehouse.spark"),
        ("import duckdb\ncon = duckdb.connect()\n", "calls duckdb.connect"),
        ("from duckdb import connect\n", "imports duckdb.connect"),
        ("def f(engine):\n    return 1 if engine == 'spark' else 2\n", "branches on the engine"),
        ("def f(engine):\n    return 'duckdb' != engine\n", "branches on the engine"),
        (
            "import duckdb\ndef f(con):\n    return isinstance(con, duckdb.DuckDBPyConnection)\n",
            "asks which engine",
        ),
        (
            "from warehouse.catalog import focus\nfrom warehouse.engine import open\n",
            None,
        ),  # the seam: allowed
    ],
)
def test_the_seam_checker_finds_each_breach(tmp_path, code, expected):
    root = toy_tree(tmp_path, {**_TOY_WAREHOUSE, "reports/r.py": code})
    problems = seam_breaches(root, TOY_SEAM_LAYERS, ("duckdb", "spark"))
    if expected is None:
        assert problems == [], problems
    else:
        assert any(expected in p and p.startswith("reports/r.py:") for p in problems), problems


def test_ingest_may_open_its_own_duckdb_and_nothing_else(tmp_path):
    root = toy_tree(
        tmp_path,
        {
            **_TOY_WAREHOUSE,
            "ingest/i.py": "import duckdb\ncon = duckdb.connect()\nfrom warehouse.catalog import connect\n",
        },
    )
    problems = seam_breaches(root, TOY_SEAM_LAYERS, ("duckdb", "spark"))
    assert [p.split(": ", 1)[1] for p in problems] == [
        "ingest.i uses warehouse.catalog.connect: open a connection with warehouse.engine.open"
    ], problems

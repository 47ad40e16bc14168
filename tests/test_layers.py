"""The import graph of the layered code: one-way layers, no cycle, no private name crossing a module.

The layers and what each may import are the table in ARCHITECTURE.md (read here, so the document stays
true). Every import counts, function-local and `if TYPE_CHECKING:` ones included: a local import that
dodges a cycle is still the cycle. synth/, bench/ and tests/ sit outside the layers (they may import
anything) but a layered module importing them must be allowed to by the table.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
OUTSIDE = ("synth", "bench", "tests")  # the project's, outside the layers
# The layers' folders of a clone, installed as tracehouse.<folder> (pyproject's package-dir): the checker reads
# the tree by folder, so an import of tracehouse.warehouse.x is an import of the folder's module warehouse.x.
NAMESPACED = ("warehouse", "ingest", "reports", "sql", "synth")


def in_checkout(name: str) -> str:
    """The module's name by its folder in the clone: tracehouse.warehouse.x -> warehouse.x."""
    parts = name.split(".")
    return (
        ".".join(parts[1:])
        if len(parts) > 1 and parts[0] == "tracehouse" and parts[1] in NAMESPACED
        else name
    )


@dataclass(frozen=True)
class Layer:
    name: str
    prefixes: tuple[str, ...]
    may_import: frozenset[str]


def read_layers(text: str) -> list[Layer]:
    """The layer table of ARCHITECTURE.md: | layer | `module`, `module` | layer, layer |."""
    block = text.split("<!-- layers:", 1)[1]
    layers = []
    for line in block.splitlines()[1:]:
        if not line.startswith("|"):
            if layers:
                break
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 3 or cells[0] in ("layer", "") or set(cells[0]) <= {"-"}:
            continue
        layers.append(
            Layer(
                cells[0],
                tuple(re.findall(r"`([\w.]+)`", cells[1])),
                frozenset(w for w in re.split(r"[,\s]+", cells[2]) if w),
            )
        )
    return layers


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def project_modules(root: Path, tops: set[str]) -> dict[str, Path]:
    """Every module under the given top-level names (a package folder or a module file)."""
    mods = {}
    for top in sorted(tops):
        if (root / f"{top}.py").is_file():
            mods[top] = root / f"{top}.py"
        if (root / top).is_dir():
            for p in sorted((root / top).rglob("*.py")):
                mods[module_name(p, root)] = p
    return mods


@dataclass(frozen=True)
class Import:
    importer: str
    target: str  # the project module imported
    name: str | None  # the name taken from it (from X import name), or an attribute read (X.name)
    line: int


def imports_of(module: str, path: Path, known: set[str]) -> list[Import]:
    """The project modules a module imports (every import statement, wherever it is), and the names it
    takes from them: `from X import y` (y a module of X: an import of X.y), and `X.y` read from a module
    imported whole (`import X`, `from pkg import X`)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: list[Import] = []
    aliases: dict[str, str] = {}  # a local name bound to a project module
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                name = in_checkout(a.name)
                if top_package(name) in {top_package(k) for k in known}:
                    target = _known_prefix(name, known)
                    found.append(Import(module, target, None, node.lineno))
                    if a.asname:
                        aliases[a.asname] = name
                    else:
                        aliases[a.name.split(".")[0]] = a.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1] if package else []
                base = ".".join([*anchor, base] if base else anchor)
            base = in_checkout(base)
            if top_package(base) not in {top_package(k) for k in known}:
                continue
            for a in node.names:
                sub = in_checkout(f"{base}.{a.name}")
                if sub in known:
                    found.append(Import(module, sub, None, node.lineno))
                    aliases[a.asname or a.name] = sub
                else:
                    found.append(Import(module, _known_prefix(base, known), a.name, node.lineno))
    for node in ast.walk(tree):  # X._name on a module imported whole
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases:
            target = aliases[node.value.id]
            if f"{target}.{node.attr}" not in known:
                found.append(Import(module, _known_prefix(target, known), node.attr, node.lineno))
    return found


def top_package(name: str) -> str:
    return name.split(".")[0]


def _known_prefix(name: str, known: set[str]) -> str:
    parts = name.split(".")
    for i in range(len(parts), 0, -1):
        if ".".join(parts[:i]) in known:
            return ".".join(parts[:i])
    return name


def layer_of(module: str, layers: list[Layer]) -> Layer | None:
    best = None
    for layer in layers:
        for prefix in layer.prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and (
                best is None or len(prefix) > len(best[0])
            ):
                best = (prefix, layer)
    return best[1] if best else None


def outside_of(module: str) -> str | None:
    return top_package(module) if top_package(module) in OUTSIDE else None


def check(root: Path, layers: list[Layer]) -> list[str]:
    """Every breach of the layer table, as one line each (empty: the import graph keeps the layers)."""
    # every top-level module and package of the checkout is in a layer or outside them: a new one is
    # reported until the table places it
    on_disk = {p.stem for p in root.glob("*.py")} | {
        p.name for p in root.iterdir() if p.is_dir() and (p / "__init__.py").is_file()
    }
    tops = {top_package(p) for layer in layers for p in layer.prefixes} | (on_disk - set(OUTSIDE) - {"setup"})
    layered = project_modules(root, tops)
    known = set(layered) | set(project_modules(root, set(OUTSIDE)))
    problems = []
    graph: dict[str, set[str]] = {m: set() for m in layered}
    for module, path in layered.items():
        own = layer_of(module, layers)
        if own is None:
            problems.append(f"{module}: in no layer of ARCHITECTURE.md")
            continue
        for imp in imports_of(module, path, known):
            where = f"{path.relative_to(root)}:{imp.line}"
            target_layer = layer_of(imp.target, layers)
            target_name = target_layer.name if target_layer else outside_of(imp.target)
            if target_name != own.name and target_name not in own.may_import:
                problems.append(
                    f"{where}: {module} ({own.name}) imports {imp.target} ({target_name}): "
                    f"{own.name} may import only {', '.join(sorted(own.may_import)) or 'nothing'}"
                )
            if (
                imp.name
                and imp.name.startswith("_")
                and not imp.name.startswith("__")
                and imp.target != module
            ):
                problems.append(
                    f"{where}: {module} uses {imp.target}.{imp.name}, a private name of another module"
                )
            if imp.target in graph and imp.target != module:
                graph[module].add(imp.target)
    problems += [f"import cycle: {' -> '.join(c)}" for c in cycles(graph)]
    return list(dict.fromkeys(problems))  # one line per breach (`from X import a, b` is one import of X)


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle per strongly connected component of more than one module (Tarjan), as a path."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(_path_through(graph, set(component)))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def _path_through(graph: dict[str, set[str]], component: set[str]) -> list[str]:
    """A cycle inside a strongly connected component: from its first module back to it (breadth first)."""
    start = min(component)
    paths = {start: [start]}
    queue = [start]
    while queue:
        v = queue.pop(0)
        for w in sorted(graph[v] & component):
            if w == start:
                return paths[v] + [start]
            if w not in paths:
                paths[w] = paths[v] + [w]
                queue.append(w)
    return sorted(component)  # pragma: no cover


def defined_names(path: Path) -> set[str] | None:
    """The names a module defines at its top level (functions, classes, assignments, imports, also inside
    top-level if / try blocks); None when it star-imports (its names cannot be known statically)."""
    names: set[str] = set()

    def visit(body) -> bool:
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                    names.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                for a in node.names:
                    if a.name == "*":
                        return False
                    names.add(a.asname or a.name.split(".")[0])
            elif isinstance(node, (ast.If, ast.Try, ast.With)):
                for block in ("body", "orelse", "finalbody"):
                    if not visit(getattr(node, block, [])):
                        return False
                for handler in getattr(node, "handlers", []):
                    if not visit(handler.body):
                        return False
        return True

    return names if visit(ast.parse(path.read_text()).body) else None


def missing_imports(root: Path, tops: set[str]) -> list[str]:
    """Imports, anywhere in these top-level folders, of a project module or name that does not exist.
    (An environment with another checkout installed may still find it there: this says so statically.)"""
    mods = project_modules(root, tops)
    known = set(mods)
    project_tops = {top_package(m) for m in known}
    problems = []
    for path in mods.values():
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            where = f"{path.relative_to(root)}:{getattr(node, 'lineno', 0)}"
            if isinstance(node, ast.Import):
                for a in node.names:
                    name = in_checkout(a.name)
                    if top_package(name) in project_tops and name not in known:
                        problems.append(f"{where}: import {a.name}: no such module")
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                module = in_checkout(node.module)
                if top_package(module) not in project_tops:
                    continue
                if module not in known:
                    problems.append(f"{where}: from {node.module}: no such module")
                    continue
                defined = defined_names(mods[module])
                for a in node.names:
                    if in_checkout(f"{module}.{a.name}") in known or defined is None:
                        continue
                    if a.name not in defined:
                        problems.append(
                            f"{where}: from {node.module} import {a.name}: {node.module} has no {a.name}"
                        )
    return problems


LAYERS = read_layers((ROOT / "ARCHITECTURE.md").read_text())


def test_the_layer_table_is_read():
    names = [layer.name for layer in LAYERS]
    assert names == ["cli", "reports", "ingest", "warehouse", "errors"]
    assert {p for layer in LAYERS for p in layer.prefixes} >= {"reports", "ingest", "warehouse", "sql"}
    for layer in LAYERS:  # each layer lists only layers of the table, or the code outside them
        assert layer.may_import <= set(names) | set(OUTSIDE), layer


def test_the_table_names_modules_that_exist():
    for layer in LAYERS:
        for prefix in layer.prefixes:
            path = ROOT / prefix.replace(".", "/")
            assert path.with_suffix(".py").is_file() or (path / "__init__.py").is_file(), (layer.name, prefix)


def test_architecture_names_only_files_that_exist():
    """Every concrete path ARCHITECTURE.md names (a placeholder such as sql/<view>.sql or NN_*.sql aside) is
    in the checkout: a moved module fails here until the page follows it."""
    text = (ROOT / "ARCHITECTURE.md").read_text()
    named = set(re.findall(r"(?<![\w/.<])((?:[a-z_]+/)+[\w.-]*)", text))
    concrete = {p for p in named if not re.search(r"[<*]|NN", p) and not p.startswith("tables/")}
    assert len(concrete) > 30
    missing = sorted(p for p in concrete if not (ROOT / p).exists())
    assert not missing, missing


def test_every_project_import_names_what_exists():
    """Every import of the project's own modules, in the layers, synth/, bench/ and tests/, names a module
    or a top-level name that this checkout has (a moved module or a renamed seam is caught here, even where
    another installed copy of tracehouse would answer the import)."""
    tops = {top_package(p) for layer in LAYERS for p in layer.prefixes} | set(OUTSIDE)
    problems = missing_imports(ROOT, tops)
    assert not problems, "\n".join(problems)


def test_a_missing_module_or_name_is_found(tmp_path):
    files = {
        "low/__init__.py": "",
        "low/a.py": "X = 1\nif True:\n    def f(): pass\n",
        "top/__init__.py": "",
        "top/b.py": (
            "from low.a import X, f, gone\nfrom low import a, nothere\n"
            "import low.absent\n\ndef g():\n    from low.moved import h\n"
        ),
    }
    problems = missing_imports(toy_tree(tmp_path, files), {"low", "top"})
    assert [p.split(": ", 1)[1] for p in problems] == [
        "from low.a import gone: low.a has no gone",
        "from low import nothere: low has no nothere",
        "import low.absent: no such module",
        "from low.moved: no such module",
    ], problems


def test_imports_keep_the_layers():
    problems = check(ROOT, LAYERS)
    assert not problems, "\n".join(problems)


# The checker itself, on a small package written here: each kind of breach is found.
TOY_LAYERS = read_layers("""<!-- layers: -->
| layer | modules | may import |
|---|---|---|
| top | `top` | low |
| low | `low` | |
""")


def toy_tree(tmp_path: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return tmp_path


@pytest.mark.parametrize(
    ("files", "expected"),
    [
        (
            {
                "low/__init__.py": "",
                "low/a.py": "def f():\n    from top import b\n",
                "top/__init__.py": "",
                "top/b.py": "",
            },
            "low.a (low) imports top.b (top)",
        ),
        (
            {
                "low/__init__.py": "",
                "low/a.py": "def _p(): pass\n",
                "top/__init__.py": "",
                "top/b.py": "from low.a import _p\n",
            },
            "top.b uses low.a._p, a private name",
        ),
        (
            {
                "low/__init__.py": "",
                "low/a.py": "def _p(): pass\n",
                "top/__init__.py": "",
                "top/b.py": "from low import a\n\ndef g():\n    return a._p()\n",
            },
            "top.b uses low.a._p, a private name",
        ),
        (
            {
                "low/__init__.py": "",
                "low/a.py": "import low.b\n",
                "low/b.py": "def f():\n    from low import a\n",
            },
            "import cycle: low.a -> low.b -> low.a",
        ),
        (
            {
                "low/__init__.py": "",
                "low/a.py": "from synth import x\n",
                "synth/__init__.py": "",
                "synth/x.py": "",
            },
            "low.a (low) imports synth.x (synth)",
        ),
        ({"low/__init__.py": "", "low/a.py": "", "odd.py": ""}, "odd: in no layer"),
        ({"low/__init__.py": "", "low/a.py": "", "notes/x.py": ""}, None),  # a folder that is no package
    ],
)
def test_the_checker_finds_each_breach(tmp_path, files, expected):
    problems = check(toy_tree(tmp_path, files), TOY_LAYERS)
    if expected is None:
        assert problems == []
    else:
        assert any(expected in p for p in problems), problems


def test_the_checker_allows_what_the_table_allows(tmp_path):
    files = {
        "low/__init__.py": "",
        "low/a.py": "def pub(): pass\n",
        "low/b.py": "from low.a import pub\n",
        "top/__init__.py": "",
        "top/c.py": "import low.a\nfrom low import a\nx = a.pub\n",
    }
    assert check(toy_tree(tmp_path, files), TOY_LAYERS) == []


def test_a_module_in_no_layer_is_reported(tmp_path):
    layers = read_layers(
        "<!-- layers: -->\n| layer | modules | may import |\n|---|---|---|\n| low | `low` | |\n"
    )
    problems = check(
        toy_tree(
            tmp_path,
            {"low/__init__.py": "", "low/a.py": "import top.b\n", "top/__init__.py": "", "top/b.py": ""},
        ),
        layers,
    )
    assert "top.b: in no layer of ARCHITECTURE.md" in problems, problems
    assert any("low.a (low) imports top.b (None)" in p for p in problems), problems

"""What a new user installs: the package data the code reads ships in the wheel (a non-editable
`pip install .` lacked reports/templates/_page.js, so every HTML page failed), and `make demo` installs
the core only (no pyspark, ~490 MB, no test tools)."""

from __future__ import annotations

import fnmatch
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _tracked(folder: str) -> list[Path]:
    try:
        out = subprocess.run(
            ["git", "ls-files", folder], cwd=ROOT, capture_output=True, text=True, check=True
        )
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    return [ROOT / line for line in out.stdout.splitlines()]


LAYER_FOLDERS = ("warehouse", "ingest", "reports", "sql", "synth")


def _package_of(folder: Path) -> str:
    parts = folder.relative_to(ROOT).parts
    return ".".join(parts) if parts[0] == "tracehouse" else "tracehouse." + ".".join(parts)


def test_one_package_holds_every_folder_and_data_file():
    """One package, tracehouse.*: each layer's folder of a clone is installed as tracehouse.<folder>
    (package-dir), every folder holding a tracked file is a listed package, and every data file the code
    reads is package data (a wheel without them cannot report)."""
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert setuptools["package-dir"] == {
        "tracehouse": "tracehouse",
        **{f"tracehouse.{folder}": folder for folder in LAYER_FOLDERS},
    }
    patterns = setuptools["package-data"]["*"]
    folders, missing = set(), []
    for top in ("tracehouse", *LAYER_FOLDERS):
        for path in _tracked(top):
            folders.add(_package_of(path.parent))
            if path.suffix in (".py", ".md") or path.name.startswith("."):  # code; notes for developers
                continue
            if not any(fnmatch.fnmatch(path.name, pat) for pat in patterns):
                missing.append(str(path.relative_to(ROOT)))
    assert not missing, f"not in [tool.setuptools.package-data]: {missing}"
    assert sorted(folders) == sorted(setuptools["packages"]), "pyproject's packages list is not the folders"


def test_code_imports_the_layers_through_the_namespace():
    """`import warehouse` works by accident in a clone's root (the current folder is on sys.path) and gives
    a second copy of every module; the code imports tracehouse.warehouse, ... only."""
    import ast

    bare = []
    for top in ("tracehouse", *LAYER_FOLDERS, "tests", "bench"):
        for path in _tracked(top):
            if path.suffix != ".py":
                continue
            for node in ast.walk(ast.parse(path.read_text())):
                names = (
                    [a.name for a in node.names]
                    if isinstance(node, ast.Import)
                    else [node.module or ""]
                    if isinstance(node, ast.ImportFrom) and not node.level
                    else []
                )
                bare += [f"{path.relative_to(ROOT)}: {n}" for n in names if n.split(".")[0] in LAYER_FOLDERS]
    assert bare == [], bare


def test_the_page_script_is_read_from_the_package():
    from tracehouse.reports import render

    assert render.PAGE_JS and (ROOT / "reports" / "templates" / "_page.js").is_file()


def test_make_demo_installs_the_core_only(tmp_path):
    try:
        out = subprocess.run(
            ["make", "-n", "demo", f"VENV={tmp_path / 'venv'}"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError) as e:
        pytest.skip(f"make is not available ({e})")
    installs = [line.split("pip install", 1)[1].split() for line in out.splitlines() if "pip install" in line]
    assert ["-q", "-e", "."] in installs, out  # the core, from the checkout
    assert not any("spark" in arg or "test" in arg for args in installs for arg in args), out

"""The layers of ARCHITECTURE.md as import-linter contracts (pyproject.toml's [tool.importlinter]): the CLI
over reports and ingest, which never import each other, over the warehouse (and sql/), over the errors;
only the CLI imports the synthesizer. import-linter (grimp) finds a package by its folder on sys.path and
cannot follow pyproject's package-dir, so the test lays the namespace out as installed (each folder of
package-dir copied to its place under tracehouse/) in a scratch folder and runs lint-imports there.
tests/test_layers.py keeps what a contract cannot say: the table itself, cycles, private names, paths."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"


def _mirror(into: Path) -> Path:
    """The installed layout of the package under `into`, with pyproject.toml beside it."""
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    package_dir = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    skip = shutil.ignore_patterns("__pycache__", "*.pyc")
    for package, folder in sorted(package_dir.items()):  # tracehouse first, then its sub-packages
        shutil.copytree(ROOT / folder, into / package.replace(".", "/"), ignore=skip, dirs_exist_ok=True)
    shutil.copy(ROOT / "pyproject.toml", into / "pyproject.toml")
    return into


def _lint(root: Path) -> subprocess.CompletedProcess:
    if not LINT_IMPORTS.exists():
        pytest.skip("import-linter is not installed (pip install -e '.[test]')")
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache"],
        check=False,
        cwd=root,
        env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_layers_contracts_are_kept(tmp_path):
    result = _lint(_mirror(tmp_path))
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert "0 broken" in result.stdout and "2 kept" in result.stdout, result.stdout[-2000:]


def test_a_warehouse_module_importing_reports_breaks_the_layers(tmp_path):
    """The contracts can fail: an upward import (the warehouse reading a report) is named."""
    root = _mirror(tmp_path)
    store = root / "tracehouse" / "warehouse" / "store.py"
    store.write_text(store.read_text() + "\nfrom tracehouse.reports import runs_table  # noqa\n")
    result = _lint(root)
    assert result.returncode == 1 and "tracehouse.warehouse.store -> tracehouse.reports" in result.stdout, (
        result.stdout[-3000:]
    )


def test_the_contracts_name_the_modules_of_architectures_table():
    """The contracts and ARCHITECTURE.md's table (tests/test_layers.py reads it) place the same modules: a module
    added to the table and not to the contracts (or the other way round) fails here."""
    from tests.test_layers import LAYERS

    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    [layers] = [c for c in config["contracts"] if c["type"] == "layers"]
    in_contract = {
        f"{container}.{name.strip()}"
        for container in layers["containers"]
        for layer in layers["layers"]
        for name in layer.replace("|", ":").split(":")
    }
    in_table = {
        prefix if prefix.startswith("tracehouse.") else f"tracehouse.{prefix}"
        for layer in LAYERS
        for prefix in layer.prefixes
        if prefix not in ("tracehouse", "cli")  # the package itself; a clone's cli.py is not installed
    }
    assert in_contract == in_table

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


def test_every_data_file_of_the_packages_is_package_data():
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    patterns = project["tool"]["setuptools"]["package-data"]["*"]
    packages = [p.rstrip("*") for p in project["tool"]["setuptools"]["packages"]["find"]["include"]]
    missing = []
    for package in packages:
        for path in _tracked(package):
            if path.suffix in (".py", ".md") or path.name.startswith("."):  # code; notes for developers
                continue
            if not any(fnmatch.fnmatch(path.name, pat) for pat in patterns):
                missing.append(str(path.relative_to(ROOT)))
    assert not missing, f"not in [tool.setuptools.package-data]: {missing}"


def test_the_page_script_is_read_from_the_package():
    from reports import render

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

"""Every module of the project stays under 600 lines (issue 35): a module that grows past it is split by
concern into modules that each read as one idea. Counted: every .py file of the checkout's own folders
(the package's layers, synth/, bench/, tests/, the tools at the root), not the virtual environment and not
tests/data/ (recorded inputs and the scripts that recorded them, kept as they were run). Function size
has its own bound: ruff's C901 at complexity 15 (pyproject.toml)."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAX_LINES = 600
NOT_OURS = {".venv", ".git", "build", "dist", "node_modules"}  # folders of tools, not the project's
KEPT_AS_RECORDED = Path("tests") / "data"


def project_modules(root: Path) -> list[Path]:
    """The project's .py files under root, as paths relative to it."""
    found = []
    for path in root.rglob("*.py"):
        rel = path.relative_to(root)
        if NOT_OURS & set(rel.parts) or any(part.endswith(".egg-info") for part in rel.parts):
            continue
        if rel.is_relative_to(KEPT_AS_RECORDED) or "__pycache__" in rel.parts:
            continue
        found.append(rel)
    return sorted(found)


def oversize(root: Path, limit: int = MAX_LINES) -> list[str]:
    """`path: N lines` for each project module over the limit."""
    sizes = {rel: len((root / rel).read_text(encoding="utf-8").splitlines()) for rel in project_modules(root)}
    return [f"{rel}: {n} lines" for rel, n in sorted(sizes.items(), key=lambda kv: -kv[1]) if n > limit]


def test_no_module_is_over_600_lines():
    modules = project_modules(ROOT)
    assert Path("warehouse/catalog.py") in modules and Path("tests/test_module_size.py") in modules
    assert not any(rel.is_relative_to(KEPT_AS_RECORDED) for rel in modules)
    assert oversize(ROOT) == [], f"split by concern (over {MAX_LINES} lines)"


def test_an_oversize_module_is_named(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "big.py").write_text("x = 1\n" * (MAX_LINES + 1))
    (tmp_path / "pkg" / "small.py").write_text("x = 1\n" * MAX_LINES)
    (tmp_path / ".venv" / "lib").mkdir(parents=True)
    (tmp_path / ".venv" / "lib" / "huge.py").write_text("x = 1\n" * 5000)
    (tmp_path / "tests" / "data").mkdir(parents=True)
    (tmp_path / "tests" / "data" / "recorder.py").write_text("x = 1\n" * 5000)
    assert oversize(tmp_path) == [f"{Path('pkg/big.py')}: {MAX_LINES + 1} lines"]

"""The README's "Everyday use" commands run as written (in a fresh folder, on the synthetic traces
they write), and docs/python.md's snippet works. A README that lies fails here."""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path

from click.testing import CliRunner

from tracehouse.cli import main

ROOT = Path(__file__).resolve().parents[1]


def _block(markdown: str, heading: str, lang: str) -> str:
    section = markdown.split(f"## {heading}\n", 1)[1].split("\n## ", 1)[0]
    return re.search(rf"```{lang}\n(.*?)```", section, re.DOTALL).group(1)


def _commands() -> list[str]:
    block = _block((ROOT / "README.md").read_text(), "Everyday use", "sh")
    return [line for line in block.splitlines() if line.strip()]


def test_readme_shows_every_everyday_command():
    used = {shlex.split(line)[1] for line in _commands() if line.startswith("tracehouse ")}
    for command in ("ingest", "runs", "report", "diff", "trend", "sql", "schema", "label", "check"):
        assert command in used, f"README's Everyday use does not show `tracehouse {command}`"
    readme = (ROOT / "README.md").read_text()
    assert "../shared" not in readme.replace("../shared/traces", "")


def test_project_stands_on_its_own():
    """No file of the project cites the product contract outside it: what a user or maintainer needs of it is
    in docs/ (docs/words.md: the words and promises). Real traces under ../shared/traces are read by tests
    and benches (skipped without them), which is not a citation."""
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True)
    citing = [
        path
        for path in tracked.stdout.split()
        if (ROOT / path).is_file() and "PRODUCT" + ".md" in (ROOT / path).read_text(errors="replace")
    ]
    assert citing == [], f"these files cite the contract outside the project: {citing}"
    assert "docs/words.md" in (ROOT / "README.md").read_text()


def test_readme_commands_run_as_written(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # a fresh folder: nothing of the checkout's state is used
    runner = CliRunner()
    # as a user runs them: ingest's own default (none: `report` derives the run it shows before reading)
    env: dict[str, str | None] = {"TRACEHOUSE_DERIVE": None}
    outputs = {}
    for line in _commands():
        line = line.replace("/tmp/th", str(tmp_path / "th"))
        words = shlex.split(line)
        if words[0] == ".":  # activating the venv: we run inside it already
            continue
        if words[0] == "export":
            key, _, value = words[1].partition("=")
            env[key] = value
            continue
        assert words[0] == "tracehouse", line
        result = runner.invoke(main, words[1:], env=env)
        assert result.exit_code == 0, (line, result.output)
        outputs[words[1]] = result.stdout
    assert len([ln for ln in outputs["runs"].splitlines() if "DeepSeek-R1" in ln]) == 2
    assert (tmp_path / "th" / "run.html").read_text().startswith("<!doctype html>")
    assert (tmp_path / "th" / "trend.html").is_file()
    assert "| gemm |" in outputs["diff"]  # the 10 % slower nvjet GEMMs show up
    assert "config=tp2" in outputs["label"]
    assert "all invariants hold" in outputs["check"]
    assert not (tmp_path / "tracehouse-data").exists()  # TRACEHOUSE_WAREHOUSE was used

    # docs/python.md, its first block, on that warehouse
    code = _block("## x\n" + (ROOT / "docs" / "python.md").read_text(), "x", "python")
    code = code.replace('"tracehouse-data"', repr(env["TRACEHOUSE_WAREHOUSE"]))
    code = code.replace("rel.show()", "")
    scope: dict = {}
    snippet = compile(code.replace('["3f2a9c..."]', "[table.num_rows and 'none']"), "docs/python.md", "exec")
    exec(snippet, scope)  # noqa: S102 (the doc's own snippet)
    assert scope["table"].num_rows == 10 and scope["table"].column_names[:2] == ["name", "category"]

"""`tracehouse mcp` (issue 38): the Model Context Protocol server, driven end to end by the SDK's own client
over stdio (a `tracehouse mcp` process, as an agent's client starts it), each tool's answer checked against
the CLI's output for the same question on the same synthesized warehouse."""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

import pytest
from warehouses import scenario

DECODE = {"ranks": 2, "steps": 3, "layers": 2, "seed": 7}  # conftest's REPORT_SCENARIOS serving-decode
ROOT = Path(__file__).resolve().parents[1]
TOOLS = {"runs", "report", "schema", "sql", "diff", "trend", "whatif", "export"}


@pytest.fixture(scope="module")
def pair(warehouses):
    """Two runs of the same decode workload, the second with its nvjet GEMMs 30 % slower (a diff that
    compares step for step): (warehouse root, base run id, target run id)."""
    built = warehouses.get(
        [
            scenario("serving-decode", **DECODE),
            scenario("serving-decode", **DECODE, slow_kernel=("nvjet", 1.3)),
        ],
        derived=True,
    )
    base, target = built.run_ids
    return str(built.root), base, target


README_WAREHOUSE = "/data/tracehouse"


def readme_config() -> dict:
    """The README's MCP client configuration: its one server."""
    section = (ROOT / "README.md").read_text().split("## Agents (MCP)\n", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```json\n(.*?)```", section, re.DOTALL).group(1)
    return json.loads(block)["mcpServers"]["tracehouse"]


def test_readme_configuration_starts_the_server():
    config = readme_config()
    assert config["command"] == "tracehouse"
    assert config["args"] == ["mcp", "--warehouse", README_WAREHOUSE]


def ask(root: str, calls: list[tuple[str, dict]], row_limit: int | None = None):
    """One client session with `tracehouse mcp --warehouse root`: (the tool names it lists, the result of
    each call in order)."""
    pytest.importorskip("mcp", reason="tracehouse[mcp] is not installed (the test extra installs it)")
    import anyio
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    # the README's client configuration, its warehouse this one, its `tracehouse` this interpreter's
    args = [root if arg == README_WAREHOUSE else arg for arg in readme_config()["args"]]
    args += ["--row-limit", str(row_limit)] if row_limit else []
    server = StdioServerParameters(
        command=sys.executable, args=["-m", "tracehouse.cli", *args], env=dict(os.environ)
    )

    async def session():
        async with stdio_client(server) as (read, write), ClientSession(read, write) as client:
            await client.initialize()
            names = {tool.name for tool in (await client.list_tools()).tools}
            return names, [await client.call_tool(name, arguments) for name, arguments in calls]

    return anyio.run(session)


def text(result) -> str:
    assert not result.is_error, result.content[0].text
    [block] = result.content
    return block.text


def cli(cli_runner, root: str, *args: str) -> str:
    """The CLI's stdout for these arguments (exit code 0)."""
    from tracehouse.cli import main

    res = cli_runner.invoke(main, ["--warehouse", root, *args])
    assert res.exit_code == 0, res.output
    return res.stdout


def cli_error(cli_runner, root: str, *args: str) -> str:
    """The CLI's one error line for these arguments (exit code 1)."""
    from tracehouse.cli import main

    res = cli_runner.invoke(main, ["--warehouse", root, *args])
    assert res.exit_code == 1 and not res.stdout, res.output
    [line] = res.stderr.splitlines()
    return line


def test_a_session_answers_as_the_cli(pair, cli_runner, tmp_path):
    """Lists runs, reads a report (whole, one section of its JSON, the triage tables), asks the schema, runs a query,
    diffs the two runs, reads the trend, asks a what-if and exports a finding's window: each answer the CLI's own."""
    root, base, target = pair
    query = "SELECT run_id, name, count(*) AS launches FROM kernels GROUP BY ALL ORDER BY ALL LIMIT 20"
    (
        names,
        (
            runs_md,
            runs_json,
            report_md,
            step,
            triage,
            schema,
            answer,
            diff_md,
            diff_json,
            trend,
            whatif,
            export,
        ),
    ) = ask(
        root,
        [
            ("runs", {}),
            ("runs", {"format": "json"}),
            ("report", {"run": target}),
            ("report", {"run": target[:8], "format": "json", "section": "step"}),
            ("report", {"run": target, "format": "triage"}),
            ("schema", {"view": "step_breakdown"}),
            ("sql", {"query": query}),
            ("diff", {"base": base, "target": "latest"}),
            ("diff", {"base": base, "target": target, "format": "json"}),
            ("trend", {}),
            ("whatif", {"run": target, "category": "moe", "speedup": 2, "step": "report"}),
            ("export", {"run": target, "rank": 0, "step": 1, "output": str(tmp_path / "mcp.pftrace")}),
        ],
    )
    assert names == TOOLS
    assert text(runs_md) == cli(cli_runner, root, "runs", "--format", "md")
    assert text(runs_json) == cli(cli_runner, root, "runs", "--format", "json")
    assert [r["run_id"] for r in json.loads(text(runs_json))] == [base, target]
    assert text(report_md) == cli(cli_runner, root, "report", target)
    whole = json.loads(cli(cli_runner, root, "report", target, "--format", "json"))
    assert json.loads(text(step)) == whole["step"] and whole["step"]["steps_in_run"] == DECODE["steps"]
    assert text(triage) == cli(cli_runner, root, "report", target, "--format", "triage")
    assert text(schema) == cli(cli_runner, root, "schema", "step_breakdown", "--format", "json")
    assert text(answer) == cli(cli_runner, root, "sql", query, "--format", "json")
    assert text(diff_md) == cli(cli_runner, root, "diff", base, "latest")
    assert text(diff_json) == cli(cli_runner, root, "diff", base, target, "--format", "json")
    verdict = json.loads(text(diff_json))["verdict"]
    assert verdict["status"] == "comparable" and verdict["basis"] == "per_step"
    assert text(trend) == cli(cli_runner, root, "trend")
    said = cli(
        cli_runner, root, "whatif", target, "--category", "moe", "--step", "report", "--format", "json"
    )
    assert (
        text(whatif) == said and 0 < json.loads(said)[0]["predicted_ms"] <= json.loads(said)[0]["observed_ms"]
    )
    # the export: the file the CLI writes for the same window, the same slices
    said = cli(
        cli_runner, root, "export", target, "--rank", "0", "--step", "1", "-o", str(tmp_path / "cli.pftrace")
    )
    assert text(export).split("\t")[1:3] == said.split("\t")[1:3]
    assert text(export).splitlines()[0].split("\t")[3] == said.splitlines()[0].split("\t")[3]
    assert (tmp_path / "mcp.pftrace").stat().st_size == (tmp_path / "cli.pftrace").stat().st_size > 0


def test_errors_are_tool_errors_and_the_server_keeps_serving(synth_warehouse, cli_runner, tmp_path):
    """An unknown run, a write statement, a bad section, a bad argument, a missing folder and an unknown
    tool each come back as a tool error of one line (the CLI's line where the CLI has the question), and the next call
    is answered."""
    wh, runs = synth_warehouse
    root = str(wh.root)
    count = "SELECT count(*) AS runs FROM runs"
    _, (unknown, write, section, bad_type, no_folder, no_tool, after) = ask(
        root,
        [
            ("report", {"run": "no-such-run"}),
            ("sql", {"query": "DELETE FROM kernels"}),
            ("report", {"run": runs["training"], "format": "json", "section": "nothing"}),
            ("sql", {"query": count, "limit": "many"}),
            ("export", {"run": runs["training"], "output": str(tmp_path / "no" / "x.pftrace")}),
            ("whatever", {}),
            ("sql", {"query": count}),
        ],
    )
    for result in (unknown, write, section, bad_type, no_folder, no_tool):
        assert result.is_error and len(result.content) == 1
    assert unknown.content[0].text == cli_error(cli_runner, root, "report", "no-such-run")
    assert write.content[0].text == cli_error(cli_runner, root, "sql", "DELETE FROM kernels")
    assert section.content[0].text.startswith("error: the report has no section 'nothing' (sections: ")
    assert "takeaways" in section.content[0].text
    assert bad_type.content[0].text.startswith("error: ") and "limit" in bad_type.content[0].text
    for result in (unknown, write, section, bad_type, no_folder, no_tool):
        assert "\n" not in result.content[0].text
    assert (
        no_folder.content[0].text.startswith("error: output ")
        and "does not exist" in no_folder.content[0].text
    )
    assert not (tmp_path / "no").exists()
    assert no_tool.content[0].text == "error: Unknown tool: whatever"
    assert json.loads(text(after)) == [{"runs": len(runs)}]


def test_sql_stops_at_the_row_limit_and_says_so(synth_warehouse, cli_runner):
    """The rows past the limit are not returned; a second block says the query has more. A query within
    the limit has no such block."""
    wh, _ = synth_warehouse
    root = str(wh.root)
    query = "SELECT run_id, kernel_id FROM kernels ORDER BY run_id, kernel_id"
    _, (capped, asked_fewer, within) = ask(
        root,
        [
            ("sql", {"query": query}),
            ("sql", {"query": query, "limit": 2}),
            ("sql", {"query": query + " LIMIT 3"}),
        ],
        row_limit=3,
    )
    every = json.loads(cli(cli_runner, root, "sql", query, "--format", "json"))
    assert len(every) > 3
    first, note = (block.text for block in capped.content)
    assert json.loads(first) == every[:3] and note.startswith("only the first 3 rows")
    assert json.loads(asked_fewer.content[0].text) == every[:2] and len(asked_fewer.content) == 2
    assert json.loads(text(within)) == every[:3]


def test_without_the_extra_it_says_how_to_install(cli_runner, monkeypatch, tmp_path):
    from tracehouse.cli import main

    monkeypatch.setitem(sys.modules, "mcp", None)  # `import mcp` fails as it does without the extra
    res = cli_runner.invoke(main, ["mcp", "--warehouse", str(tmp_path)])
    assert res.exit_code == 1 and not res.stdout
    said = "error: tracehouse mcp needs the Model Context Protocol SDK (the mcp package)"
    assert res.stderr.splitlines() == [f"{said} (pip install 'tracehouse[mcp]')"]


def test_every_tool_teaches_its_place_in_the_order_of_work():
    """Each tool's description says what it answers and which CLI command answers the same."""
    from tracehouse.mcp_server import INSTRUCTIONS, VERBS

    assert {fn.__name__ for fn in VERBS} == TOOLS
    order = [
        INSTRUCTIONS.index(f"`{name}`")
        for name in ("runs", "report", "schema", "sql", "diff", "trend", "whatif")
    ]
    assert order == sorted(order)
    for fn in VERBS:
        assert f"`tracehouse {fn.__name__}" in " ".join(fn.__doc__.split()), fn.__name__

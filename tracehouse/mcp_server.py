"""`tracehouse mcp`: the warehouse's verbs as the tools of a Model Context Protocol server on stdio.

Each tool is one function below, registered by `@verb`: its name is the tool's name, its parameters (with
their types and defaults) the tool's input schema, its docstring what the agent reads. It is called with
a `Reader` first (the warehouse, one catalogue connection, the row limit) and returns the tool's text. A
tool calls the very function its CLI command calls (tracehouse/commands/*.py, reports/, warehouse/), so
an agent and a person asking the same question get the same answer. Adding a tool is one such function.

The tools run one at a time (a lock), on one long-lived reader (warehouse.session.Session, refreshed
before each call: runs ingested while the server runs are seen). An expected failure (TracehouseError, a
usage error) comes back as a tool error whose text is the CLI's one line; anything else is the SDK's
"Error executing tool" result, logged on stderr. The server keeps serving either way. Only this module and
tracehouse/commands/mcp.py import the `mcp` package (the optional extra `tracehouse[mcp]`).
"""

from __future__ import annotations

import functools
import inspect
import json
import threading
from typing import Literal

import click

from tracehouse.errors import TracehouseError

INSTRUCTIONS = """\
tracehouse is a SQL warehouse of GPU profiler traces (PyTorch profiler / Kineto, Nsight Systems): each
ingested run's kernels, host ops, steps and analyses. Work in this order:
1. `runs`: which runs exist (ids, labels, headline step time and GPU busy %); any unique prefix of a run
   id, `latest` or `latest~N` names a run in the other tools.
2. `report`: one run's findings (takeaways with the figure each rests on, data-quality flags, the step
   breakdown). Read it before querying: it says what matters and which figures to trust.
3. `schema` then `sql`: the detail behind a finding, in read-only DuckDB SQL over the views.
4. `diff` (two runs, a comparability verdict first) and `trend` (a series of runs, regressions flagged).
5. `whatif`: what a step would gain if a kernel, category or fusion row were faster (a replay of its
   dependency graph), before anyone writes the faster kernel.
6. `export`: write a finding's window to a Perfetto file for a person to open.
"""

DEFAULT_ROW_LIMIT = 1000


class Reader:
    """What every tool reads: the warehouse, one catalogue connection (a Session, opened at the first
    call), and the most rows `sql` returns."""

    def __init__(self, store, row_limit: int = DEFAULT_ROW_LIMIT) -> None:
        self.store = store
        self.row_limit = row_limit
        self.lock = threading.Lock()
        self._session = None

    @property
    def session(self):
        if self._session is None:
            from tracehouse.warehouse.session import Session

            self._session = Session(self.store)
        return self._session

    @property
    def con(self):
        return self.session.con

    def refresh(self) -> None:
        """The runs published and the rows kept since the last call (Session.refresh)."""
        if self._session is not None:
            self._session.refresh()


VERBS: list = []


def verb(fn):
    """Make fn(reader, **arguments) -> str (or a list of texts, one content block each) a tool."""
    VERBS.append(fn)
    return fn


ReportFormat = Literal["md", "json"]


@verb
def runs(reader: Reader, where: dict[str, str] | None = None, format: Literal["md", "json"] = "md") -> str:
    """Start here. List the warehouse's runs, oldest first: run id, when ingested, what ran (model,
    framework, phase, GPU), ranks, commit, labels, files and headline figures (median step time in ms,
    GPU busy %, top kernel category, of the phase with the most steps).

    where: only runs with these labels, e.g. {"model": "llama-8b"} (all must match).
    format: md, a Markdown table (as `tracehouse runs --format md`); json, every column of each run whole
    (as `tracehouse runs --format json`).
    Then read a run's `report`; pass a run id (or a unique prefix, `latest`, `latest~1`) to the other tools.
    """
    from tracehouse.commands.runs import listing
    from tracehouse.output import rows_text

    columns, rows = listing(reader.store, reader.con, where or {}, whole=format == "json")
    return rows_text(columns, rows, format)


@verb
def report(
    reader: Reader,
    run: str,
    format: Literal["md", "json", "triage"] = "md",
    phase: Literal["prefill", "decode", "mixed", "unknown"] | None = None,
    section: str | None = None,
) -> str:
    """One run's report (as `tracehouse report RUN`): its takeaways (each with the figure it rests on and
    the export command of its window), the data-quality flags (figures not to trust), kernels and
    categories per phase, overlap and fusion opportunities, and one step's breakdown (its critical path,
    idle gaps, streams, layers).

    run: a run id, a unique prefix of one, `latest` or `latest~N`.
    format: md (Markdown), json (the same content, for picking values) or triage (the kernel, overlap
    and fuse tables per stage, as the llm-torch-profiler-analysis skill prints them).
    phase: only this phase (a serving run's prefill, decode or mixed steps).
    section: with json, only this top-level key of the report, e.g. "step" (the one step the report
    breaks down), "takeaways", "quality", "categories"; an unknown key names the keys there are.
    Read the takeaways and quality first; then `schema` and `sql` for the detail behind one.
    """
    from tracehouse.reports.write import write_run_report, write_triage_report

    if section and format != "json":
        raise TracehouseError("section is a key of the JSON report", hint='give format "json"')
    if format == "triage":
        return write_triage_report(reader.store, run, phase)
    text = write_run_report(reader.store, run, format, None, phase)
    if not section:
        return text
    data = json.loads(text)
    if section not in data:
        raise TracehouseError(f"the report has no section {section!r}", hint="sections: " + ", ".join(data))
    return json.dumps(data[section], indent=1, default=str) + "\n"


@verb
def schema(reader: Reader, view: str | None = None, format: Literal["json", "table", "csv"] = "json") -> str:
    """The tables and views `sql` can read, with what one row of each is (as `tracehouse schema`); with
    view, that view's columns, their types and what each means (as `tracehouse schema VIEW`).

    Ask before writing a query: names, units (ns, %) and keys (run_id, rank, step) are here.
    format: json (records, every value whole), table or csv, as the command's --format.
    """
    from tracehouse.commands.schema import schema_rows
    from tracehouse.output import rows_text

    columns, rows, widest = schema_rows(reader.con, view)
    return rows_text(columns, rows, format, max_width=widest)


@verb
def sql(
    reader: Reader,
    query: str,
    format: Literal["table", "csv", "json"] = "json",
    limit: int | None = None,
) -> list[str]:
    """One read-only SQL query (DuckDB's dialect) over the warehouse's tables and views, as `tracehouse
    sql QUERY` answers it: SELECT, WITH, DESCRIBE, SHOW, EXPLAIN; statements that write, attach, copy,
    install, change settings or read files are refused (the same check as the CLI's).

    Every table and view has run_id: filter on it (from `runs`). `schema` lists the views and columns.
    format: json (records), csv or table. limit: the most rows returned (default and ceiling: the server's
    --row-limit); when the query has more, a second text block says so: aggregate or add LIMIT/OFFSET.
    """
    from tracehouse.output import rows_text

    most = reader.row_limit if limit is None else max(0, min(limit, reader.row_limit))
    columns, rows = reader.session.sql(query, limit=most)
    texts = [rows_text(columns, rows[:most], format)]
    if len(rows) > most:
        texts.append(f"only the first {most} rows: the query has more (aggregate, or add LIMIT/OFFSET)")
    return texts


@verb
def diff(reader: Reader, base: str, target: str, format: ReportFormat = "md") -> str:
    """What changed between two runs (as `tracehouse diff BASE TARGET`), its comparability verdict first:
    whether the runs compare step for step (same model, hardware, phases, batch sizes, steps, data
    quality), per launch when a run has no step markers. Then per category and kernel: time per step,
    delta and ratio, a kernel's change split into time per launch and launch count.

    base, target: run ids, unique prefixes of one, `latest` or `latest~N`.
    Read the verdict before the deltas: a diff of runs that do not compare says why.
    """
    from tracehouse.commands.diff import diff_text

    return diff_text(reader.con, base, target, format)


@verb
def whatif(
    reader: Reader,
    run: str,
    kernel: str | None = None,
    category: str | None = None,
    fusion: str | None = None,
    speedup: float = 2.0,
    step: str | None = None,
    format: Literal["table", "csv", "json", "ndjson"] = "json",
) -> str:
    """The predicted step time if some GPU work were `speedup` times faster (as `tracehouse whatif RUN`):
    each step's dependency graph (launches, stream order, event waits, host syncs, collectives across
    ranks) replayed with the matched activities' durations / speedup; per rank and step the observed and
    predicted step time (ms), the change (ms, %), how many activities matched and which critical-path
    segments changed. With no change the replay reproduces the trace exactly.

    Give exactly one of: kernel (a regex searched in kernel names), category (an activity category such
    as moe, gemm, attention, communication: see the report's categories) or fusion (a fusion row's
    pattern_id from the report's fusion table: its chains fused into one kernel as long as their longest
    member; speedup does not apply).
    step: one step number, or "report" for the step the report breaks down; default every step.
    Ask it after the report names a kernel, category or fusion worth speeding up: it says what the step
    would gain, not only what the kernel costs.
    """
    from tracehouse.commands.whatif import whatif_text
    from tracehouse.warehouse.whatif import Change

    return whatif_text(reader.con, run, Change(kernel, category, fusion, speedup), step, format)


@verb
def trend(
    reader: Reader,
    where: dict[str, str] | None = None,
    metrics: list[str] | None = None,
    since: str | None = None,
    last: int | None = None,
    graph_nodes: list[str] | None = None,
    format: ReportFormat = "md",
) -> str:
    """Metrics across the runs of each series, ordered by commit, with regressions flagged (as
    `tracehouse trend`); a series with too few runs to judge says how many it needs.

    where: only runs with these labels, e.g. {"series": "decode-bench"}.
    metrics: only these metrics; glob patterns allowed, e.g. ["category.*", "step_time_ms"].
    since: show points from this commit time on (ISO date); last: the last N runs of each series
    (baselines and noise always use the whole history).
    graph_nodes: the lines are CUDA-graph nodes (each node's GPU time per step) instead of the run
    metrics: [] lists every node (the regressions name the nodes that got slower), or node ids to follow
    (as `tracehouse trend --graph-nodes` / `--graph-node ID`).
    Then `diff` the last good run and the first flagged one to see what changed.
    """
    from tracehouse.commands.trend import trend_report
    from tracehouse.reports.trend import render_trend

    nodes = None if graph_nodes is None else tuple(graph_nodes)
    report = trend_report(reader.con, where or {}, tuple(metrics or ()), since, last, nodes)
    return render_trend(report, format)


@verb
def export(
    reader: Reader,
    run: str,
    output: str,
    rank: int | None = None,
    step: int | None = None,
    window: str | None = None,
    format: Literal["perfetto", "json"] = "perfetto",
) -> str:
    """Write a run, or a finding's window of it, to a trace file for a person to open in ui.perfetto.dev
    (as `tracehouse export`): GPU and host activities with tracehouse's analysis tracks (critical path,
    idle gaps by cause, exposed communication, layers, takeaways).

    Every finding of `report` names its window's export command (JSON: `where.command`, with `where.rank`,
    `where.step`, `where.start_ns`, `where.end_ns`): pass its run, rank and step, or its window.
    output: the file to write (its folder must exist; relative to the server's folder).
    rank: only this rank; step: only this step's window; window: "START:END" in ns of the trace's time
    base (as kernels.start_ns; us / ms suffixes allowed). Give step or window, not both.
    Returns the file, its format, ranks and slice counts, and what it leaves out.
    """
    from tracehouse.commands.common import output_path
    from tracehouse.commands.export import export_window

    path = output_path(output, "output")
    return export_window(reader.store, run, path, rank, step, window, format).line() + "\n"


def answer(reader: Reader, fn, arguments: dict):
    """The tool's result: fn's texts, or its expected failure as a tool error of one line."""
    from mcp.types import CallToolResult, TextContent

    from tracehouse.output import error_line

    with reader.lock:
        try:
            reader.refresh()
            out = fn(reader, **arguments)
        except TracehouseError as exc:
            return CallToolResult(content=[TextContent(type="text", text=error_line(exc))], is_error=True)
        except click.ClickException as exc:  # a usage error of the function a command shares
            text = f"error: {exc.format_message()}"
            return CallToolResult(content=[TextContent(type="text", text=text)], is_error=True)
    texts = [out] if isinstance(out, str) else list(out)
    return CallToolResult(content=[TextContent(type="text", text=t) for t in texts])


async def one_line_errors(ctx, call_next):
    """Server middleware: a tool error the SDK wrote itself (arguments that do not fit the tool's schema,
    an unknown tool, a crash) in one line, as the tools' own: "error: " and its lines joined, pydantic's
    links left out. (The result is the wire's dict here: `isError`, `content`.)"""
    result = await call_next(ctx)
    if ctx.method == "tools/call" and isinstance(result, dict) and result.get("isError"):
        for block in result.get("content", ()):
            said = block.get("text") or ""
            if said and not said.startswith("error: "):
                lines = [ln.strip() for ln in said.splitlines() if ln.strip()]
                block["text"] = "error: " + "; ".join(ln for ln in lines if not ln.startswith("For further"))
    return result


def tool_of(reader: Reader, fn):
    """fn as the SDK's tool function: the same parameters less the reader, answering with `answer`."""
    from mcp.types import CallToolResult

    @functools.wraps(fn)
    def call(**arguments):
        return answer(reader, fn, arguments)

    signature = inspect.signature(fn, eval_str=True)
    call.__signature__ = signature.replace(
        parameters=list(signature.parameters.values())[1:], return_annotation=CallToolResult
    )
    return call


WRITES = {"export"}  # the tools that write a file (the rest only read)


def build_server(store, row_limit: int = DEFAULT_ROW_LIMIT):
    """The MCP server of this warehouse: one tool per verb."""
    from mcp.server.mcpserver import MCPServer
    from mcp.types import ToolAnnotations

    reader = Reader(store, row_limit)
    server = MCPServer(
        "tracehouse",
        instructions=INSTRUCTIONS,
        version=_version(),
        log_level="WARNING",  # stderr: crashes, not each refused argument
        middleware=[one_line_errors],
    )
    for fn in VERBS:
        server.add_tool(
            tool_of(reader, fn),
            name=fn.__name__,
            description=inspect.getdoc(fn),
            annotations=ToolAnnotations(read_only_hint=fn.__name__ not in WRITES, open_world_hint=False),
            structured_output=False,
        )
    return server


def serve(store, row_limit: int = DEFAULT_ROW_LIMIT) -> None:
    """Serve the warehouse on stdio until the client closes it."""
    build_server(store, row_limit).run("stdio")


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("tracehouse")
    except PackageNotFoundError:
        return ""

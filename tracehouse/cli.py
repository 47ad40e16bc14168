"""tracehouse: a SQL warehouse for GPU profiler (Kineto / PyTorch profiler) traces.

The `tracehouse` group: the global options, one line for an expected failure, and the commands, one module
each in tracehouse/commands/ (parse the options, call one function of ingest/, warehouse/ or reports/,
print). A command's module is imported when that command runs (or --help lists it), so a process pays for
its own command's imports only.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import click

from tracehouse.commands import COMMANDS
from tracehouse.commands.common import CONTEXT_SETTINGS
from tracehouse.errors import TracehouseError


class LazyCommands(dict):
    """name -> click.Command, the command's module (tracehouse.commands.<name>, its `command`) imported when
    the command is first asked for."""

    def __init__(self, names) -> None:
        super().__init__(dict.fromkeys(names))

    def __getitem__(self, name: str) -> click.Command:
        command = super().__getitem__(name)
        if command is None:
            command = importlib.import_module(f"tracehouse.commands.{name}").command
            super().__setitem__(name, command)
        return command

    def get(self, name, default=None):
        return self[name] if name in self else default  # noqa: SIM401 - self.get is this method

    def values(self):
        return [self[name] for name in self]

    def items(self):
        return [(name, self[name]) for name in self]


class TracehouseGroup(click.Group):
    """Turns expected failures into one line on stderr and exit code 1; tracebacks only with --debug."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.commands = LazyCommands(COMMANDS)

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except TracehouseError as exc:
            if ctx.obj and ctx.obj.get("debug"):
                raise
            from tracehouse.output import error_line

            click.echo(error_line(exc), err=True)
            ctx.exit(1)


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("tracehouse")
    except PackageNotFoundError:  # running from a checkout that was never installed
        import tomllib

        return tomllib.loads((Path(__file__).resolve().parent.parent / "pyproject.toml").read_text())[
            "project"
        ]["version"]


def _print_version(ctx: click.Context, _param, value: bool) -> None:
    """--version, read when asked (importlib.metadata costs every other command 0.02-0.09 s at import)."""
    if value and not ctx.resilient_parsing:
        click.echo(f"tracehouse {_version()}")
        ctx.exit()


@click.group(cls=TracehouseGroup, context_settings=CONTEXT_SETTINGS)
@click.option(
    "--warehouse",
    envvar="TRACEHOUSE_WAREHOUSE",
    default="./tracehouse-data",
    show_default=True,
    help="Warehouse folder (env TRACEHOUSE_WAREHOUSE).",
)
@click.option("--debug", is_flag=True, help="Show tracebacks for errors.")
@click.option(
    "-V",
    "--version",
    is_flag=True,
    expose_value=False,
    is_eager=True,
    callback=_print_version,
    help="Show the version and exit.",
)
@click.pass_context
def main(ctx: click.Context, warehouse: str, debug: bool) -> None:
    """A SQL warehouse for GPU profiler traces.

    Ingest PyTorch-profiler (Kineto) traces once, then ask questions in SQL.

    \b
    Example:
      tracehouse ingest ./profiles/run-42 --label model=llama-8b --commit abc123
      tracehouse runs
      tracehouse sql "select name, sum(dur_ns)/1e6 as ms from kernels group by 1 order by 2 desc limit 10"
    """
    ctx.ensure_object(dict)
    ctx.obj["warehouse"] = warehouse
    ctx.obj["warehouse_from_env"] = (
        ctx.get_parameter_source("warehouse") == click.core.ParameterSource.ENVIRONMENT
    )
    ctx.obj["debug"] = debug


def entry() -> None:
    """The `tracehouse` process: run the command, flush, and leave without tearing down what the OS frees
    anyway (DuckDB's buffers and caches: 1.7 s at exit after a 1 GB ingest). Every file a command writes is
    complete when the command returns (written aside, then renamed), so nothing is lost. With Spark loaded
    the ordinary exit runs (its atexit handlers stop the JVM)."""
    import os

    try:
        main()
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        if isinstance(exc.code, str):
            print(exc.code, file=sys.stderr)
    if "pyspark" in sys.modules:
        sys.exit(code)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe (`| head`): nothing more to say
            code = code or 1
    os._exit(code)


if __name__ == "__main__":
    entry()

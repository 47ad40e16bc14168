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
from tracehouse.interrupts import INTERRUPTED_EXIT, Interrupted, install, is_interrupt


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
    """Turns expected failures into one line on stderr and exit code 1, and an interrupt (Ctrl-C, SIGTERM:
    tracehouse.interrupts) into one line and exit code 130, whatever the command was doing; tracebacks only
    with --debug."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.commands = LazyCommands(COMMANDS)

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        """The global options are taken after the command too (`tracehouse runs --warehouse X`)."""
        return super().parse_args(ctx, global_options_first(args))

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except (click.exceptions.Exit, click.ClickException, click.Abort):
            raise
        except (KeyboardInterrupt, Exception) as exc:
            debug = bool(ctx.obj and ctx.obj.get("debug"))
            if is_interrupt(exc) and not debug:
                click.echo(interrupted_line(exc), err=True)
                ctx.exit(INTERRUPTED_EXIT)
            if not debug and not isinstance(exc, TracehouseError):
                exc = out_of_memory_error(exc, ctx.invoked_subcommand) or exc
            if not isinstance(exc, TracehouseError) or debug:
                raise
            from tracehouse.output import error_line

            click.echo(error_line(exc), err=True)
            ctx.exit(1)


def out_of_memory_error(exc: BaseException, command: str | None) -> TracehouseError | None:
    """A command that ran out of DuckDB's (or Python's) memory: one line naming the setting to raise
    (warehouse.memory), not a traceback; None for any other error."""
    from tracehouse.warehouse import memory

    if not memory.is_out_of_memory(exc):
        return None
    return TracehouseError(memory.out_of_memory_line(f"tracehouse {command or ''}".strip()))


def interrupted_line(exc: BaseException | None = None) -> str:
    """The one line of an interrupted command: what it leaves, where it says (an Interrupted's `said`)."""
    said = exc.said if isinstance(exc, Interrupted) else ""
    return f"interrupted: {said}" if said else "interrupted"


GLOBAL_VALUED = ("--warehouse",)  # global options that take a value
GLOBAL_FLAGS = ("--debug",)


def global_options_first(args: list[str]) -> list[str]:
    """args with the global options that follow the command moved before it, so they are the group's: a
    user types `tracehouse runs --warehouse X` as often as `tracehouse --warehouse X runs`. Nothing after
    `--` moves; a command of the same option name would be the command's (no command has one)."""
    front: list[str] = []
    rest: list[str] = []
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--":
            rest += args[i:]
            break
        if arg in GLOBAL_FLAGS or arg.split("=", 1)[0] in GLOBAL_VALUED and "=" in arg:
            front.append(arg)
        elif arg in GLOBAL_VALUED and i + 1 < len(args):
            front += [arg, args[i + 1]]
            i += 1
        else:
            rest.append(arg)
        i += 1
    return front + rest


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

    Ingest PyTorch-profiler (Kineto) traces once, then ask questions in SQL. The global options
    (--warehouse, --debug) may come before or after the command.

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


def _reader_left() -> bool:
    """Whether stdout's reader closed the pipe (`tracehouse runs | head`): click then exits 1 after wrapping
    stdout (PacifyFlushWrapper); the reader has what it wanted, so the command succeeded."""
    from click.utils import PacifyFlushWrapper

    return isinstance(sys.stdout, PacifyFlushWrapper)


def entry() -> None:
    """The `tracehouse` process: run the command, flush, and leave without tearing down what the OS frees
    anyway (DuckDB's buffers and caches: 1.7 s at exit after a 1 GB ingest). Every file a command writes is
    complete when the command returns (written aside, then renamed), so nothing is lost. With Spark loaded
    the ordinary exit runs (its atexit handlers stop the JVM)."""
    import os

    install()  # SIGINT and SIGTERM raise tracehouse.interrupts.Interrupted: one line, exit 130
    try:
        main()
        code = 0
    except KeyboardInterrupt as exc:  # before or after the command ran (TracehouseGroup.invoke: during)
        print(interrupted_line(exc), file=sys.stderr)
        code = INTERRUPTED_EXIT
    except BrokenPipeError:  # `tracehouse runs | head`: the reader stopped reading; not an error
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        if isinstance(exc.code, str):
            print(exc.code, file=sys.stderr)
        if _reader_left():
            code = 0
    if "pyspark" in sys.modules:
        sys.exit(code)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe (`| head`): the reader has what it wanted
            pass
    os._exit(code)


if __name__ == "__main__":
    entry()

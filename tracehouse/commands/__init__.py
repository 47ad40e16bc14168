"""The commands of `tracehouse`, one module each: tracehouse.commands.<name> defines `command`, which parses
its options, calls one function of ingest/, warehouse/ or reports/, and prints what it returns.
tracehouse.cli imports a command's module when the command runs; common.py holds what several share."""

COMMANDS = (
    "check",
    "demo",
    "derive",
    "diff",
    "export",
    "ingest",
    "label",
    "mcp",
    "report",
    "rm",
    "runs",
    "schema",
    "shell",
    "sql",
    "synth",
    "trend",
    "whatif",
)

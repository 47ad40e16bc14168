"""The `tracehouse` process: a warm query server's answer to a plain `tracehouse sql`
(tracehouse.client: the standard library only, before click and DuckDB are imported), else the CLI
(tracehouse.cli.entry)."""

from __future__ import annotations

import os
import sys

from tracehouse.client import ask_server


def entry() -> None:
    code = ask_server(sys.argv[1:])
    if code is not None:
        os._exit(code)
    from tracehouse.cli import entry as cli_entry

    cli_entry()

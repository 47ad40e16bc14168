"""The process's own DuckDB databases (ingest's transforms, the capture attribution, scratch work such as
the read-only check's parser): one way to open them, quiet.

DuckDB's Python client prints a progress bar to standard output for any statement that runs over two
seconds, also when standard output is a pipe: `tracehouse ingest big.json.gz --format json | jq` got
bars between its lines. Every connection the project opens has the bar off (the catalogue's and the
engine's set it themselves; a cursor inherits it); tests/test_ingest_behaviour.py ingests a run with
capture traces and a derive, every connection opened with the bar on as outside pytest, and checks that
none still has it on.
"""

from __future__ import annotations

from pathlib import Path

import duckdb
from tracehouse.warehouse import memory


def connect(database: str = ":memory:", spill: Path | None = None) -> duckdb.DuckDBPyConnection:
    """A DuckDB connection to `database` (default: a new in-memory one) that never prints a progress bar
    (nor do its cursors: they inherit the setting), with the memory policy's limit and threads
    (warehouse.memory), spilling past the limit into `spill` (None: DuckDB's own folder; DuckDB removes
    its files as the connection closes)."""
    con = duckdb.connect(database)
    con.execute("SET enable_progress_bar = false")
    memory.apply(con, memory.settings(spill))
    return con

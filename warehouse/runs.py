"""Finding runs by what a user types: a run id, a unique prefix of one, or `latest`."""

from __future__ import annotations

import duckdb

from errors import RunNotFound


def resolve_run(con: duckdb.DuckDBPyConnection, text: str) -> str:
    """The run id that `text` names: an exact id, a unique prefix, or `latest` (the last ingested run).

    Raises RunNotFound (with a hint) when nothing or more than one run matches.
    """
    text = (text or "").strip()
    if not text:
        raise RunNotFound("no run given", hint="name a run id, a unique prefix of one, or `latest`")
    if text.lower() == "latest":
        row = con.execute("SELECT run_id FROM runs ORDER BY ingested_at DESC, run_id DESC LIMIT 1").fetchone()
        if row is None:
            raise RunNotFound("the warehouse holds no runs yet", hint="ingest traces with `tracehouse ingest PATH`")
        return row[0]
    exact = con.execute("SELECT run_id FROM runs WHERE run_id = ?", [text]).fetchone()
    if exact:
        return exact[0]
    matches = [r[0] for r in con.execute(
        "SELECT run_id FROM runs WHERE starts_with(run_id, ?) ORDER BY run_id LIMIT 6", [text]).fetchall()]
    if len(matches) == 1:
        return matches[0]
    if not matches:
        raise RunNotFound(f"no run {text!r} in the warehouse")
    shown = ", ".join(matches[:5]) + (", ..." if len(matches) > 5 else "")
    raise RunNotFound(f"{text!r} matches several runs ({shown})", hint="give more characters of the run id")

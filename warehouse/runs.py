"""Finding runs by what a user types: a run id, a unique prefix of one, or `latest`."""

from __future__ import annotations

import duckdb

from tracehouse.errors import RunNotFound


def resolve_run(con: duckdb.DuckDBPyConnection, text: str) -> str:
    """The run id that `text` names: an exact id, a unique prefix, `latest` (the last ingested run) or
    `latest~N` (the N-th run ingested before it).

    Raises RunNotFound (with a hint) when nothing or more than one run matches.
    """
    text = (text or "").strip()
    if not text:
        raise RunNotFound("no run given", hint="name a run id, a unique prefix of one, or `latest`")
    back = _latest_back(text)
    if back is not None:  # `latest`, `latest~1` (the run ingested before it), ...
        row = con.execute(
            "SELECT run_id FROM runs ORDER BY ingested_at DESC, run_id DESC LIMIT 1 OFFSET ?", [back]
        ).fetchone()
        if row is None:
            if back == 0:
                raise RunNotFound(
                    "the warehouse holds no runs yet", hint="ingest traces with `tracehouse ingest PATH`"
                )
            (n,) = con.execute("SELECT count(*) FROM runs").fetchone()
            raise RunNotFound(
                f"{text!r}: the warehouse holds {n} run{'s' if n != 1 else ''}",
                hint=f"latest~{max(0, n - 1)} is the oldest",
            )
        return row[0]
    exact = con.execute("SELECT run_id FROM runs WHERE run_id = ?", [text]).fetchone()
    if exact:
        return exact[0]
    matches = [
        r[0]
        for r in con.execute(
            "SELECT run_id FROM runs WHERE starts_with(run_id, ?) ORDER BY run_id LIMIT 6", [text]
        ).fetchall()
    ]
    if len(matches) == 1:
        return matches[0]
    if not matches:
        raise RunNotFound(f"no run {text!r} in the warehouse")
    shown = ", ".join(matches[:5]) + (", ..." if len(matches) > 5 else "")
    raise RunNotFound(f"{text!r} matches several runs ({shown})", hint="give more characters of the run id")


def _latest_back(text: str) -> int | None:
    """0 for `latest`, N for `latest~N`, None for anything else."""
    head, sep, tail = text.lower().partition("~")
    if head != "latest":
        return None
    if not sep:
        return 0
    return int(tail) if tail.isdigit() and len(tail) < 7 else None

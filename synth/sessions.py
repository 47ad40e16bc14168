"""Folders that hold more than one profiling session, as profilers leave them, with which files form which run.

A user's profile folder is often not one run: a server profiled twice writes two sets of rank traces side
by side, exports of Nsight Systems from a before and an after land in one folder. Each layout here writes
such a folder by generating each session on its own (its own start time, its own ranks: synth/scenario.py
or synth/nsys.py, once per session) and records, in `ground_truth.json`, the files each generation wrote:

    {"schema": "tracehouse-synth-sessions/1", "layout": NAME, "summary": ...,
     "sessions": [{"name": "A", "files": [...], "start_ns": ..., "ranks": N, "world_size": N}, ...]}

`tracehouse synth LAYOUT -o DIR` writes one; tests/test_sessions.py checks ingest's grouping against it.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tracehouse.errors import InvalidArgument

from .nsys import SESSION_UTC_NS, write_export
from .scenario import write_scenario
from .truth import load_truth

START_NS = 1_765_432_100_000_000_000  # the first session's start (UTC ns)
MINUTE_NS = 60 * 10**9


@dataclass(frozen=True)
class Layout:
    name: str
    summary: str
    write: Callable[[Path], list[dict]]  # writes the folder, returns its sessions (name, files, ...)


LAYOUTS: dict[str, Layout] = {}


def layout(name: str, summary: str) -> Callable:
    def register(fn: Callable[[Path], list[dict]]) -> Callable[[Path], list[dict]]:
        LAYOUTS[name] = Layout(name, summary, fn)
        return fn

    return register


def write_layout(name: str, out_dir: str | Path) -> Path:
    """Write layout `name` into out_dir (its sessions' files + ground_truth.json); return out_dir."""
    if name not in LAYOUTS:
        raise InvalidArgument(f"unknown layout {name!r}; choose one of {', '.join(sorted(LAYOUTS))}")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    sessions = LAYOUTS[name].write(out)
    truth = {
        "schema": "tracehouse-synth-sessions/1",
        "layout": name,
        "summary": LAYOUTS[name].summary,
        "sessions": sessions,
    }
    (out / "ground_truth.json").write_text(
        json.dumps(truth, indent=2, sort_keys=True) + "\n", encoding="utf-8"
    )
    return out


def _kineto_session(out: Path, label: str, start_ns: int, naming: str, ranks: int = 2) -> dict:
    """One serving session of the same server (same seed: the same worker processes), started at
    start_ns, generated in a folder of its own; its rank traces are moved into out (the server's capture
    traces, recorded once at its start, are kept from the first session only)."""
    with tempfile.TemporaryDirectory(dir=out, prefix=".session-") as tmp:
        folder = write_scenario(
            "serving-decode", tmp, ranks=ranks, steps=2, layers=2, seed=7, start_ns=start_ns, naming=naming
        )
        files = sorted(load_truth(folder)["files"].values())
        for name in files:
            shutil.move(str(folder / name), str(out / name))
        if not (out / "capture_traces").exists() and (folder / "capture_traces").is_dir():
            shutil.move(str(folder / "capture_traces"), str(out / "capture_traces"))
    return {"name": label, "files": files, "start_ns": start_ns, "ranks": ranks, "world_size": ranks}


@layout(
    "two-sessions-sglang",
    "an SGLang profile folder: the server profiled twice, 12 minutes apart, 2 TP ranks each "
    "(<ts>-TP-0, <ts>-TP-1 twice, two timestamps)",
)
def two_sessions_sglang(out: Path) -> list[dict]:
    return [
        _kineto_session(out, "A", START_NS, "default"),
        _kineto_session(out, "B", START_NS + 12 * MINUTE_NS, "default"),
    ]


@layout(
    "two-sessions-vllm",
    "a vLLM profile folder: the same two workers profiled twice, 12 minutes apart (<host>_<pid>.<time>"
    ".pt.trace.json.gz: the same names but for each rank's own write time; ranks in distributedInfo)",
)
def two_sessions_vllm(out: Path) -> list[dict]:
    return [
        _kineto_session(out, "A", START_NS, "tensorboard"),
        _kineto_session(out, "B", START_NS + 12 * MINUTE_NS, "tensorboard"),
    ]


@layout(
    "nsys-exports",
    "Nsight Systems exports side by side: a before, an after and a third session (hours apart), and one "
    "job that wrote one export per node (sessions started 1.5 s apart)",
)
def nsys_exports(out: Path) -> list[dict]:
    hour = 60 * MINUTE_NS
    sessions = []
    for label, name, start in (
        ("A", "before.sqlite", SESSION_UTC_NS),
        ("B", "after.sqlite", SESSION_UTC_NS + 2 * hour),
        ("C", "third.sqlite", SESSION_UTC_NS + 26 * hour),
    ):
        truth = write_export(out / name, session_utc_ns=start)
        sessions.append(
            {
                "name": label,
                "files": [name],
                "start_ns": start,
                "ranks": len(truth["ranks"]),
                "world_size": None,
            }
        )
    job = SESSION_UTC_NS + 30 * hour
    files, ranks = [], 0
    for node in range(2):  # one `nsys profile` per node, launched together: one session of the job
        name = f"job-node{node}.sqlite"
        ranks += len(write_export(out / name, session_utc_ns=job + node * 1_500_000_000)["ranks"])
        files.append(name)
    sessions.append({"name": "D", "files": files, "start_ns": job, "ranks": ranks, "world_size": None})
    return sessions

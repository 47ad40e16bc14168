"""Which trace files of one ingest form one run: one run per profiling session, by what the files say.

A folder often holds more than one profiling session: a server profiled twice (SGLang's
`<ts>-TP-<t>...trace.json.gz` twice, with two timestamps), the PyTorch profiler's
`<host>_<pid>.<ts>.pt.trace.json.gz` from two sessions of the same workers, a before and an after export
of Nsight Systems, unrelated traces collected side by side. Each session is its own run.

What each file says is read cheaply, before anything is ingested: the file name, the head of a Kineto
trace before its event array (`distributedInfo`: rank, world size) and the first event's process, an
export's TARGET_INFO_SESSION_START_TIME. The rules (`split_sessions`):

- Nsight Systems exports: each export is its own session, unless several started within
  NSYS_SESSION_SLACK_S of each other (one job that ran `nsys profile` once per rank or per node).
- Kineto traces: ranks of one session agree on the world size (`distributedInfo.world_size`); without a
  world size, they are named alike (the same name once its numbers are masked: `rank-0.json.gz`,
  `rank-1.json.gz`), and a file that says no world size (its head could not be read) takes the world
  size of the files named like it. A name that carries the session's id (SGLang's `<ts>` before `-TP-`)
  groups its ranks. Then files are taken in time order (the name's timestamp, else the first event's)
  and a rank that repeats starts a second session (a rank is `distributedInfo.rank`, else the name's rank
  / TP, PP, DP, EP indices), as does a process (`<host>_<pid>` of the name) that repeats, or a session
  that already holds all its world's ranks. A file that names no rank is a session of its own when it
  says something that tells it apart (a process, a time, a session id): one trace of one program.
- Files that say nothing that tells them apart (no rank, process, time or id; an unreadable head) stay
  with the one session of the files named like them, or, with none or several, are one run together, as
  before, and that run's warnings say so.

`tracehouse ingest --one-run` skips all of this: every file of a folder (or named together) is one run.
"""

from __future__ import annotations

import re
import sqlite3
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import orjson
from tracehouse.ingest import jsonscan
from tracehouse.ingest.files import is_nsys_input
from tracehouse.ingest.naming import parse_trace_name
from tracehouse.ingest.source import new_inflater

SHOWN_FILES = 6  # file names a run of the stderr line lists (more: the first ones, "...", the last)
NO_SIGNS = "the files say nothing that tells sessions apart"
HEAD_BYTES = 4 << 20  # bytes of a Kineto trace read for its metadata (the head before the event array)
NSYS_SESSION_SLACK_S = 30.0  # exports of one job start within this many seconds of each other

# SGLang: `<profile id>-TP-<t>[-DP-<d>][-PP-<p>][-EP-<e>][-STAGE].trace.json.gz`: the id is the session's
# (a name that starts with its indices, Megatron's `TP-0-PP-1...`, carries no id: `TP-0` is no session tag)
_SESSION_TAG = re.compile(r"^(?P<tag>(?!(?:TP|DP|PP|EP)-\d).+?)-(?:TP|DP|PP|EP)-\d+(?=$|[-_.])")
# torch.profiler.tensorboard_trace_handler: `<worker>.<time>.pt.trace.json[.gz]`, worker `<host>_<pid>` by
# default; the time is the file's write time (s, ms, us or ns since the epoch, by its number of digits)
_TENSORBOARD = re.compile(r"^(?P<worker>.+)\.(?P<time>\d{10,19})\.pt\.trace\.json(?:\.gz)?$")
_HOST_PID = re.compile(r"(?:^|\.)(?P<host>[^.]+)_(?P<pid>\d+)$")
_FIRST_PID = re.compile(rb'"pid"\s*:\s*(-?\d+)')
_FIRST_TS = re.compile(rb'"ts"\s*:\s*(-?\d+(?:\.\d+)?)')


@dataclass(frozen=True)
class FileFacts:
    """What one file says about its session, before it is ingested."""

    path: Path
    nsys: bool = False
    rank: tuple | None = None  # distributedInfo.rank, else the name's (rank, tp, pp, dp, ep)
    world_size: int | None = None
    tag: str | None = None  # a session id the name carries (SGLang's profile id)
    time_s: float | None = None  # wall-clock seconds: the name's timestamp, an export's session start
    first_ts: float | None = None  # the first event's `ts` as written (the trace's own clock)
    process: tuple | None = None  # (host, pid) from the name
    pattern: str = ""  # the name with its numbers masked (name_pattern)
    pid: int | None = None  # the first event's pid (no host: not unique across machines)

    @property
    def distinct(self) -> bool:
        """Says something that tells this file's session apart from another's: a rank, a session id, a
        wall-clock time, a process (the first event's clock reading alone says nothing: it only orders)."""
        return any(v is not None for v in (self.rank, self.tag, self.time_s, self.process, self.pid))


@dataclass
class Session:
    """The files of one profiling session (one run), and what told it apart."""

    files: list[Path]
    why: str = ""
    facts: list[FileFacts] = field(default_factory=list)


# ---- facts ---------------------------------------------------------------------------------------
def _epoch_seconds(digits: str) -> float:
    value = int(digits)
    return value / 10 ** {10: 0, 13: 3, 16: 6, 19: 9}.get(len(digits), max(0, len(digits) - 10))


def name_facts(name: str) -> dict:
    """Session id, time and process from a file name (no path)."""
    out: dict = {}
    if m := _SESSION_TAG.match(name):
        out["tag"] = m.group("tag")
        try:
            out["time_s"] = float(m.group("tag"))
        except ValueError:
            pass
    elif m := _TENSORBOARD.match(name):
        out["time_s"] = _epoch_seconds(m.group("time"))
        if hp := _HOST_PID.search(m.group("worker")):
            out["process"] = (hp.group("host"), int(hp.group("pid")))
    return out


@lru_cache(maxsize=4096)
def _head(path: str, size: int, mtime_ns: int) -> tuple[dict, int | None, float | None]:
    """(distributedInfo, first event's pid, first event's ts) from the head of a Kineto trace; cached per
    file version, so planning and rank numbering read each head once."""
    try:
        with open(path, "rb") as f:
            raw = f.read(HEAD_BYTES)
        inflater = new_inflater(raw)
        text = raw if inflater is None else inflater.decompress(raw, HEAD_BYTES)
    except Exception:  # noqa: BLE001 - a broken file is reported by the real read, with its position
        return {}, None, None
    info: dict = {}
    key = text.find(b'"distributedInfo"')
    start = text.find(b"{", key) if key >= 0 else -1
    end = jsonscan.value_end(text, start) if start >= 0 else None
    if end is not None:
        try:
            value = orjson.loads(text[start:end])
            info = value if isinstance(value, dict) else {}
        except orjson.JSONDecodeError:
            info = {}
    events = text.find(b'"traceEvents"')
    first = text[events : events + 4096] if events >= 0 else b""
    pid = _FIRST_PID.search(first)
    ts = _FIRST_TS.search(first)
    return info, int(pid.group(1)) if pid else None, float(ts.group(1)) if ts else None


def peek_head(path: Path) -> tuple[dict, int | None, float | None]:
    try:
        st = Path(path).stat()
    except OSError:
        return {}, None, None
    return _head(str(path), st.st_size, st.st_mtime_ns)


def _rank_key(info: dict, name: str) -> tuple | None:
    """The rank as ingest numbers it (ingest.run.assign_ranks: distributedInfo.rank, else the name's rank,
    else its TP index alone), else the name's parallel indices together; None when nothing names one."""
    n = parse_trace_name(name)
    if isinstance(info.get("rank"), int):
        return ("rank", info["rank"])
    if n.rank is not None or (n.tp is not None and n.pp is None and n.dp is None):
        return ("rank", n.rank if n.rank is not None else n.tp)
    indices = (n.tp, n.pp, n.dp, n.ep)
    return ("indices", *indices) if any(i is not None for i in indices) else None


def name_pattern(name: str) -> str:
    """The name with what differs between ranks of one session masked: every number, and the host of a
    `<host>_<pid>` worker name (`rank-0.json.gz` and `rank-1.json.gz` -> `rank-#.json.gz`)."""
    if (m := _TENSORBOARD.match(name)) and (hp := _HOST_PID.search(m.group("worker"))):
        name = name[: m.start("worker") + hp.start("host")] + "#" + name[m.start("worker") + hp.end("host") :]
    return re.sub(r"\d+", "#", name)


def export_facts(path: Path) -> dict:
    """An export's session start (UTC seconds, TARGET_INFO_SESSION_START_TIME; absent: none)."""
    out: dict = {}
    try:
        con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    except sqlite3.Error:
        return out
    try:
        tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if "TARGET_INFO_SESSION_START_TIME" in tables:
            row = con.execute("SELECT * FROM TARGET_INFO_SESSION_START_TIME").fetchone()
            cols = [d[0] for d in con.execute("SELECT * FROM TARGET_INFO_SESSION_START_TIME").description]
            if row and "utcEpochNs" in cols and row[cols.index("utcEpochNs")] is not None:
                out["time_s"] = int(row[cols.index("utcEpochNs")]) / 1e9
    except sqlite3.Error:
        pass  # a damaged export is reported by the real read
    finally:
        con.close()
    return out


def file_facts(path: Path) -> FileFacts:
    if is_nsys_input(path):
        return FileFacts(path, nsys=True, **(export_facts(path) if path.suffix != ".nsys-rep" else {}))
    info, pid, first_ts = peek_head(path)
    world = info.get("world_size") if isinstance(info.get("world_size"), int) else None
    return FileFacts(
        path,
        rank=_rank_key(info, path.name),
        world_size=world,
        pid=pid,
        first_ts=first_ts,
        pattern=name_pattern(path.name),
        **name_facts(path.name),
    )


# ---- the rules -----------------------------------------------------------------------------------
def split_sessions(files: list[Path]) -> list[Session]:
    """The files' profiling sessions, in the order of their first file (see the module's rules)."""
    facts = [file_facts(f) for f in files]
    sessions = _nsys_sessions([f for f in facts if f.nsys]) + _kineto_sessions(
        [f for f in facts if not f.nsys]
    )
    order = {f: i for i, f in enumerate(files)}
    for s in sessions:
        s.files = sorted(s.files, key=order.__getitem__)
        s.facts = sorted(s.facts, key=lambda f: order[f.path])
    return sorted(sessions, key=lambda s: order[s.files[0]])


def _session(facts: list[FileFacts], why: str) -> Session:
    return Session([f.path for f in facts], why, list(facts))


def _nsys_sessions(facts: list[FileFacts]) -> list[Session]:
    timed = sorted((f for f in facts if f.time_s is not None), key=lambda f: (f.time_s, f.path.name))
    sessions = [_session([f], "an export without a session start time") for f in facts if f.time_s is None]
    group: list[FileFacts] = []
    for f in timed:
        if group and f.time_s - group[0].time_s > NSYS_SESSION_SLACK_S:
            sessions.append(_session(group, _export_why(group)))
            group = []
        group.append(f)
    if group:
        sessions.append(_session(group, _export_why(group)))
    return sessions


def _export_why(group: list[FileFacts]) -> str:
    if len(group) == 1:
        return "its own Nsight Systems session"
    return f"exports whose sessions started within {NSYS_SESSION_SLACK_S:g} s of each other"


def _kineto_sessions(facts: list[FileFacts]) -> list[Session]:
    if not facts:
        return []
    if not any(f.distinct for f in facts):
        return [_session(facts, NO_SIGNS)]
    sessions: list[Session] = []
    by_world: dict[tuple, list[FileFacts]] = {}
    worlds = _worlds_by_pattern(facts)
    for f in facts:  # without a world size, only files named alike can be ranks of one session
        world = f.world_size if f.world_size is not None else worlds.get(f.pattern)
        by_world.setdefault((world, f.pattern if world is None else ""), []).append(f)
    for (world, _), group in by_world.items():
        by_tag: dict[str | None, list[FileFacts]] = {}
        for f in group:
            by_tag.setdefault(f.tag, []).append(f)
        for tag, tagged in by_tag.items():
            ranked = _ranked_sessions([f for f in tagged if f.rank is not None], world, tag)
            mute = [f for f in tagged if not f.distinct]  # an unreadable head, a name that says nothing
            if len(ranked) == 1 and mute:  # the one session its alike-named files form: today's rule
                ranked = [_session(ranked[0].facts + mute, ranked[0].why)]
            elif mute:
                ranked.append(_session(mute, NO_SIGNS))
            sessions += ranked
            sessions += [
                _session([f], "a trace that names no rank") for f in tagged if f.distinct and f.rank is None
            ]
    return sessions


def _worlds_by_pattern(facts: list[FileFacts]) -> dict[str, int]:
    """The world size of the files named alike (name_pattern), where they agree on one: a file that says
    no world size (its head could not be read) joins theirs."""
    seen: dict[str, set[int]] = {}
    for f in facts:
        if f.world_size is not None:
            seen.setdefault(f.pattern, set()).add(f.world_size)
    return {p: next(iter(w)) for p, w in seen.items() if len(w) == 1}


def _time_order(facts: list[FileFacts]) -> list[FileFacts]:
    """By the name's wall-clock time where every file has one, else by the first event's time where every
    file has one, else by name."""
    if all(f.time_s is not None for f in facts):
        return sorted(facts, key=lambda f: (f.time_s, f.path.name))
    if all(f.first_ts is not None for f in facts):
        return sorted(facts, key=lambda f: (f.first_ts, f.path.name))
    return sorted(facts, key=lambda f: f.path.name)


def _ranked_sessions(facts: list[FileFacts], world: int | None, tag: str | None) -> list[Session]:
    """Cut the files, in time order, where a rank or a process repeats or the world is complete."""
    sessions: list[Session] = []
    group: list[FileFacts] = []
    why = f"session id {tag}" if tag else f"world size {world}" if world else "distinct ranks"
    for f in _time_order(facts):
        ranks = {g.rank for g in group}
        processes = {g.process for g in group if g.process}
        full = world is not None and len(group) >= world
        if group and (f.rank in ranks or (f.process and f.process in processes) or full):
            sessions.append(_session(group, why))
            group = []
        group.append(f)
    if group:
        sessions.append(_session(group, why))
    return sessions


def describe(folder: str, sessions: list[Session]) -> str:
    """The stderr line that names each run of a split: `2 profiling sessions in DIR: run A (files ...),
    run B (files ...)`."""
    parts = []
    for i, s in enumerate(sessions):
        shown = [p.name for p in s.files]
        if len(shown) > SHOWN_FILES:  # a session of many ranks: its first and last files
            shown = [*shown[: SHOWN_FILES - 2], "...", shown[-1]]
        names = ", ".join(shown)
        parts.append(f"run {_letter(i)} ({len(s.files)} file{'s' if len(s.files) != 1 else ''}: {names})")
    return f"{len(sessions)} profiling sessions in {folder}, each its own run: " + "; ".join(parts)


def _letter(i: int) -> str:
    out = ""
    i += 1
    while i:
        i, r = divmod(i - 1, 26)
        out = chr(ord("A") + r) + out
    return out

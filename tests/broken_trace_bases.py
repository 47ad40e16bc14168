"""What tests/broken_traces.py builds its broken traces on: the outcome a case must give (`Outcome`, `Case`,
`Kind`, the warning texts), the bases (a real trace when ../shared is there, else a synthesized one; a small
synthesized run) and the measures of a damaged file taken independently of tracehouse (complete events,
an inflatable prefix), with the standard library's JSON decoder and zlib."""

from __future__ import annotations

import copy
import gzip
import json
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REAL_BASE = ROOT.parent / "shared" / "traces" / "nvidia" / "h100_bert-small.json.gz"
GPU_CATS = {"kernel", "gpu_memcpy", "gpu_memset"}

# warning keys (ingest/decode.py, ingest/sql/80_summary.sql)
W_BAD_VALUE = "non-numeric ts/dur values read as null (NaN, Infinity, out of range, text)"
W_UTF8 = "events with invalid UTF-8 repaired (U+FFFD)"
W_CONTROL = "events with raw control characters in strings escaped"
W_NO_DUR = "complete events (ph X) without a duration, read as 0"
W_ABSURD = "durations over one day set to 0"
W_LONG_NAME = "names over 65,536 characters cut (their md5 kept)"
W_NO_TS = "events without a timestamp skipped"
W_NO_PH = "events without a phase (ph) skipped"
W_NEG = "negative durations clamped to 0"
W_DUP = "duplicate GPU activities dropped"
W_FLOW = "flows without a partner"
W_UNKNOWN = "events of unknown category"


@dataclass
class Outcome:
    kind: str  # error | repaired | clean
    what: str = ""  # error: text the error line must hold
    where: str = ""  # error: the position it must name
    warnings: dict[str, int] = field(default_factory=dict)  # repaired: these keys with these counts
    only: bool = True  # repaired: and no other warnings
    n_kernels: int | None = None  # the landed run's GPU activities (None: not checked)
    bad_file: str = ""  # error: the file the error line names (default: the first path)

    @property
    def exit_code(self) -> int:
        return 1 if self.kind == "error" else 0


@dataclass
class Case:
    paths: list[Path]
    outcome: Outcome


@dataclass
class Kind:
    name: str
    doc: str  # what is broken, and why the outcome is what it is
    make: Callable[[Path], Case]


# ---- bases ---------------------------------------------------------------------------------------
def dumps(value) -> str:
    """JSON text of a value parsed with Decimal floats: numbers keep their exact text."""
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(k)}: {dumps(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(dumps(v) for v in value) + "]"
    if isinstance(value, Decimal):
        return str(value)
    return json.dumps(value)


def write_doc(
    path: Path,
    meta: dict,
    events: list,
    gz: bool = True,
    minified: bool = False,
    raw_events: list[bytes] | None = None,
) -> Path:
    """One event per line (so byte offsets are easy to reason about), or all on one line."""
    texts = raw_events if raw_events is not None else [dumps(e).encode() for e in events]
    sep = b"," if minified else b",\n"
    head = b"{" + b"".join(
        json.dumps(k).encode() + b": " + dumps(v).encode() + b", " for k, v in meta.items()
    )
    body = (
        head
        + b'"traceEvents": ['
        + (b"" if minified else b"\n")
        + sep.join(texts)
        + b"]}"
        + (b"" if minified else b"\n")
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gzip.compress(body, compresslevel=6, mtime=0) if gz else body)
    return path


def load_doc(path: Path) -> tuple[dict, list]:
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rb") as f:
        doc = json.load(f, parse_float=Decimal)
    events = doc.pop("traceEvents")
    return doc, events


_SYNTH_CACHE: dict[str, tuple[dict, list]] = {}


def synth_base() -> tuple[dict, list]:
    """A small synthesized serving-decode rank (clean: ingest reports no warnings for it)."""
    if "synth" not in _SYNTH_CACHE:
        import tempfile

        from tracehouse.synth import write_scenario

        with tempfile.TemporaryDirectory() as tmp:
            out = write_scenario("serving-decode", Path(tmp) / "run", ranks=1, steps=2, layers=2, seed=3)
            [trace] = sorted(p for p in out.iterdir() if p.name.endswith(".json.gz"))
            _SYNTH_CACHE["synth"] = load_doc(trace)
    meta, events = _SYNTH_CACHE["synth"]
    return copy.deepcopy(meta), copy.deepcopy(events)


def real_base() -> tuple[dict, list, str]:
    """The real base trace (meta, events, its name), or the synthesized one when the shared folder is missing."""
    if REAL_BASE.is_file():
        meta, events = load_doc(REAL_BASE)
        return meta, events, "real"
    meta, events = synth_base()
    return meta, events, "synth"


def gpu_count(events: list) -> int:
    """GPU activities with a numeric timestamp (an event without one is skipped)."""
    return sum(
        1
        for e in events
        if isinstance(e, dict)
        and e.get("ph") == "X"
        and str(e.get("cat", "")).lower() in GPU_CATS
        and _numeric(e.get("ts"))
    )


def _numeric(value) -> bool:
    try:
        Decimal(str(value))
        return value is not None
    except ArithmeticError:
        return False


# ---- independent measures of a damaged file ----------------------------------------------------------
def complete_events(text: bytes) -> int:
    """How many whole events the (possibly cut) event array in `text` holds: stdlib JSON, one at a time."""
    s = text.decode("utf-8", "replace")
    key = s.find('"traceEvents"')
    i = s.find("[", max(key, 0)) + 1
    decoder = json.JSONDecoder()
    n = 0
    while True:
        while i < len(s) and s[i] in " \t\r\n,":
            i += 1
        if i >= len(s) or s[i] == "]":
            return n
        try:
            _, i = decoder.raw_decode(s, i)
        except json.JSONDecodeError:
            return n
        n += 1


def inflate_prefix(data: bytes) -> bytes:
    """Everything zlib can inflate from `data`, byte by byte up to the first error."""
    d = zlib.decompressobj(16 + zlib.MAX_WBITS)
    out = []
    for i in range(0, len(data), 4096):
        saved = d.copy()
        try:
            out.append(d.decompress(data[i : i + 4096]))
        except zlib.error:
            d = saved
            for j in range(i, min(i + 4096, len(data))):
                try:
                    out.append(d.decompress(data[j : j + 1]))
                except zlib.error:
                    return b"".join(out)
            return b"".join(out)
    return b"".join(out)

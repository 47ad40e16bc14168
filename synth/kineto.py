"""Streaming writer of Kineto (PyTorch profiler) JSON traces.

Events are formatted one at a time and written straight into a gzip stream, so a multi-GB trace never
exists in memory. Timestamps come in as integer nanoseconds and are printed exactly as Kineto does at
ns resolution (`1765432100123456.789`): the integer and the three decimals are formatted separately, so
the text carries the exact schedule even where a float64 could not (epoch µs × 1000 > 2**53).
The layout (one object per event, metadata events at the end, top-level keys after `traceEvents`)
follows the Kineto traces in ../shared/traces.
"""

from __future__ import annotations

import gzip
from pathlib import Path
from typing import Any

import orjson


def us(ns: int) -> str:
    """Integer ns → Kineto µs text with exactly three decimals (never through a float)."""
    if ns < 0:
        return "-" + us(-ns)
    return f"{ns // 1000}.{ns % 1000:03d}"


def _j(v: Any) -> str:
    return orjson.dumps(v).decode()


class TraceWriter:
    """One Kineto trace file. `head` keys go before `traceEvents`, `tail` keys after it."""

    def __init__(self, path: Path, head: dict[str, Any]):
        self.path = path
        # mtime=0 and a fixed level keep the gzip bytes identical for identical content (determinism test).
        self._raw = open(path, "wb")  # noqa: SIM115 - lives until close(), across many steps
        self._gz = gzip.GzipFile(filename="", mode="wb", fileobj=self._raw, compresslevel=1, mtime=0)
        self.bytes = 0
        self._first = True
        parts = ["{\n"] + [f"  {_j(k)}: {_j(v)},\n" for k, v in head.items()] + ['  "traceEvents": [\n']
        self._put("".join(parts))

    def _put(self, s: str) -> None:
        b = s.encode()
        self.bytes += len(b)
        self._gz.write(b)

    def _event(self, body: str) -> None:
        self._put(("  {" if self._first else ",\n  {") + body + "}")
        self._first = False

    def x(self, cat: str, name: str, pid: Any, tid: Any, ts: int, dur: int, args: dict | None) -> None:
        body = (
            f'"ph": "X", "cat": {_j(cat)}, "name": {_j(name)}, "pid": {_j(pid)}, "tid": {_j(tid)}, '
            f'"ts": {us(ts)}, "dur": {us(dur)}'
        )
        if args is not None:
            body += f', "args": {_j(args)}'
        self._event(body)

    def flow(self, ph: str, fid: int, pid: Any, tid: Any, ts: int, cat: str = "ac2g") -> None:
        body = f'"ph": "{ph}", "id": {fid}, "pid": {_j(pid)}, "tid": {_j(tid)}, "ts": {us(ts)}, "cat": "{cat}", "name": "{cat}"'
        if ph == "f":
            body += ', "bp": "e"'
        self._event(body)

    def meta(self, name: str, pid: Any, tid: Any, ts: int, args: dict) -> None:
        self._event(
            f'"name": "{name}", "ph": "M", "ts": {us(ts)}, "pid": {_j(pid)}, "tid": {_j(tid)}, "args": {_j(args)}'
        )

    def instant(self, name: str, pid: Any, tid: Any, ts: int) -> None:
        self._event(
            f'"name": {_j(name)}, "ph": "i", "s": "g", "pid": {_j(pid)}, "tid": {_j(tid)}, "ts": {us(ts)}'
        )

    def close(self, tail: dict[str, Any]) -> None:
        parts = ["\n  ]"] + [f",\n  {_j(k)}: {_j(v)}" for k, v in tail.items()] + ["\n}\n"]
        self._put("".join(parts))
        self._gz.close()
        self._raw.close()

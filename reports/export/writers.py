"""The writers of an export: the same calls (process, track, slice, instant, close) for Perfetto protobuf
(reports.perfetto_proto) and Chrome-trace JSON, each time shifted by its rank's clock alignment."""

from __future__ import annotations

import hashlib
from decimal import Decimal

import orjson
from tracehouse.reports import perfetto_proto as pp

SEQ = 1  # the one packet sequence of the file
NOTES_TRACK = "tracehouse export notes"  # its description: the file's metadata and notes (JSON)


def track_uuid(*parts) -> int:
    return int.from_bytes(hashlib.blake2b(repr(parts).encode(), digest_size=8).digest(), "little") >> 1 or 1


class _Shifted:
    """Per process (pid = rank + 1) the ns subtracted from every time written on its tracks (the clock
    alignment; 0: the rank's own times)."""

    def _init_shift(self, shifts: dict[int, int] | None) -> None:
        self.shift = {rank + 1: ns for rank, ns in (shifts or {}).items() if ns}
        self.pid_of: dict[int, int] = {}

    def _t(self, track: int, ts: int) -> int:
        return ts - self.shift.get(self.pid_of.get(track), 0) if self.shift else ts


class PerfettoWriter(_Shifted):
    def __init__(self, handle, shifts: dict[int, int] | None = None):
        self.f = handle
        self._init_shift(shifts)
        self.f.write(
            pp.packet(
                pp.f_varint(pp.PKT_SEQ_ID, SEQ)
                + pp.f_varint(pp.PKT_SEQ_FLAGS, pp.SEQ_INCREMENTAL_STATE_CLEARED)
            )
        )

    def process(self, uuid: int, pid: int, name: str) -> None:
        self.pid_of[uuid] = pid
        self.f.write(pp.packet(pp.track_descriptor(uuid, pid=pid, process_name=name, explicit_children=True)))

    def track(
        self, uuid: int, name: str, parent: int, order: int, pid: int | None, description: str | None = None
    ) -> None:
        if pid is not None:
            self.pid_of[uuid] = pid
        self.f.write(
            pp.packet(
                pp.track_descriptor(uuid, name, parent=parent, rank_order=order, description=description)
            )
        )

    def slice(
        self, track: int, start: int, dur: int, name: str, category: str, args: dict, flows=(), terminating=()
    ) -> None:
        a = b"".join(pp.annotation(k, v) for k, v in plain_args(args).items())
        start = self._t(track, start)
        self.f.write(
            pp.event(
                SEQ,
                start,
                pp.SLICE_BEGIN,
                track,
                name,
                category=category,
                args=a,
                flows=flows,
                terminating=terminating,
            )
        )
        self.f.write(pp.event(SEQ, start + dur, pp.SLICE_END, track))

    def instant(self, track: int, ts: int, name: str, category: str, args: dict) -> None:
        a = b"".join(pp.annotation(k, v) for k, v in plain_args(args).items())
        self.f.write(pp.event(SEQ, self._t(track, ts), pp.INSTANT, track, name, category=category, args=a))

    def close(self, notes: list[str] = (), meta: dict | None = None, parent: int | None = None) -> None:
        """The file's notes (what it leaves out, the clock alignment) and metadata: the description of a track
        `tracehouse export notes` of the lowest rank's process (a JSON object: the metadata, and notes)."""
        text = orjson.dumps({**plain_args(meta or {}), "notes": list(notes)}).decode()
        self.f.write(
            pp.packet(
                pp.track_descriptor(
                    track_uuid("export notes"), NOTES_TRACK, parent=parent, rank_order=0, description=text
                )
            )
        )


def plain_args(args: dict) -> dict:
    """Args as JSON / protobuf scalars: a SUM's DECIMAL / HUGEINT becomes an int (a float when fractional)."""
    out = {}
    for k, v in args.items():
        if v is None:
            continue
        if isinstance(v, Decimal):
            v = int(v) if v == v.to_integral_value() else float(v)
        out[k] = v
    return out


def _us(ns: int) -> orjson.Fragment:
    """ns as an exact decimal µs literal (Chrome JSON's unit), never through a float."""
    sign = "-" if ns < 0 else ""
    ns = abs(int(ns))
    return orjson.Fragment(f"{sign}{ns // 1000}.{ns % 1000:03d}".encode())


class JsonWriter(_Shifted):
    """Chrome-trace JSON: each track is a (pid, tid) of its rank's process; exact ns in args start_ns / dur_ns
    (ts and dur are exact decimal µs literals too, but JSON readers parse them as floats). The file's notes
    and metadata: the top-level key `tracehouse` after traceEvents."""

    def __init__(self, handle, shifts: dict[int, int] | None = None):
        self.f = handle
        self._init_shift(shifts)
        self.f.write(
            b'{"displayTimeUnit": "ns", "otherData": {"producer": "tracehouse export"}, "traceEvents": [\n'
        )
        self.first = True
        self.where: dict[int, tuple[int, int]] = {}
        self.next_tid: dict[int, int] = {}

    def _emit(self, event: dict) -> None:
        self.f.write((b"" if self.first else b",\n") + orjson.dumps(event))
        self.first = False

    def process(self, uuid: int, pid: int, name: str) -> None:
        self.where[uuid] = (pid, 0)
        self.pid_of[uuid] = pid
        self._emit({"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": name}})
        self._emit(
            {"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0, "args": {"sort_index": pid}}
        )

    def track(
        self, uuid: int, name: str, parent: int, order: int, pid: int, description: str | None = None
    ) -> None:
        tid = self.next_tid.get(pid, 1)
        self.next_tid[pid] = tid + 1
        self.where[uuid] = (pid, tid)
        self.pid_of[uuid] = pid
        self._emit({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": name}})
        self._emit(
            {"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": tid, "args": {"sort_index": tid}}
        )

    def slice(
        self, track: int, start: int, dur: int, name: str, category: str, args: dict, flows=(), terminating=()
    ) -> None:
        pid, tid = self.where[track]
        start = self._t(track, start)
        self._emit(
            {
                "ph": "X",
                "name": name,
                "cat": category,
                "pid": pid,
                "tid": tid,
                "ts": _us(start),
                "dur": _us(dur),
                "args": {**plain_args(args), "start_ns": start, "dur_ns": dur},
            }
        )
        for f in flows:
            self._emit(
                {
                    "ph": "s",
                    "id": f,
                    "name": "launch",
                    "cat": "launch",
                    "pid": pid,
                    "tid": tid,
                    "ts": _us(start),
                }
            )
        for f in terminating:
            self._emit(
                {
                    "ph": "f",
                    "bp": "e",
                    "id": f,
                    "name": "launch",
                    "cat": "launch",
                    "pid": pid,
                    "tid": tid,
                    "ts": _us(start),
                }
            )

    def instant(self, track: int, ts: int, name: str, category: str, args: dict) -> None:
        pid, tid = self.where[track]
        ts = self._t(track, ts)
        self._emit(
            {
                "ph": "i",
                "s": "t",
                "name": name,
                "cat": category,
                "pid": pid,
                "tid": tid,
                "ts": _us(ts),
                "args": {**plain_args(args), "start_ns": ts},
            }
        )

    def close(self, notes: list[str] = (), meta: dict | None = None, parent: int | None = None) -> None:
        self.f.write(
            b'\n], "tracehouse": ' + orjson.dumps({**plain_args(meta or {}), "notes": list(notes)}) + b"}\n"
        )


def open_writer(fmt: str, handle, shifts: dict[int, int] | None = None) -> PerfettoWriter | JsonWriter:
    """The writer of `fmt` (perfetto or json) onto the open binary handle."""
    return (PerfettoWriter if fmt == "perfetto" else JsonWriter)(handle, shifts)

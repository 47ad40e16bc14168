"""A small protobuf writer (and reader) for the few Perfetto trace fields the export uses.

A Perfetto trace is `Trace { repeated TracePacket packet = 1; }`: each packet is written as field 1,
length-delimited, one after the other, so a file can be streamed packet by packet and appended to.
The export needs TracePacket.{timestamp, trusted_packet_sequence_id, sequence_flags, track_event,
track_descriptor}, TrackDescriptor.{uuid, name, parent_uuid, process, thread, child_ordering,
sibling_order_rank, description}, TrackEvent.{type, track_uuid, name, categories, debug_annotations,
flow_ids, terminating_flow_ids} and DebugAnnotation.{name, string/int/double/bool value}; the field
numbers below are those of Perfetto's published protos (protos/perfetto/trace/...). No dependency:
the `perfetto` package's builder needs `protobuf` and keeps a message object per packet; this encoder
writes bytes directly (see bench/results.md, "export").

`read_packets` decodes exactly these fields back, for the tests and for `tracehouse export --check`.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator

# TracePacket
PKT_TIMESTAMP, PKT_SEQ_ID, PKT_TRACK_EVENT, PKT_SEQ_FLAGS, PKT_TRACK_DESCRIPTOR = 8, 10, 11, 13, 60
SEQ_INCREMENTAL_STATE_CLEARED = 1
# TrackDescriptor
TD_UUID, TD_NAME, TD_PROCESS, TD_THREAD, TD_PARENT, TD_CHILD_ORDERING, TD_SIBLING_RANK, TD_DESCRIPTION = (
    1,
    2,
    3,
    4,
    5,
    11,
    12,
    14,
)
CHILD_ORDER_EXPLICIT = 3
# ProcessDescriptor / ThreadDescriptor
PD_PID, PD_NAME = 1, 6
THD_PID, THD_TID, THD_NAME = 1, 2, 5
# TrackEvent
TE_ANNOTATIONS, TE_TYPE, TE_TRACK, TE_CATEGORIES, TE_NAME, TE_FLOWS, TE_TERMINATING_FLOWS = (
    4,
    9,
    11,
    22,
    23,
    47,
    48,
)
SLICE_BEGIN, SLICE_END, INSTANT = 1, 2, 3
# DebugAnnotation
DA_BOOL, DA_INT, DA_DOUBLE, DA_STRING, DA_NAME = 2, 4, 5, 6, 10


_SMALL = [bytes((i,)) for i in range(128)]


def _varint(n: int) -> bytes:
    if 0 <= n < 0x80:
        return _SMALL[n]
    if n < 0:
        n &= (1 << 64) - 1  # int64 as two's complement, as protobuf encodes negative int64
    if n < 0x80:
        return bytes((n,))
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _key(field: int, wire: int) -> bytes:
    return _varint((field << 3) | wire)


def f_varint(field: int, n: int) -> bytes:
    return _key(field, 0) + _varint(int(n))


def f_bytes(field: int, data: bytes) -> bytes:
    return _key(field, 2) + _varint(len(data)) + data


def f_str(field: int, text: str) -> bytes:
    return f_bytes(field, text.encode("utf-8", "replace"))


def f_fixed64(field: int, n: int) -> bytes:
    return _key(field, 1) + struct.pack("<Q", n & ((1 << 64) - 1))


def f_double(field: int, x: float) -> bytes:
    return _key(field, 1) + struct.pack("<d", x)


_NAMES: dict[str, bytes] = {}


def annotation(name: str, value) -> bytes:
    """One DebugAnnotation (an arg shown in the slice's details): bool, int, float or string."""
    body = _NAMES.get(name)
    if body is None:
        body = _NAMES[name] = f_str(DA_NAME, name)
    if isinstance(value, bool):
        body += f_varint(DA_BOOL, int(value))
    elif isinstance(value, int):
        body += f_varint(DA_INT, value)
    elif isinstance(value, float):
        body += f_double(DA_DOUBLE, value)
    else:
        body += f_str(DA_STRING, str(value))
    return f_bytes(TE_ANNOTATIONS, body)


def packet(body: bytes) -> bytes:
    """A TracePacket as an entry of Trace.packet (field 1)."""
    return f_bytes(1, body)


def track_descriptor(
    uuid: int,
    name: str | None = None,
    *,
    parent: int | None = None,
    pid: int | None = None,
    process_name: str | None = None,
    tid: int | None = None,
    thread_name: str | None = None,
    rank_order: int | None = None,
    explicit_children: bool = False,
    description: str | None = None,
) -> bytes:
    body = f_varint(TD_UUID, uuid)
    if name is not None:
        body += f_str(TD_NAME, name)
    if parent is not None:
        body += f_varint(TD_PARENT, parent)
    if pid is not None and tid is None:
        body += f_bytes(
            TD_PROCESS, f_varint(PD_PID, pid) + (f_str(PD_NAME, process_name) if process_name else b"")
        )
    if tid is not None:
        body += f_bytes(
            TD_THREAD,
            f_varint(THD_PID, pid or 0)
            + f_varint(THD_TID, tid)
            + (f_str(THD_NAME, thread_name) if thread_name else b""),
        )
    if explicit_children:
        body += f_varint(TD_CHILD_ORDERING, CHILD_ORDER_EXPLICIT)
    if rank_order is not None:
        body += f_varint(TD_SIBLING_RANK, rank_order)
    if description:
        body += f_str(TD_DESCRIPTION, description)
    return f_bytes(PKT_TRACK_DESCRIPTOR, body)


_K_TYPE, _K_TRACK, _K_CAT, _K_NAME = (
    _key(TE_TYPE, 0),
    _key(TE_TRACK, 0),
    _key(TE_CATEGORIES, 2),
    _key(TE_NAME, 2),
)
_K_FLOW, _K_TERM = _key(TE_FLOWS, 1), _key(TE_TERMINATING_FLOWS, 1)
_K_TS, _K_SEQ, _K_TE, _K_PKT = (
    _key(PKT_TIMESTAMP, 0),
    _key(PKT_SEQ_ID, 0),
    _key(PKT_TRACK_EVENT, 2),
    _key(1, 2),
)
_Q = struct.Struct("<Q").pack


def event(
    seq: int,
    ts: int,
    kind: int,
    track: int,
    name: str | None = None,
    *,
    category: str | None = None,
    args: bytes = b"",
    flows: tuple[int, ...] = (),
    terminating: tuple[int, ...] = (),
) -> bytes:
    """One TrackEvent packet: SLICE_BEGIN / SLICE_END / INSTANT at ts (ns) on track. The hot path of the
    export: keys are precomputed, pieces joined once."""
    parts = [_K_TYPE, _SMALL[kind], _K_TRACK, _varint(track)]
    if category:
        c = category.encode("utf-8", "replace")
        parts += (_K_CAT, _varint(len(c)), c)
    if name is not None:
        n = name.encode("utf-8", "replace")
        parts += (_K_NAME, _varint(len(n)), n)
    if args:
        parts.append(args)
    for f in flows:
        parts += (_K_FLOW, _Q(f))
    for f in terminating:
        parts += (_K_TERM, _Q(f))
    te = b"".join(parts)
    body = b"".join((_K_TS, _varint(ts), _K_SEQ, _varint(seq), _K_TE, _varint(len(te)), te))
    return b"".join((_K_PKT, _varint(len(body)), body))


# ---- reading back (the fields above only) -------------------------------------------------------------


def _read_varint(buf: bytes, i: int) -> tuple[int, int]:
    shift = n = 0
    while True:
        b = buf[i]
        i += 1
        n |= (b & 0x7F) << shift
        if b < 0x80:
            return n, i
        shift += 7


def fields(buf: bytes) -> Iterator[tuple[int, int, object]]:
    """(field, wire type, value) of one message: an int for varint / fixed64, bytes for length-delimited."""
    i, n = 0, len(buf)
    while i < n:
        key, i = _read_varint(buf, i)
        field, wire = key >> 3, key & 7
        if wire == 0:
            value, i = _read_varint(buf, i)
        elif wire == 1:
            value = struct.unpack_from("<Q", buf, i)[0]
            i += 8
        elif wire == 2:
            length, i = _read_varint(buf, i)
            value = buf[i : i + length]
            i += length
        elif wire == 5:
            value = struct.unpack_from("<I", buf, i)[0]
            i += 4
        else:
            raise ValueError(f"unsupported wire type {wire}")
        yield field, wire, value


def _signed(n: int) -> int:
    return n - (1 << 64) if n >= 1 << 63 else n


def _annotation(buf: bytes) -> tuple[str, object]:
    name, value = "", None
    for f, wire, v in fields(buf):
        if f == DA_NAME:
            name = v.decode()
        elif f == DA_STRING:
            value = v.decode()
        elif f == DA_INT:
            value = _signed(v)
        elif f == DA_BOOL:
            value = bool(v)
        elif f == DA_DOUBLE:
            value = struct.unpack("<d", struct.pack("<Q", v))[0]
    return name, value


def _sub(buf: bytes) -> dict:
    out = {}
    for f, _, v in fields(buf):
        out[f] = v.decode() if isinstance(v, bytes) else v
    return out


def _descriptor(buf: bytes) -> dict:
    """A TrackDescriptor as a dict: uuid, name, parent, pid, process_name, tid, thread_name, description."""
    d: dict = {}
    for tf, _, tv in fields(buf):
        if tf == TD_UUID:
            d["uuid"] = tv
        elif tf == TD_NAME:
            d["name"] = tv.decode()
        elif tf == TD_PARENT:
            d["parent"] = tv
        elif tf == TD_PROCESS:
            p = _sub(tv)
            d["pid"], d["process_name"] = p.get(PD_PID), p.get(PD_NAME)
        elif tf == TD_THREAD:
            t = _sub(tv)
            d["pid"], d["tid"], d["thread_name"] = t.get(THD_PID), t.get(THD_TID), t.get(THD_NAME)
        elif tf == TD_DESCRIPTION:
            d["description"] = tv.decode()
    return d


# TrackEvent fields read as one scalar: field number -> (key, decode the bytes)
_EVENT_SCALARS = {TE_TYPE: ("type", False), TE_TRACK: ("track", False), TE_NAME: ("name", True)}
_EVENT_SCALARS[TE_CATEGORIES] = ("category", True)


def _event(buf: bytes) -> dict:
    """A TrackEvent as a dict: type, track, name, category, args, flows, terminating."""
    e: dict = {"args": {}, "flows": [], "terminating": []}
    for ef, _, ev in fields(buf):
        if ef in _EVENT_SCALARS:
            key, text = _EVENT_SCALARS[ef]
            e[key] = ev.decode() if text else ev
        elif ef == TE_ANNOTATIONS:
            k, v = _annotation(ev)
            e["args"][k] = v
        elif ef == TE_FLOWS:
            e["flows"].append(ev)
        elif ef == TE_TERMINATING_FLOWS:
            e["terminating"].append(ev)
    return e


def read_packets(data: bytes) -> Iterator[dict]:
    """Each TracePacket of a trace as a dict: {'descriptor': {...}} or {'event': {...}, 'ts': ns}."""
    for f, wire, body in fields(data):
        if f != 1 or wire != 2:
            continue
        out: dict = {}
        for pf, _, pv in fields(body):
            if pf == PKT_TIMESTAMP:
                out["ts"] = pv
            elif pf == PKT_SEQ_FLAGS:
                out["seq_flags"] = pv
            elif pf == PKT_TRACK_DESCRIPTOR:
                out["descriptor"] = _descriptor(pv)
            elif pf == PKT_TRACK_EVENT:
                out["event"] = _event(pv)
        yield out


def track_rank(tracks: dict[int, dict], uuid: int) -> int:
    """The rank a track belongs to: its process track's pid less one (the export writes rank R as pid R + 1)."""
    track = tracks[uuid]
    while "parent" in track:
        track = tracks[track["parent"]]
    return track["pid"] - 1


def read_slices(data: bytes) -> tuple[dict[int, dict], list[dict]]:
    """(tracks by uuid, slices): each SLICE_BEGIN matched with the SLICE_END that closes it on its track
    (innermost open slice first, as Perfetto nests them), in timestamp order per track with the file's
    order for ties (Perfetto's sorter is stable). A slice: track, name, category, args, flows,
    terminating, start_ns, dur_ns; instants have dur_ns None."""
    tracks: dict[int, dict] = {}
    per_track: dict[int, list[tuple[int, int, dict]]] = {}
    for i, p in enumerate(read_packets(data)):
        if "descriptor" in p:
            tracks[p["descriptor"]["uuid"]] = p["descriptor"]
        elif "event" in p:
            per_track.setdefault(p["event"]["track"], []).append((p["ts"], i, p["event"]))
    slices = []
    for track, events in per_track.items():
        events.sort(key=lambda e: (e[0], e[1]))
        stack: list[dict] = []
        for ts, _, e in events:
            if e["type"] == SLICE_BEGIN:
                s = {**e, "start_ns": ts, "dur_ns": None}
                stack.append(s)
                slices.append(s)
            elif e["type"] == SLICE_END:
                if not stack:
                    raise ValueError(f"track {track}: a slice end at {ts} with no open slice")
                s = stack.pop()
                s["dur_ns"] = ts - s["start_ns"]
            else:
                slices.append({**e, "start_ns": ts, "dur_ns": None, "instant": True})
        if stack:
            raise ValueError(f"track {track}: {len(stack)} slice(s) never closed")
    return tracks, slices

"""The one JSON tokenizer of ingest: brackets and strings of raw trace bytes, for the paths that cannot
hand the bytes to a JSON parser (they are too large, cut off, or damaged).

Every reader here walks the same token stream (`tokens`): a bracket `[ ] { }`, or a lone `"` (a string
that does not end where the bytes end: cut by damage, by the end of a buffer, or, in `single_line`
mode, by a raw newline, which a JSON string cannot hold). Whole strings are skipped, so a bracket inside
a kernel name never counts; everything else (numbers, commas, garbage) is not a token.

Four readers stand on it:

- `value_end`          where the object or array that starts at a byte ends (a small value read from
                       the head of a file, e.g. `distributedInfo`);
- `array_close`        where a top-level array ends, found by walking the tail of a file backwards
                       (the `]` of `traceEvents` before the metadata that follows it); `event_array_close`
                       first tries the last bytes alone;
- `last_complete_element`  where the last complete element of a cut-off array ends (the salvage of a
                       truncated trace);
- `elements`           a streamed array split into its top-level elements and the garbage between
                       them (the salvage of a trace whose JSON is damaged in the middle).

`resync` finds where a tail that starts at an unknown byte inside the array can be read from: after
its first newline (pretty-printed JSON: a newline is never inside a string), else at the first event
boundary `}, {"` (minified JSON).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import BinaryIO

import orjson

# One match per token: everything up to it (whole strings, skipped possessively, and any other byte)
# and then the token itself, the last byte of the match: a bracket, or a lone quote (a string that
# does not end in the bytes given). One match per bracket, not per string: a trace has ~5x more
# strings than brackets, and the regex engine skips strings far faster than Python sees matches.
_STR = rb'"[^"\\]*+(?:\\.[^"\\]*+)*+"'
_STR_SINGLE_LINE = rb'"[^"\\\n]*+(?:\\.[^"\\\n]*+)*+"'
# The match ends at a token or at the end (an empty token): it never fails, so the engine never retries
# it from a later byte (which could start inside a string).
_TOKEN = re.compile(rb"(?:" + _STR + rb'|[^"\[\]{}])*+([\[\]{}"]|\Z)')
_TOKEN_SINGLE_LINE = re.compile(rb"(?:" + _STR_SINGLE_LINE + rb'|[^"\[\]{}])*+([\[\]{}"]|\Z)')
_EVENT_BOUNDARY = re.compile(rb'\}\s*,\s*(?=\{\s*")')
_KEY_BEFORE = re.compile(rb'"((?:[^"\\]|\\.)*)"\s*:\s*$')

OPEN = (b"[", b"{")
CLOSE = (b"]", b"}")
_PAIR = {b"]": b"[", b"}": b"{"}

READ_BYTES = 8 << 20  # bytes read at a time by `elements`


def tokens(
    data: bytes, start: int = 0, end: int | None = None, *, single_line: bool = False
) -> Iterator[tuple[bytes, int]]:
    """The tokens of data[start:end], in order, as (token, its index): a bracket, or `"` for a lone
    quote (a string cut at `end`, or at a raw newline with `single_line`). Whole strings are skipped,
    so a bracket inside a string is never a token."""
    pattern = _TOKEN_SINGLE_LINE if single_line else _TOKEN
    for match in pattern.finditer(data, start, len(data) if end is None else end):
        token = match.group(1)
        if not token:  # the end
            return
        yield token, match.end() - 1


def value_end(data: bytes, start: int) -> int | None:
    """The index after the object or array that opens at data[start], or None when it does not close
    within `data` (or data[start] opens neither). Strings are skipped whole; a mismatched close
    (`{ ... ]`) is not JSON: None."""
    if data[start : start + 1] not in OPEN:
        return None
    stack: list[bytes] = []
    for tok, pos in tokens(data, start):
        if tok in OPEN:
            stack.append(tok)
        elif tok in CLOSE:
            if not stack or stack.pop() != _PAIR[tok]:
                return None
            if not stack:
                return pos + 1
        else:  # a string that never ends
            return None
    return None


def resync(tail: bytes, aligned: bool) -> int | None:
    """Where the tokens of `tail` can be trusted from: 0 when `aligned` (the tail starts at a known
    boundary), else after the first newline, else at the first `}, {"` event boundary; None when the
    tail has neither."""
    if aligned:
        return 0
    newline = tail.find(b"\n")
    if newline >= 0:
        return newline + 1
    boundary = _EVENT_BOUNDARY.search(tail)
    return boundary.end() if boundary else None


class ScanError(ValueError):
    """The bytes are not the JSON a reader expects (its caller turns this into a TraceFormatError)."""


def key_before(data: bytes, start: int, pos: int, window: int = 4096) -> bytes | None:
    """The key (its raw bytes between the quotes) of the `"key":` that data[start:pos] ends with, or
    None. Read from the last `window` bytes: a key found there that no backslash precedes is the one
    the whole span would give (a match starting earlier would have to escape its opening quote), so
    only a key longer than the window, or one right after a backslash, needs the whole span."""
    if not data[start:pos].rstrip().endswith(b":"):
        return None
    low = max(start, pos - window)
    found = _KEY_BEFORE.search(data, low, pos)
    if low > start and (found is None or data[found.start() - 1 : found.start()] == b"\\"):
        found = _KEY_BEFORE.search(data, start, pos)
    return None if found is None else found.group(1)


def array_close(tail: bytes, start: int, end: int, key: bytes) -> int:
    """The index in `tail` of the `]` that closes the top-level array named `key`, the last token of
    tail[start:end] being the close of the enclosing object's last value.

    Walking back from `end` with a bracket stack, the array's `]` is a top-level `]` (one level inside
    the enclosing object) whose `[` is either before `start` (the array began before the tail) or
    right after `"key":`; other top-level arrays after it open and close inside the tail. Raises
    ScanError when the brackets do not match (`malformed`) or no such `]` exists (`never closed`).
    """
    stack: list[bytes] = []
    candidate = None  # a top-level `]` whose `[` is not yet seen
    brackets = [t for t in tokens(tail, start, end, single_line=True) if t[0] != b'"']
    for char, pos in reversed(brackets):
        if char in CLOSE:
            if char == b"]" and len(stack) == 1:
                candidate = pos
            stack.append(char)
        else:
            if not stack or _PAIR[stack[-1]] != char:
                raise ScanError("malformed")
            stack.pop()
            if char == b"[" and len(stack) == 1 and candidate is not None:
                if key_before(tail, start, pos) == key or not tail[start:pos].strip():
                    break
                candidate = None
    if candidate is None:
        raise ScanError("never closed")
    return candidate


CLOSE_WINDOW = 64 << 10  # bytes `event_array_close` reads first: the close and the metadata after it


def event_array_close(tail: bytes, start: int, end: int, key: bytes) -> int:
    """`array_close`, reading only the last CLOSE_WINDOW bytes where they suffice.

    The tokenizer reads ~35 MB/s, and the tail of a trace is 1-2 MB while the close of its event array
    and the metadata after it are in the last few hundred bytes: walking the whole tail cost 0.03-0.06 s
    of every ingest. The window is read from its first event boundary (`}, {"`); its `]` is taken when
    every complete element between that boundary and the `]` is a trace event (a JSON object with a
    `ph` key), so the `]` closes an array of events; anything else (no boundary, a window inside a
    long metadata value, a boundary inside a string, elements that are not events) reads the whole
    tail as before. The one case the two readings could differ: a top-level array of objects with `ph`
    keys, after the event array, longer than the window (no profiler writes one).
    """
    low = end - CLOSE_WINDOW
    if low > start:
        boundary = _EVENT_BOUNDARY.search(tail, low, end)
        if boundary is not None:
            first = boundary.end()
            try:
                close = array_close(tail, first, end, key)
                events = orjson.loads(b"[" + tail[first:close] + b"]")
            except (ScanError, orjson.JSONDecodeError):
                events = None
            if events and all(isinstance(event, dict) and "ph" in event for event in events):
                return close
    return array_close(tail, start, end, key)


def last_complete_element(tail: bytes, start: int, aligned: bool) -> int | None:
    """Where the last complete element of a cut-off array ends in `tail` (index after its `}`), or None.

    `aligned`: tail[start] is the array's `[`. Otherwise tail[start:] begins somewhere inside the array
    at an unknown depth (see `resync`): the array's own level is then the lowest depth the bracket walk
    reaches (every complete element closes back to it), and an element ends where a `}` returns to that
    level and a `,` (or nothing) follows. Only bytes before the first cut string are read.
    """
    depth, level = 0, None
    closes: list[tuple[int, int]] = []  # (position after a `}`, depth after it)
    end = len(tail)
    for char, pos in tokens(tail, start, single_line=True):
        if char == b'"':  # a string cut by the damage: nothing after it can be trusted
            end = pos
            break
        if char in OPEN:
            depth += 1
        else:
            depth -= 1
            if char == b"}":
                closes.append((pos + 1, depth))
        if level is None or depth < level:
            level = depth
    if aligned:
        level = 1  # inside `[`
    for after_close, after in reversed(closes):
        if after != level:
            continue
        follow = tail[after_close:end].lstrip()
        if aligned or follow[:1] == b"," or not follow:
            return after_close
    return None


@dataclass(frozen=True)
class Piece:
    """One part of a streamed array: `element` (a complete top-level value that is an object or array,
    its bytes in `data`), `gap` (bytes between two elements that are not one: garbage, a bare scalar,
    a stray close), or `cut` (an element that never ends). `offset`: its first byte in the stream."""

    kind: str
    offset: int
    data: bytes = b""


def _kept_from(elem_start: int | None, prev_end: int | None, pos: int) -> int:
    """The first byte of the buffer still needed: the element being cut, the gap before it, or the scan."""
    return min(min(x for x in (elem_start, prev_end, pos) if x is not None), pos)


def _shifted(at: int | None, keep: int) -> int | None:
    return None if at is None else at - keep


def elements(stream: BinaryIO, read_bytes: int = READ_BYTES) -> Iterator[Piece]:
    """The top-level elements of the JSON array in `stream`, streamed: one read buffer plus the element
    being cut in memory (a string that does not end in the buffer makes the next read larger).

    Bytes before the array's `[` are ignored; the array ends at a `]` followed by nothing but
    whitespace. Between elements, anything but whitespace and commas is a `gap`, reported at the
    element that follows it (trailing garbage before the final `]` is not); a bare scalar element is
    such a gap. An element still open at the end of the stream is a `cut`.
    """
    depth = 0
    buf = b""
    base = 0  # stream position of buf[0]
    pos = 0  # scan position in buf
    elem_start = None  # buf index where the current top-level element starts
    prev_end = None  # buf index after the previous element (or the `[`)
    eof = False
    need = read_bytes
    while True:
        more = b"" if eof else stream.read(need)
        eof = eof or not more  # an empty read: the end of the stream
        buf += more
        stalled = False
        for tok, at in tokens(buf, pos):
            if tok == b'"':  # a string that does not end in this buffer
                if not eof:
                    stalled = True
                    pos = at
                    break
                pos = at + 1
                continue  # at the end of the stream: the cut element is reported below
            pos = at + 1
            if depth == 0:
                if tok == b"[":
                    depth, prev_end = 1, pos
                continue
            if depth == 1:
                if tok in CLOSE:
                    if tok == b"]" and not buf[pos:].strip() and eof:
                        depth = 0
                    continue  # a stray close between elements: garbage, part of the next gap
                gap = buf[prev_end:at].strip(b" \t\r\n,") if prev_end is not None else b""
                if gap:
                    yield Piece("gap", base + prev_end)
                elem_start = at
                depth = 2
                continue
            depth += 1 if tok in OPEN else -1
            if depth == 1:
                yield Piece("element", base + elem_start, buf[elem_start:pos])
                elem_start, prev_end = None, pos
        else:
            pos = len(buf)
        if eof and not stalled:
            break
        # drop what is done; keep the element being cut (or the string that did not end)
        keep = _kept_from(elem_start, prev_end, pos)
        buf, base = buf[keep:], base + keep
        pos -= keep
        elem_start = _shifted(elem_start, keep)
        prev_end = _shifted(prev_end, keep)
        need = need * 2 if stalled else read_bytes
    if depth >= 2:  # the last element never ended
        yield Piece("cut", base + (elem_start or 0))

"""Stage 1 of ingest: bytes of one trace file -> its metadata and its event array on disk.

A Kineto trace is one JSON object whose `traceEvents` array holds nearly all of its bytes, with a few
small metadata keys before it (`schemaVersion`, `deviceProperties`, `distributedInfo`) and after it
(`traceName`, `baseTimeNanoseconds`). We inflate the file in fixed-size pieces, parse the small
metadata parts with orjson, and copy the bytes of the array verbatim into a file that DuckDB's JSON
reader then decodes into typed columns. Nothing here holds more than one piece (plus a bounded tail)
in memory, whatever the size of the trace.

Damaged files (see README, "Broken traces"): a file whose gzip stream or JSON ends early, or whose
compressed data is corrupt partway, is *salvaged*: the events up to the last complete one before the
damage are kept and the rank lands with the warning `file truncated at byte N ...: events kept` (N: the
uncompressed JSON byte where readable data ends). Only when no complete event precedes the damage is
the file refused (TraceFormatError, naming the file and the position). A second `traceEvents` inside the
event array (several processes wrote one file) is refused: mixing two ranks' events would be wrong.
"""

from __future__ import annotations

import hashlib
import re
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

import orjson
from tracehouse.ingest import jsonscan

from tracehouse.errors import TraceFormatError

try:  # ISA-L inflates about 1.4x faster than zlib (measured in bench/); optional.
    from isal import isal_zlib as _zlib
except ImportError:  # pragma: no cover - depends on the environment
    _zlib = zlib

PIECE_BYTES = 1 << 20  # compressed bytes read at a time (inflates to ~10-20 MB: bounded memory)
HEAD_LIMIT = 64 << 20  # metadata before `traceEvents` larger than this is not a Kineto trace
TAIL_KEEP = 1 << 20  # bytes kept from the end of the array to find where it closes

_TRACE_EVENTS_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')


@dataclass
class TraceSource:
    """What stage 1 learned about one file."""

    path: Path
    size: int  # bytes on disk
    sha256: str
    json_bytes: int = 0  # uncompressed JSON bytes
    metadata: dict = field(default_factory=dict)  # every top-level key but traceEvents
    events_file: Path | None = None  # the `[...]` array, verbatim
    bare_array: bool = False  # the file was a bare event array without `traceEvents`
    array_offset: int = 0  # uncompressed byte of the file where the event array (its `[`) starts
    truncation: str | None = None  # set when the events after some point were lost (salvaged file)
    warnings: dict[str, int] = field(default_factory=dict)  # repairs made while reading the bytes
    empty_reason: str | None = None  # set by decode when no event has a timestamp: nothing to ingest
    # The array as written: [events_file], or with read_trace's piece_bytes the files it was cut into
    # (each a valid array, cut between two events; decode reads them side by side, join_pieces undoes it)
    pieces: list[Path] = field(default_factory=list)


# A cut between two events: the `}` that closes one, the comma, the `{` (and first key) of the next.
# Found in bytes already known to be inside the array; it can still fall inside a string or a nested
# object, and then the piece before it is not valid JSON (it ends inside a string or an open bracket):
# decode sees that and reads the joined array instead, so a wrong cut costs time, never rows.
_EVENT_CUT = re.compile(rb'\}\s*,\s*\{\s*"')


class _ArrayPieces:
    """Writes the event array to one file, or (piece_bytes) to consecutive files of about that many
    bytes each, cut between two events: piece k ends `...}]`, piece k+1 starts `[` where the array had
    the comma between them."""

    def __init__(self, events_file: Path, piece_bytes: int | None, on_piece=None):
        self.events_file = events_file
        self.piece_bytes = piece_bytes
        self.on_piece = on_piece
        self.paths: list[Path] = []
        self.out = None
        self.written = 0
        self._next()

    def _next(self) -> None:
        if self.out is not None:
            self._close_piece()
        path = self.events_file if self.piece_bytes is None else piece_path(self.events_file, len(self.paths))
        self.paths.append(path)
        self.out = open(path, "wb")  # noqa: SIM115 - open across write() calls; closed by _next and __exit__
        self.written = 0

    def write(self, data) -> None:
        """Bytes of the array, in order (a cut is always before an event's `{`: the last piece holds the
        array's last event and its close)."""
        view, start = memoryview(data), 0
        while self.piece_bytes is not None and self.written + len(view) - start >= self.piece_bytes:
            cut = _EVENT_CUT.search(view, start + max(0, self.piece_bytes - self.written))
            if cut is None:
                break
            self.out.write(view[start : cut.start() + 1])
            self.out.write(b"]")
            self._next()
            self.out.write(b"[")
            self.written = 1
            start = cut.start() + cut.group(0).index(b",") + 1
        self.out.write(view[start:])
        self.written += len(view) - start

    def __enter__(self):
        return self

    def _close_piece(self) -> None:
        self.out.close()
        if self.on_piece is not None:
            self.on_piece(len(self.paths) - 1, self.paths[-1])

    def __exit__(self, error_type, *exc) -> None:
        if error_type is None and len(self.paths) > 1:
            self._close_piece()  # the last piece, complete; an array of one piece is one file: not announced
        else:
            self.out.close()


def piece_path(events_file: Path, k: int) -> Path:
    return events_file.with_name(f"{events_file.stem}.{k}{events_file.suffix}")


def remove_array(events_file: Path) -> None:
    """Remove the event array's file and its pieces, whichever exist."""
    events_file.unlink(missing_ok=True)
    for piece in events_file.parent.glob(f"{events_file.stem}.*{events_file.suffix}"):
        piece.unlink(missing_ok=True)


def join_pieces(pieces: list[Path], events_file: Path) -> None:
    """Write the array the pieces were cut from to events_file, byte for byte (each cut: `]` + `[` back
    to the comma), and remove the pieces."""
    if pieces == [events_file]:
        return
    with open(events_file, "wb") as out:
        for k, piece in enumerate(pieces):
            data = piece.read_bytes()
            if k > 0:
                out.write(b",")
                data = data[1:]
            out.write(data[:-1] if k < len(pieces) - 1 else data)
            piece.unlink()


class _Damage:
    """Where the compressed stream stopped being readable (what, where), if it did."""

    what: str | None = None
    where: str = ""


def new_inflater(first: bytes):
    """A decompressor for gzip/zlib data, or None when the bytes are plain text."""
    if first[:2] == b"\x1f\x8b":
        return _zlib.decompressobj(16 + _zlib.MAX_WBITS)
    if first[:1] == b"\x78":  # a zlib header (rare, but seen from some exporters)
        return _zlib.decompressobj()
    return None


def _pieces(stream: BinaryIO, label: str, digest, damage: _Damage | None = None):
    """Yield the uncompressed content of `stream` in pieces, hashing the raw bytes as we go.

    Corrupt or truncated compressed data ends the pieces early; with `damage` given, what and where
    are recorded there (the bytes inflated before the damage have been yielded), else it raises.
    """
    first = stream.read(PIECE_BYTES)
    digest.update(first)
    inflater = new_inflater(first)
    zlib_header = first[:1] == b"\x78"
    offset = 0
    produced = 0
    chunk = first
    while chunk:
        if inflater is None:
            yield chunk
        else:
            try:
                out = inflater.decompress(chunk)
                # A gzip member can be followed by another one (concatenated gzip): keep going.
                while inflater.eof and inflater.unused_data:
                    rest = inflater.unused_data
                    inflater = _zlib.decompressobj(16 + _zlib.MAX_WBITS)
                    out += inflater.decompress(rest)
            except Exception as exc:  # noqa: BLE001 - zlib.error, isal's IsalError, ...
                what = f"corrupt compressed data ({exc})"
                if damage is None:
                    raise TraceFormatError(label, what, f"compressed byte {offset}")
                # Inflate again in small steps to keep what this piece held before the damage.
                position = offset
                for out, position in _reinflate(stream.name, produced, zlib_header):
                    produced += len(out)
                    yield out
                damage.what, damage.where = what, f"compressed byte {position}"
                while rest := stream.read(PIECE_BYTES):  # the sha256 is of the whole file
                    digest.update(rest)
                return
            if out:
                produced += len(out)
                yield out
        offset += len(chunk)
        chunk = stream.read(PIECE_BYTES)
        digest.update(chunk)
    if inflater is not None and not inflater.eof:
        what, where = "truncated compressed file (the gzip stream ends early)", f"compressed byte {offset}"
        if damage is None:
            raise TraceFormatError(label, what, where)
        damage.what, damage.where = what, where


def _reinflate(path, skip: int, zlib_header: bool, step: int = 16 << 10):
    """(output, compressed offset) of `path` inflated with zlib in small steps, from uncompressed byte
    `skip` on, until the data stops being readable: the salvage path of a corrupt gzip block."""
    inflater = zlib.decompressobj() if zlib_header else zlib.decompressobj(16 + zlib.MAX_WBITS)
    done = 0  # uncompressed bytes seen
    offset = 0
    with open(path, "rb") as f:
        while chunk := f.read(step):
            saved = inflater.copy()
            try:
                out = inflater.decompress(chunk)
                while inflater.eof and inflater.unused_data:
                    rest = inflater.unused_data
                    inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
                    out += inflater.decompress(rest)
            except zlib.error:
                # the damage is in this step: feed it byte by byte to keep every byte before it
                out, inflater = b"", saved
                for i in range(len(chunk)):
                    try:
                        out += inflater.decompress(chunk[i : i + 1])
                    except zlib.error:
                        offset += i
                        break
                    if inflater.eof:  # the member ended; what follows would need a new member
                        offset += i + 1
                        break
                yield (out[max(0, skip - done) :] if done + len(out) > skip else b""), offset
                return
            if done + len(out) > skip:
                yield out[max(0, skip - done) :], offset
            done += len(out)
            offset += len(chunk)


def _parse_object_text(text: bytes, label: str, where: str) -> dict:
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise TraceFormatError(label, f"invalid JSON in the trace metadata ({exc})", where)
    if not isinstance(value, dict):
        raise TraceFormatError(label, "the top-level JSON value is not an object", where)
    return value


def _close_array(tail: bytes, aligned: bool, label: str) -> tuple[int, dict]:
    """Find where the event array ends in the last bytes of the file.

    Returns (number of bytes of `tail` that belong to the array, the metadata that follows it). The
    array's `]` is found by jsonscan.event_array_close (a backward bracket walk, of the last bytes
    first); a tail that does not start at the array itself (`aligned`) is read from jsonscan.resync's
    point.
    """
    start = jsonscan.resync(tail, aligned) or 0
    end = len(tail.rstrip())
    if end <= start or not tail[:end].endswith(b"}"):
        raise TraceFormatError(label, "truncated JSON: the file ends inside the event array", "end of file")
    try:
        close = jsonscan.event_array_close(tail, start, end, b"traceEvents") + 1
    except jsonscan.ScanError as exc:
        what = (
            "malformed JSON around the end of the event array"
            if str(exc) == "malformed"
            else "truncated JSON: the event array is never closed"
        )
        raise TraceFormatError(label, what, "end of file")
    rest = tail[close:].strip()
    meta = {}
    if rest.startswith(b","):
        try:
            meta = orjson.loads(b"{" + rest[1:])
        except orjson.JSONDecodeError as exc:
            raise TraceFormatError(
                label, f"invalid JSON in the metadata after the events ({exc})", "end of file"
            )
    return close, meta if isinstance(meta, dict) else {}


def _last_complete_event(tail: bytes, aligned: bool) -> int | None:
    """Where the last complete event of a cut-off array ends in `tail` (index after its `}`), or None
    (jsonscan.last_complete_element, read from jsonscan.resync's point)."""
    start = jsonscan.resync(tail, aligned)
    return None if start is None else jsonscan.last_complete_element(tail, start, aligned)


_DAMAGED_HINT = (
    "the file was skipped and the other files still land; copy it again, or re-run the profiler "
    "and let it finish writing"
)
_SECOND_DOCUMENT = re.compile(rb'"traceEvents"\s*:')


class _ArrayCut:
    """Finds the event array in the inflated pieces of one file and writes it out, keeping a bounded tail in
    memory (everything before it is certainly inside the array): the state of read_trace."""

    def __init__(self, source: TraceSource, label: str, out: _ArrayPieces):
        self.source, self.label, self.out = source, label, out
        self.head = b""
        self.found = False
        self.tail = b""
        self.aligned = True  # the tail still starts at the array's `[`
        self.carry = b""  # the last bytes of the previous piece, to find a key cut between two pieces

    def start(self, piece: bytes) -> bytes | None:
        """The piece from the array's `[` on once the array is found (the metadata before it parsed), or
        None while the head is still before it."""
        source = self.source
        self.head += piece
        stripped = self.head.lstrip()
        if stripped[:1] == b"[":  # a bare array of events
            source.bare_array = self.found = True
            source.array_offset = len(self.head) - len(stripped)
            piece = stripped
        else:
            match = _TRACE_EVENTS_KEY.search(self.head)
            if match is None:
                if len(self.head) > HEAD_LIMIT or (stripped and stripped[:1] != b"{"):
                    raise TraceFormatError(
                        self.label, "not a Kineto trace: no `traceEvents` array", "start of file"
                    )
                return None
            self.found = True
            before = self.head[: match.start()].rstrip()
            if before.endswith(b","):
                before = before[:-1]
            source.metadata = _parse_object_text(before + b"}", self.label, "metadata before traceEvents")
            source.array_offset = match.end() - 1
            piece = self.head[match.end() - 1 :]
        self.head = b""
        self.carry = b""
        return piece

    def no_second_document(self, piece: bytes) -> None:
        """Two documents in one file (several ranks writing one trace): the array holds another
        `"traceEvents":`. bytes.find is fast; the carried bytes catch a key cut between pieces."""
        if b'"traceEvents"' in piece or b'"traceEvents"' in self.carry + piece[:32]:
            window = self.carry + piece
            second = _SECOND_DOCUMENT.search(window)
            if second is not None:
                at = self.source.json_bytes - len(window) + second.start()
                raise TraceFormatError(
                    self.label,
                    "two JSON documents in one file: a second `traceEvents` array starts inside the "
                    "first (several processes wrote this file?); write one trace file per rank",
                    f"byte {at}",
                )
        self.carry = piece[-32:]

    def keep(self, piece: bytes) -> None:
        """Write what is certainly inside the array; a large piece is written straight from the inflater's
        buffer (no copy into the tail)."""
        out = self.out
        if len(piece) >= TAIL_KEEP:
            if self.tail:
                out.write(self.tail)
            out.write(memoryview(piece)[:-TAIL_KEEP])
            self.tail = piece[-TAIL_KEEP:]
            self.aligned = False
        else:
            self.tail += piece
            if len(self.tail) > 2 * TAIL_KEEP:
                out.write(self.tail[:-TAIL_KEEP])
                self.tail = self.tail[-TAIL_KEEP:]
                self.aligned = False

    def not_found(self, damage: _Damage) -> TraceFormatError:
        """The error of a file whose array was never found."""
        if damage.what:
            return TraceFormatError(
                self.label,
                f"{damage.what}; no event before the damage, nothing could be kept",
                damage.where,
                hint=_DAMAGED_HINT,
            )
        if not self.head.strip():
            return TraceFormatError(self.label, "empty file", "byte 0")
        return TraceFormatError(self.label, "not a Kineto trace: no `traceEvents` array", "start of file")

    def _close(self) -> tuple[int, dict]:
        """(bytes of the tail to keep, the metadata after the array)."""
        tail = self.tail
        if self.source.bare_array:
            end = len(tail.rstrip())
            if not tail[:end].endswith(b"]"):
                raise TraceFormatError(
                    self.label, "truncated JSON: the event array is never closed", "end of file"
                )
            return end, {}
        return _close_array(tail, self.aligned, self.label)

    def finish(self, damage: _Damage) -> dict:
        """Write the tail up to the array's end (or, when the file is damaged, up to the last complete event:
        refused only when there is none); the metadata after the array."""
        source, tail = self.source, self.tail
        try:
            keep, after = self._close()
        except TraceFormatError as problem:
            # Salvage: keep the events up to the last complete one; refuse only when there is none.
            cut = _last_complete_event(tail, self.aligned)
            end_at = source.json_bytes
            what = damage.what or problem.what
            if cut is None:
                raise TraceFormatError(
                    self.label,
                    f"{what}; no complete event before the damage, nothing could be kept",
                    damage.where if damage.what else f"byte {end_at}",
                    hint=_DAMAGED_HINT,
                )
            self.out.write(tail[:cut] + b"]")
            source.truncation = f"file truncated at byte {end_at}" + (
                f" ({damage.what} at {damage.where})" if damage.what else ""
            )
            return {}
        self.out.write(tail[:keep])
        if damage.what:  # every byte inflated, but the final checksum failed: the content may be damaged
            source.warnings[f"{damage.what} at {damage.where}; the events that could be read were kept"] = 1
        return after


def read_trace(path: Path, events_file: Path, piece_bytes: int | None = None, on_piece=None) -> TraceSource:
    """Inflate `path`, write its event array to `events_file`, and return what was found. piece_bytes:
    write it instead to pieces of about that many bytes (piece_path(events_file, k), in source.pieces);
    on_piece(k, path) is called as each piece is complete (when there are two or more), so that it can
    be decoded while the rest is read (decode.PieceDecoder.add)."""
    label = str(path)
    digest = hashlib.sha256()
    source = TraceSource(path=path, size=path.stat().st_size, sha256="")
    damage = _Damage()
    with open(path, "rb") as stream, _ArrayPieces(events_file, piece_bytes, on_piece) as out:
        cut = _ArrayCut(source, label, out)
        for piece in _pieces(stream, label, digest, damage):
            source.json_bytes += len(piece)
            if not cut.found:
                piece = cut.start(piece)
                if piece is None:
                    continue
            cut.no_second_document(piece)
            cut.keep(piece)
        if not cut.found:
            raise cut.not_found(damage)
        after = cut.finish(damage)
    source.metadata.update(after)
    source.sha256 = digest.hexdigest()
    source.events_file = events_file
    source.pieces = out.paths
    return source

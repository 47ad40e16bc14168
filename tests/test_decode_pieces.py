"""The event array cut into pieces and decoded side by side (ingest/source.py `_ArrayPieces`,
ingest/decode.py `_load_pieces`) gives exactly what one read of the whole array gives: every row of
`events` (ev_id, the event's position in the file, included), the same warnings, the same refusals;
on every broken trace of tests/broken_traces.py (truncated, corrupt, bad values, bad bytes, huge events),
with pieces small enough that every trace is cut many times, and on cuts that fall where an event cannot
be cut (inside a string, inside a nested object), which read the joined array instead."""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

import pytest
from broken_traces import KINDS, make_case
from tracebuilder import write_trace
from tracehouse.ingest.decode import load_raw_events
from tracehouse.ingest.rank import work_connection
from tracehouse.ingest.source import join_pieces, piece_path, read_trace, remove_array

from tracehouse.errors import TraceFormatError

ROOT = Path(__file__).resolve().parents[1]
SMALL_PIECE = 2048  # bytes: every test trace is cut into several pieces


def decoded(trace, work, piece_bytes):
    """(rows of events in ev_id order, warnings, pieces written, whether events is the pieces' view) or
    the refusal's text."""
    work.mkdir(parents=True, exist_ok=True)
    events_file = work / "events.json"
    try:
        source = read_trace(trace, events_file, piece_bytes)
        pieces = len(source.pieces)
        con = work_connection(work)
        try:
            warnings = load_raw_events(con, events_file, source)
            rows = con.execute("SELECT * FROM events ORDER BY ev_id").fetchall()
            (is_view,) = con.execute(
                "SELECT count(*) FROM duckdb_views() WHERE view_name = 'events' AND NOT internal"
            ).fetchone()
        finally:
            con.close()
    except TraceFormatError as refused:
        return str(refused)
    finally:
        remove_array(events_file)
    assert not list(work.glob("events*")), "the array's files are removed"
    return rows, warnings, pieces, is_view


def _trace_files(case):
    return [p for path in case.paths for p in ([path] if path.is_file() else sorted(path.iterdir()))]


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_pieces_decode_as_the_whole_array(kind, tmp_path, monkeypatch):
    monkeypatch.setenv("TRACEHOUSE_THREADS", "2")
    case = make_case(kind, tmp_path / "case")
    for n, trace in enumerate(_trace_files(case)):
        if trace.suffix not in (".gz", ".json"):
            continue
        whole = decoded(trace, tmp_path / f"whole{n}", None)
        # about 4-10 pieces each (gzip: its size is about a tenth of its JSON's)
        plain = trace.read_bytes()[:2] != b"\x1f\x8b"
        cut = decoded(
            trace, tmp_path / f"cut{n}", max(SMALL_PIECE, trace.stat().st_size // (4 if plain else 1))
        )
        if isinstance(whole, str):
            assert cut == whole
            continue
        assert cut[:2] == whole[:2]
        assert whole[2] == 1
        if trace.stat().st_size > 4 * SMALL_PIECE and kind != "huge_kernel_name":
            assert cut[2] > 1, "the trace was cut"


def _launches(n: int, name: str = "gemm", args: dict | None = None) -> list[dict]:
    events = []
    for i in range(n):
        events.append(
            {
                "ph": "X",
                "cat": "cuda_runtime",
                "name": "cudaLaunchKernel",
                "pid": 1,
                "tid": 7,
                "ts": 1000.0 + 10 * i,
                "dur": 2.0,
                "args": {"correlation": i, **(args or {})},
            }
        )
        events.append(
            {
                "ph": "X",
                "cat": "kernel",
                "name": name,
                "pid": 0,
                "tid": 7,
                "ts": 1003.0 + 10 * i,
                "dur": 5.125,
                "args": {"correlation": i, "stream": 7, "device": 0},
            }
        )
    return events


@pytest.mark.parametrize(
    "where",
    [
        "a name that holds a cut",  # `}, {"` inside a string: the piece before ends inside it
        "nested objects",  # `}, {"` between two objects of an args list: a piece with an open bracket
    ],
)
def test_a_cut_where_events_cannot_be_cut_reads_the_whole_array(where, tmp_path, monkeypatch):
    monkeypatch.setenv("TRACEHOUSE_THREADS", "2")
    if where == "a name that holds a cut":
        events = _launches(200, name="kernel<x}, {")
    else:
        events = _launches(200, args={"nested": [{"a": i} for i in range(30)]})
    trace = write_trace(tmp_path / "t.json.gz", events)
    whole = decoded(trace, tmp_path / "whole", None)
    cut = decoded(trace, tmp_path / "cut", SMALL_PIECE)
    assert cut[:2] == whole[:2] and len(whole[0]) == len(events)
    assert cut[2] > 1 and cut[3] == 0, "cut, refused, and read as one file"


def test_pieces_join_back_to_the_array_byte_for_byte(tmp_path):
    events = _launches(300)
    text = json.dumps({"traceEvents": events}, indent=1).encode()
    trace = tmp_path / "t.json"
    trace.write_bytes(text)
    events_file = tmp_path / "events.json"
    source = read_trace(trace, events_file, SMALL_PIECE)
    assert len(source.pieces) > 5 and source.pieces[1] == piece_path(events_file, 1)
    for piece in source.pieces:  # each piece is a JSON array of whole events
        assert all(isinstance(e, dict) and "ph" in e for e in json.loads(piece.read_bytes()))
    join_pieces(source.pieces, events_file)
    assert events_file.read_bytes() == text[source.array_offset : text.rindex(b"]") + 1]
    assert not any(p.exists() for p in source.pieces)


def test_the_array_is_cut_in_one_piece_per_thread_from_8_mb(tmp_path, monkeypatch):
    from tracehouse.ingest import decode

    trace = write_trace(tmp_path / "t.json.gz", _launches(2000))
    json_bytes = len(gzip.decompress(trace.read_bytes()))
    monkeypatch.setenv("TRACEHOUSE_THREADS", "2")
    assert decode.piece_bytes(trace) is None, "a small array is one file"
    monkeypatch.setattr(decode, "CUT_FROM", json_bytes)
    assert decode.piece_bytes(trace) == json_bytes // 2 + (1 << 20)  # the gzip trailer's size
    plain = tmp_path / "t.json"
    plain.write_bytes(gzip.decompress(trace.read_bytes()))
    assert decode.piece_bytes(plain) == json_bytes // 2 + (1 << 20)
    monkeypatch.setenv("TRACEHOUSE_THREADS", "1")
    assert decode.piece_bytes(trace) is None, "one thread: one file"


def rank_tables(trace, work, piece_bytes, monkeypatch):
    """{table: rows} of one rank staged with read_trace cutting at piece_bytes (None: one file); the
    pieces are decoded as read_trace writes them (staged's PieceDecoder)."""
    from tracehouse.ingest import rank

    monkeypatch.setattr(rank, "piece_bytes", lambda path: piece_bytes)
    with rank.staged(trace, work) as staged:
        (is_view,) = staged.con.execute(
            "SELECT count(*) FROM duckdb_views() WHERE view_name = 'events' AND NOT internal"
        ).fetchone()
        return is_view, {
            name: staged.con.execute(f"SELECT * FROM {source} ORDER BY {order}").fetchall()
            for name, (source, order) in rank.TABLES.items()
        }


def test_a_rank_ingested_from_pieces_has_the_same_tables(tmp_path, monkeypatch):
    """Every table of a rank (the transforms read `events` as the view of the pieces) as from one file."""
    sys.path.insert(0, str(ROOT))
    from tracehouse.synth import write_scenario

    write_scenario("serving-decode", tmp_path / "synth", ranks=1, seed=3)
    (trace,) = sorted((tmp_path / "synth").glob("*.trace.json*"))
    monkeypatch.setenv("TRACEHOUSE_THREADS", "2")
    one_file = rank_tables(trace, tmp_path / "one", None, monkeypatch)
    pieces = rank_tables(trace, tmp_path / "pieces", 64 << 10, monkeypatch)
    assert (one_file[0], pieces[0]) == (0, 1), "events: a table from one file, the pieces' view"
    assert pieces[1] == one_file[1] and len(pieces[1]["kernels"]) > 100


@pytest.mark.parametrize("where", ["a name that holds a cut", "nested objects"])
def test_a_rank_whose_cut_fails_is_read_from_the_joined_array(where, tmp_path, monkeypatch):
    monkeypatch.setenv("TRACEHOUSE_THREADS", "2")
    args = {"nested": [{"a": i} for i in range(30)]} if where == "nested objects" else None
    events = _launches(300, name="kernel<x}, {" if where != "nested objects" else "gemm", args=args)
    trace = write_trace(tmp_path / "t.json.gz", events)
    one_file = rank_tables(trace, tmp_path / "one", None, monkeypatch)
    pieces = rank_tables(trace, tmp_path / "pieces", SMALL_PIECE, monkeypatch)
    assert pieces == one_file and one_file[0] == 0 and len(one_file[1]["kernels"]) == 300
    assert not list((tmp_path / "pieces").glob("events*")), "no piece left behind"

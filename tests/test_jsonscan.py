"""ingest/jsonscan.py: the one tokenizer of the salvage paths, on truncated, corrupt and odd bytes.

The token stream is checked against a byte-by-byte reference (what a JSON string is, written the slow
and obvious way) on random inputs; each reader on the shapes it must get right; `elements` gives the
same pieces whatever its read size (a string or an event cut between two reads).
"""

from __future__ import annotations

import gzip
import io
import random

import orjson
import pytest
from tracehouse.ingest import jsonscan
from tracehouse.ingest.run import peek_distributed_info

ALPHABET = [
    b"[",
    b"]",
    b"{",
    b"}",
    b'"',
    b"\\",
    b",",
    b":",
    b"\n",
    b" ",
    b"a",
    b"1",
    b'"k]{"',
    b'\\"',
    b'"traceEvents": [',
    b'{"name": "x"}',
    b"}, {",
    b"\xff",
]


def reference_tokens(data: bytes, single_line: bool) -> list[tuple[bytes, int]]:
    """Brackets outside strings and the opening quote of every string that does not end."""
    out, i = [], 0
    while i < len(data):
        c = data[i : i + 1]
        if c == b'"':
            j = i + 1
            while j < len(data):
                d = data[j : j + 1]
                if d == b"\\":
                    if j + 1 >= len(data) or data[j + 1 : j + 2] == b"\n":
                        j = len(data) + 1  # an escape of nothing, or of a newline: not a string
                        break
                    j += 2
                    continue
                if d == b'"' or (single_line and d == b"\n"):
                    break
                j += 1
            if j < len(data) and data[j : j + 1] == b'"':
                i = j + 1  # a whole string
                continue
            out.append((b'"', i))
            i += 1
            continue
        if c in (b"[", b"]", b"{", b"}"):
            out.append((c, i))
        i += 1
    return out


def random_bytes(rnd: random.Random) -> bytes:
    return b"".join(rnd.choice(ALPHABET) for _ in range(rnd.randint(0, 40)))


@pytest.mark.parametrize("single_line", [False, True])
def test_tokens_match_the_reference_on_random_bytes(single_line):
    rnd = random.Random(16)
    for _ in range(1500):
        data = random_bytes(rnd)
        assert list(jsonscan.tokens(data, single_line=single_line)) == reference_tokens(data, single_line), (
            data
        )


def test_tokens_skip_strings_and_report_a_cut_one():
    data = b'{"name": "k[0]{\\"}", "x": [1]}'
    assert [t for t, _ in jsonscan.tokens(data)] == [b"{", b"[", b"]", b"}"]
    cut = b'[{"name": "gemm[128'
    # the lone quote marks the cut; what follows it is read as if outside a string (callers stop there)
    assert list(jsonscan.tokens(cut)) == [(b"[", 0), (b"{", 1), (b'"', 10), (b"[", 15)]
    # a raw newline ends a string only where the caller says JSON strings cannot hold one
    assert [t for t, _ in jsonscan.tokens(b'["a\nb]"]', single_line=True)] == [b"[", b'"', b"]", b'"', b"]"]
    assert [t for t, _ in jsonscan.tokens(b'["a\nb]"]')] == [b"[", b"]"]
    # start and end bound the scan like a slice
    assert list(jsonscan.tokens(b"x[y]z", 2, 4)) == [(b"]", 3)]


def test_value_end():
    text = b'{"distributedInfo": {"backend": "nccl}", "rank": 3, "ids": [1, {"a": "]"}]}, "more": 1}'
    start = text.index(b"{", 2)
    end = jsonscan.value_end(text, start)
    assert orjson.loads(text[start:end]) == {"backend": "nccl}", "rank": 3, "ids": [1, {"a": "]"}]}
    assert jsonscan.value_end(b"[1, [2], 3] tail", 0) == 11
    assert jsonscan.value_end(b'{"a": [1, 2}', 0) is None  # mismatched close
    assert jsonscan.value_end(b'{"a": "never ends', 0) is None
    assert jsonscan.value_end(b'{"a": {"b": 1}', 0) is None  # cut before the close
    assert jsonscan.value_end(b'  {"a": 1}', 0) is None  # not at an opening bracket


def test_peek_distributed_info_reads_braces_inside_strings(tmp_path):
    # the old brace counter stopped at the `}` inside the string and returned nothing
    doc = b'{"distributedInfo": {"backend": "nccl}{", "rank": 5, "world_size": 8}, "traceEvents": []}'
    path = tmp_path / "t.json.gz"
    path.write_bytes(gzip.compress(doc))
    assert peek_distributed_info(path) == {"backend": "nccl}{", "rank": 5, "world_size": 8}
    cut = tmp_path / "cut.json"
    cut.write_bytes(b'{"distributedInfo": {"backend": "nccl", "rank": 5')
    assert peek_distributed_info(cut) == {}


def test_resync():
    assert jsonscan.resync(b"anything", True) == 0
    assert jsonscan.resync(b'ts": 1},\n  {"ph": "X"}', False) == 9
    assert jsonscan.resync(b'ts": 1}, {"ph": "X"}', False) == 9  # minified: at the next event
    assert jsonscan.resync(b'ts": 1', False) is None


def test_array_close_finds_the_named_array():
    tail = b'[{"name": "a]"}, {"b": [1]}], "deviceProperties": [{"x": [2]}], "traceName": "t]"}'
    close = jsonscan.array_close(tail, 0, len(tail), b"traceEvents")
    assert tail[close : close + 4] == b'], "' and close == tail.index(b"}]") + 1
    # inside the tail, only an array after `"traceEvents":` counts; a tail starting mid-array closes
    # at the top-level `]` whose `[` is before the tail
    named = b'{"schemaVersion": 1, "traceEvents": [{"a": 1}], "distributedInfo": {"rank": 0}}'
    at = jsonscan.array_close(named, 1, len(named), b"traceEvents")
    assert named[: at + 1].endswith(b'{"a": 1}]')
    mid = b'"ts": 1},\n{"ts": 2}], "deviceProperties": [], "traceName": "x"}'
    start = jsonscan.resync(mid, False)
    assert mid[jsonscan.array_close(mid, start, len(mid), b"traceEvents")] == ord("]")
    with pytest.raises(jsonscan.ScanError, match="malformed"):
        jsonscan.array_close(b'[{"a": 1]], "x": 1}', 0, 19, b"traceEvents")
    with pytest.raises(jsonscan.ScanError, match="never closed"):
        other = b'{"x": [1], "y": 2}'
        jsonscan.array_close(other, 1, len(other), b"traceEvents")


def _trace_tail(rnd: random.Random, pretty: bool, after: bytes) -> bytes:
    """The last bytes of a trace: events (names holding brackets, quotes and `}, {"`), the array's close,
    then `after` (the metadata's members) and the closing brace; starting inside the first event, as a
    tail does."""
    names = ["k", "a]b", 'q\\"}, {"x', "[[", "}, {", "x" * rnd.randint(1, 300)]
    events = []
    for i in range(rnd.randint(200, 900)):
        # the first event, where the tail starts, has a plain name: resync reads from the boundary after it
        event = {"ph": "X", "name": rnd.choice(names) if i else "k", "ts": i, "args": {"dims": [[i, 2], []]}}
        events.append(orjson.dumps(event, option=orjson.OPT_INDENT_2 if pretty else 0))
    sep = b",\n" if pretty else b", "
    body = sep.join(events) + b"]" + after + b"}"
    return body[rnd.randint(1, 20) :]


@pytest.mark.parametrize("pretty", [False, True])
def test_event_array_close_reads_the_last_bytes_as_the_whole_tail(pretty):
    """event_array_close takes the `]` from the last CLOSE_WINDOW bytes only where the elements before it
    are events, and otherwise walks the whole tail: the same `]` on every shape of metadata after the
    array (none, small, long arrays and strings longer than the window, brackets inside strings)."""
    rnd = random.Random(11 if pretty else 12)
    long_array = orjson.dumps([{"id": i, "name": "GPU]" * 3} for i in range(4000)])
    afters = [
        b"",
        b', "traceName": "t]"',
        b', "deviceProperties": [{"id": 0, "x": [1]}], "displayTimeUnit": "ms"',
        b', "deviceProperties": ' + long_array,
        b', "deviceProperties": ' + long_array + b', "traceName": "x"',
        b', "note": "' + b"}, {" * 30000 + b'"',
        b', "stacks": [[' + b"1, " * 40000 + b"2]]",
    ]
    used = 0
    for after in afters:
        for _ in range(4):
            tail = _trace_tail(rnd, pretty, after)
            start = jsonscan.resync(tail, False)
            end = len(tail.rstrip())
            expected = jsonscan.array_close(tail, start, end, b"traceEvents")
            assert jsonscan.event_array_close(tail, start, end, b"traceEvents") == expected
            assert tail[expected + 1 :].strip() == after.strip() + b"}"
            used += len(tail) - expected <= jsonscan.CLOSE_WINDOW // 2
    assert used  # the window alone decided some of them (the others were read whole)


def test_key_before_reads_the_window_as_the_whole_span_would():
    rnd = random.Random(7)
    keys = [b"traceEvents", b'a\\"traceEvents', b"x" * 50 + b"traceEvents", b"\\\\", b"deviceProperties"]
    for _ in range(1000):
        key = rnd.choice(keys)
        before = random_bytes(rnd) + b'"' + key + b'"' + rnd.choice([b":", b" : ", b":\n "])
        data = before + b"["
        pos = len(before)
        whole = jsonscan.key_before(data, 0, pos, window=len(data))
        for window in (1, 5, 13, 20, 64):
            assert jsonscan.key_before(data, 0, pos, window=window) == whole, (data, window)
    assert jsonscan.key_before(b'{"traceEvents": [', 1, 16) == b"traceEvents"
    assert jsonscan.key_before(b"[1, [", 0, 4) is None


def test_last_complete_element():
    aligned = b'[{"a": 1}, {"b": [2, 3]}, {"c": "cut'
    end = jsonscan.last_complete_element(aligned, 0, True)
    assert aligned[:end] == b'[{"a": 1}, {"b": [2, 3]}'
    # a cut string hides everything after it, brackets included
    hidden = b'[{"a": 1}, {"name": "x}], {\\"'
    assert hidden[: jsonscan.last_complete_element(hidden, 0, True)] == b'[{"a": 1}'
    # a tail from the middle of the array: the array's level is the lowest depth reached
    mid = b'"ts": 1}, {"args": {"k": 2}}, {"args": {"k": '
    start = jsonscan.resync(mid, False)
    assert start is not None
    mid2 = b'xx\n{"args": {"k": 2}}, {"ts": 3},\n{"args": {"k'
    cut = jsonscan.last_complete_element(mid2, jsonscan.resync(mid2, False), False)
    assert mid2[:cut].endswith(b'{"ts": 3}')
    assert jsonscan.last_complete_element(b'[{"a": "never', 0, True) is None


def pieces(data: bytes, read: int) -> list[jsonscan.Piece]:
    return list(jsonscan.elements(io.BytesIO(data), read))


def test_elements_splits_repairs_and_gaps():
    data = b' [ {"a": "]"}, garbage, {"b": [1, {"c": 2}]}, [1, 2], 7, {"d": "x\xff"}, {"e": '
    got = pieces(data, 1 << 20)
    assert [(p.kind, p.offset) for p in got] == [
        ("element", 3),
        ("gap", data.index(b", garbage")),
        ("element", data.index(b'{"b"')),
        ("element", data.index(b"[1, 2]")),
        ("gap", data.index(b", 7")),
        ("element", data.index(b'{"d"')),
        ("cut", data.index(b'{"e"')),
    ]
    assert got[2].data == b'{"b": [1, {"c": 2}]}'
    assert got[5].data == b'{"d": "x\xff"}'
    assert pieces(b"[]", 8) == []
    assert pieces(b'[{"a": 1}]   \n', 8) == [jsonscan.Piece("element", 1, b'{"a": 1}')]
    assert pieces(b"no array here", 8) == []


def test_elements_do_not_depend_on_the_read_size():
    rnd = random.Random(3)
    events = [b'{"name": "k[%d]{", "args": {"s": "a\\"]"}}' % i for i in range(6)]
    for _ in range(400):
        chosen = [rnd.choice(events + [b"x", b"[1]", b'{"cut": "']) for _ in range(rnd.randint(0, 6))]
        data = b"[" + b", ".join(chosen) + rnd.choice([b"]", b"", b" ]\n"])
        expected = pieces(data, 1 << 20)
        for read in (1, 2, 3, 5, 17):
            assert pieces(data, read) == expected, (data, read)

"""A generator of broken traces, each with its documented outcome (README, "Broken traces").

Every kind writes its input into a folder and returns a Case: the paths to ingest and the Outcome
that ingest must give, as data:
- `error`: exit code 1, one `error:` line naming the file, saying what (`what`) and where (`where`);
  nothing of that file lands;
- `repaired`: exit code 0, the run lands, and `runs.warnings` holds exactly `warnings` (with `only`,
  nothing else), `n_kernels` GPU activities;
- `clean`: exit code 0, no warnings at all.
Numbers in outcomes (events kept, byte positions) are computed here independently of tracehouse, with
the standard library's JSON decoder and zlib.

Bases: a real trace (`../shared/traces/nvidia/h100_bert-small.json.gz`, when the shared folder is
there; else a synthesized one) for the damage kinds, and a small synthesized run (`synth`) for the
kinds whose warnings must be exact (the synthesized trace itself has no warnings).

    from broken_traces import KINDS, make_case
    case = make_case("truncated_gzip_middle", tmp_path)
"""

from __future__ import annotations

import copy
import json
import zlib
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path

from broken_trace_bases import (
    W_ABSURD,
    W_BAD_VALUE,
    W_CONTROL,
    W_DUP,
    W_FLOW,
    W_LONG_NAME,
    W_NEG,
    W_NO_DUR,
    W_NO_PH,
    W_NO_TS,
    W_UNKNOWN,
    W_UTF8,
    Case,
    Kind,
    Outcome,
    complete_events,
    dumps,
    gpu_count,
    inflate_prefix,
    real_base,
    synth_base,
    write_doc,
)


# ---- the kinds ------------------------------------------------------------------------------------
def _truncation_outcome(name: str, text: bytes, compressed_at: int | None = None) -> Outcome:
    kept = complete_events(text)
    if not kept:
        return Outcome(
            "error",
            what="nothing could be kept",
            bad_file=name,
            where=f"compressed byte {compressed_at}" if compressed_at is not None else f"byte {len(text)}",
        )
    if compressed_at is not None:
        key = (
            f"file truncated at byte {len(text)} (truncated compressed file (the gzip stream ends early) "
            f"at compressed byte {compressed_at}): events kept"
        )
    else:
        key = f"file truncated at byte {len(text)}: events kept"
    return Outcome("repaired", warnings={key: kept}, only=False)


def _truncated_gzip(fraction: float):
    def make(d: Path) -> Case:
        meta, events, _ = real_base()
        good = write_doc(d / "src" / "t.json.gz", meta, events)
        data = good.read_bytes()
        cut = max(5, int(len(data) * fraction)) if fraction > 0 else 5
        bad = d / "in" / "truncated.json.gz"
        bad.parent.mkdir(parents=True)
        bad.write_bytes(data[:cut])
        # What a cut stream yields can differ by a byte or two between inflaters (zlib, ISA-L), and the
        # warning reports what the reader's own inflater produced: compute it with that one.
        from tracehouse.ingest.source import _zlib as reader_zlib

        text = reader_zlib.decompressobj(16 + reader_zlib.MAX_WBITS).decompress(data[:cut])
        try:  # cut inside the 8-byte trailer: every event is there, only the checksum is missing
            json.loads(text)
        except ValueError:
            return Case([bad], _truncation_outcome(bad.name, text, cut))
        key = (
            f"truncated compressed file (the gzip stream ends early) at compressed byte {cut}; "
            "the events that could be read were kept"
        )
        return Case([bad], Outcome("repaired", warnings={key: 1}, only=False, n_kernels=gpu_count(events)))

    return make


def _corrupt_gzip_block(d: Path) -> Case:
    meta, events, _ = real_base()
    data = write_doc(d / "src" / "t.json.gz", meta, events).read_bytes()
    # flip bytes from the middle on until zlib itself refuses the stream (an invalid block/distance)
    for at in range(len(data) // 2, len(data) - 8, 97):
        broken = data[:at] + bytes(b ^ 0xA5 for b in data[at : at + 16]) + data[at + 16 :]
        try:
            zlib.decompress(broken, 16 + zlib.MAX_WBITS)
        except zlib.error as exc:
            if "invalid" in str(exc) or "too far" in str(exc):
                break
    bad = d / "in" / "corrupt_block.json.gz"
    bad.parent.mkdir(parents=True)
    bad.write_bytes(broken)
    text = inflate_prefix(broken)
    kept = complete_events(text)
    return Case([bad], Outcome("repaired", warnings={"__prefix__file truncated at byte": kept}, only=False))


def _truncated_json(where: str):
    def make(d: Path) -> Case:
        meta, events, _ = real_base()
        good = write_doc(d / "src" / "t.json", meta, events, gz=False).read_bytes()
        if where == "first":
            cut = good.find(b"traceEvents") + 40
        elif where == "string":  # inside a kernel name, past the middle
            cut = good.find(b'"cat": "kernel", "name": "', len(good) // 2) + 40
        else:
            cut = int(len(good) * 0.6)
        bad = d / "in" / "cut.json"
        bad.parent.mkdir(parents=True)
        bad.write_bytes(good[:cut])
        return Case([bad], _truncation_outcome(bad.name, good[:cut]))

    return make


def _truncated_minified(d: Path) -> Case:
    """Minified JSON (no newlines) over 2 MB: the salvage finds event boundaries without newlines."""
    meta, events = synth_base()
    while sum(len(dumps(e)) for e in events) < 2_600_000:
        events = events + events
    good = write_doc(d / "src" / "t.json", meta, events, gz=False, minified=True).read_bytes()
    cut = int(len(good) * 0.9)
    bad = d / "in" / "minified_cut.json"
    bad.parent.mkdir(parents=True)
    bad.write_bytes(good[:cut])
    return Case([bad], _truncation_outcome(bad.name, good[:cut]))


def _interleaved(d: Path) -> Case:
    """TensorRT-LLM once wrote all ranks into one file: two documents' bytes interleaved in 4 kB writes."""
    meta, events = synth_base()
    a = write_doc(
        d / "src" / "a.json", {**meta, "distributedInfo": {"rank": 0}}, events, gz=False
    ).read_bytes()
    b = write_doc(
        d / "src" / "b.json", {**meta, "distributedInfo": {"rank": 1}}, events, gz=False
    ).read_bytes()
    blocks = []
    for i in range(0, max(len(a), len(b)), 4096):
        blocks += [a[i : i + 4096], b[i : i + 4096]]
    data = b"".join(blocks)
    bad = d / "in" / "interleaved.json"
    bad.parent.mkdir(parents=True)
    bad.write_bytes(data)
    second = data.find(b'"traceEvents"', data.find(b'"traceEvents"') + 1)
    return Case([bad], Outcome("error", what="two JSON documents in one file", where=f"byte {second}"))


def _bare_array(d: Path) -> Case:
    _, events = synth_base()
    path = d / "in" / "bare.json"
    path.parent.mkdir(parents=True)
    path.write_bytes(("[\n" + ",\n".join(dumps(e) for e in events) + "\n]\n").encode())
    return Case([path], Outcome("clean", n_kernels=gpu_count(events)))


def _edit(
    make_events: Callable[[list], list],
    outcome: Callable[[list], Outcome],
    raw: Callable | None = None,
    name: str = "odd.json.gz",
):
    """A kind made from the synthesized base by editing its events (or their bytes, with `raw`)."""

    def make(d: Path) -> Case:
        meta, events = synth_base()
        edited = make_events(events)
        texts = [dumps(e).encode() for e in edited]
        if raw is not None:
            texts = raw(edited, texts)
        path = write_doc(d / "in" / name, meta, edited, raw_events=texts)
        return Case([path], outcome(edited))

    return make


def _kernels(events: list) -> list[int]:
    return [i for i, e in enumerate(events) if e.get("ph") == "X" and e.get("cat") == "kernel"]


def _set(key: str, values: list, where: Callable[[list], list[int]] = _kernels):
    def edit(events: list) -> list:
        for i, v in zip(where(events)[3:], values):
            events[i][key] = v
        return events

    return edit


def _nan_raw(events, texts):
    idx = _kernels(events)[3:6]
    for i, token in zip(idx, (b"NaN", b"Infinity", b"-Infinity")):
        texts[i] = texts[i].replace(b'"dur": ' + dumps(events[i]["dur"]).encode(), b'"dur": ' + token, 1)
    return texts


def _name_bytes(bad: bytes):
    def raw(events, texts):
        for i in _kernels(events)[3:5]:
            texts[i] = texts[i].replace(b'"name": "', b'"name": "' + bad, 1)
        return texts

    return raw


def _drop_keys(events: list) -> list:
    ks = _kernels(events)
    for i in ks[3:5]:
        del events[i]["ph"]
    for i in ks[5:8]:
        del events[i]["ts"]
    for i in ks[8:12]:
        del events[i]["dur"]
    return events


def _duplicate(events: list) -> list:
    ks = _kernels(events)
    return events + [copy.deepcopy(events[i]) for i in ks[3:6]]


def _unmatched_flows(events: list) -> list:
    start = next(e for e in events if e.get("ph") == "X" and e.get("cat") == "cuda_runtime")
    return events + [
        {
            "ph": "s",
            "cat": "ac2g",
            "name": "ac2g",
            "id": 987654 + i,
            "pid": start["pid"],
            "tid": start["tid"],
            "ts": start["ts"],
        }
        for i in range(2)
    ]


def _deep_args_raw(events, texts):
    i = _kernels(events)[3]
    deep = b'{"a": ' * 5000 + b"1" + b"}" * 5000
    dims = b"[" * 500 + b"1" + b"]" * 500
    texts[i] = texts[i].replace(
        b'"args": {', b'"args": {"nested": ' + deep + b', "Input Dims": ' + dims + b", ", 1
    )
    assert texts[i] != dumps(events[i]).encode()
    return texts


def _one_bad_byte_raw(events, texts):
    i = _kernels(events)[len(_kernels(events)) // 2]
    texts[i] = texts[i].replace(b'"dur": ', b'"dur": @', 1)
    return texts


def _one_bad_byte_outcome(events: list) -> Outcome:
    return Outcome(
        "repaired",
        warnings={"__prefix__unreadable events skipped (the first at byte": 1},
        n_kernels=gpu_count(events) - 1,
    )


def _scalars(d: Path) -> Case:
    meta, events = synth_base()
    texts = [b"1", b'"not an event"'] + [dumps(e).encode() for e in events]
    path = write_doc(d / "in" / "scalars.json.gz", meta, events, raw_events=texts)
    return Case([path], Outcome("repaired", warnings={W_NO_PH: 2}, n_kernels=gpu_count(events)))


def _reused_correlation(d: Path) -> Case:
    """Two ranks with the same correlation ids (every rank numbers its own): each links within its rank."""
    meta, events = synth_base()
    write_doc(d / "in" / "rank-0.json.gz", {**meta, "distributedInfo": {"rank": 0}}, events)
    write_doc(
        d / "in" / "rank-1.json.gz",
        {**meta, "distributedInfo": {"rank": 1}},
        [dict(e, pid=e.get("pid")) for e in events]
        + [{"ph": "M", "name": "process_name", "pid": 0, "tid": 0, "args": {"name": "r1"}}],
    )
    return Case([d / "in"], Outcome("clean", n_kernels=2 * gpu_count(events)))


def _huge_name(d: Path) -> Case:
    meta, events = synth_base()
    i = _kernels(events)[3]
    events[i]["name"] = "k" * (100 << 20)
    path = write_doc(d / "in" / "huge_name.json.gz", meta, events)
    return Case([path], Outcome("repaired", warnings={W_LONG_NAME: 1}, n_kernels=gpu_count(events)))


def _empty_events(d: Path) -> Case:
    meta, _ = synth_base()
    path = write_doc(d / "in" / "empty_events.json.gz", meta, [])
    return Case(
        [path], Outcome("error", what="nothing to ingest: the event array is empty", where="event array")
    )


def _metadata_only(d: Path) -> Case:
    meta, events = synth_base()
    only = [e for e in events if e.get("ph") == "M"]
    path = write_doc(d / "in" / "metadata_only.json.gz", meta, only)
    return Case(
        [path], Outcome("error", what=f"none of its {len(only)} events has a timestamp", where="event array")
    )


def _dir_with_non_trace(d: Path) -> Case:
    meta, events = synth_base()
    run = d / "in" / "profile"
    write_doc(run / "rank-0.json.gz", meta, events)
    (run / "notes.txt").write_text("benchmark notes\n")
    (run / "config.json").write_text('{"model": "llama", "tp": 8}')
    # a small .json without traceEvents beside the traces is a sidecar (SGLang's server_args.json, a
    # config): skipped and counted like notes.txt, so the folder ingests with exit 0 (issue 17)
    return Case(
        [run], Outcome("repaired", warnings={"non-trace files skipped": 2}, n_kernels=gpu_count(events))
    )


KINDS: dict[str, Kind] = {
    k.name: k
    for k in [
        Kind(
            "truncated_gzip_header",
            "gzip cut inside its header: nothing can be inflated -> error",
            _truncated_gzip(0),
        ),
        Kind(
            "truncated_gzip_early",
            "gzip cut at 15 %: the complete events inflated before the cut land",
            _truncated_gzip(0.15),
        ),
        Kind(
            "truncated_gzip_middle",
            "gzip cut at 50 %: salvaged, 'file truncated at byte N: events kept'",
            _truncated_gzip(0.5),
        ),
        Kind(
            "truncated_gzip_trailer",
            "gzip cut inside its 8-byte trailer: all events land (checksum missing)",
            _truncated_gzip(0.99999),
        ),
        Kind(
            "gzip_corrupt_block",
            "flipped bytes mid-stream that zlib refuses: the events before the damage land",
            _corrupt_gzip_block,
        ),
        Kind(
            "truncated_json_mid_event",
            "plain JSON cut inside an event: the complete events before it land",
            _truncated_json("middle"),
        ),
        Kind(
            "truncated_json_mid_string",
            "plain JSON cut inside a kernel name: the events before it land",
            _truncated_json("string"),
        ),
        Kind(
            "truncated_json_first_event",
            "cut inside the first event: nothing usable -> error",
            _truncated_json("first"),
        ),
        Kind(
            "truncated_minified",
            "minified JSON over 2 MB cut at 90 %: salvaged without newlines to go by",
            _truncated_minified,
        ),
        Kind(
            "interleaved_documents",
            "two ranks' documents interleaved in one file: refused (mixing ranks is wrong)",
            _interleaved,
        ),
        Kind("bare_event_array", "a bare array of events without traceEvents: read as is", _bare_array),
        Kind(
            "nan_infinity",
            "NaN, Infinity and -Infinity as durations: not JSON numbers; read as null, counted",
            _edit(
                lambda e: e,
                lambda e: Outcome("repaired", warnings={W_BAD_VALUE: 3, W_NO_DUR: 3}, n_kernels=gpu_count(e)),
                raw=_nan_raw,
            ),
        ),
        Kind(
            "huge_numbers",
            "a duration of 1e30 µs: fits the decoder, not int64 ns; set to 0, counted",
            _edit(
                _set("dur", [Decimal("1e30")]),
                lambda e: Outcome("repaired", warnings={W_ABSURD: 1}, n_kernels=gpu_count(e)),
            ),
        ),
        Kind(
            "huge_timestamp",
            "a ts of 1e300: not representable, read as null, the event skipped",
            _edit(
                lambda e: e,
                lambda e: Outcome(
                    "repaired", warnings={W_BAD_VALUE: 1, W_NO_TS: 1}, n_kernels=gpu_count(e) - 1
                ),
                raw=lambda ev, t: [
                    x
                    if i != _kernels(ev)[3]
                    else x.replace(b'"ts": ' + dumps(ev[i]["ts"]).encode(), b'"ts": 1e300', 1)
                    for i, x in enumerate(t)
                ],
            ),
        ),
        Kind(
            "control_characters",
            "raw control characters inside kernel names: escaped, counted",
            _edit(
                lambda e: e,
                lambda e: Outcome("repaired", warnings={W_CONTROL: 2}, n_kernels=gpu_count(e)),
                raw=_name_bytes(b"\x01\x07\x1b[31m"),
            ),
        ),
        Kind(
            "invalid_utf8",
            "invalid UTF-8 bytes inside kernel names: replaced by U+FFFD, counted",
            _edit(
                lambda e: e,
                lambda e: Outcome("repaired", warnings={W_UTF8: 2}, n_kernels=gpu_count(e)),
                raw=_name_bytes(b"\xff\xfe\xc3"),
            ),
        ),
        Kind(
            "ts_as_strings",
            "every ts written as a string: read exactly, no warning",
            _edit(
                lambda e: [dict(x, ts=str(x["ts"])) if "ts" in x else x for x in e],
                lambda e: Outcome("clean", n_kernels=gpu_count(e)),
            ),
        ),
        Kind(
            "ts_not_a_number",
            "a ts that is text ('soon'): read as null, the event skipped",
            _edit(
                _set("ts", ["soon"]),
                lambda e: Outcome("repaired", warnings={W_BAD_VALUE: 1, W_NO_TS: 1}, n_kernels=gpu_count(e)),
            ),
        ),
        Kind(
            "missing_fields",
            "2 kernels without ph, 3 without ts, 4 without dur: skipped / read as 0, counted",
            _edit(
                _drop_keys,
                lambda e: Outcome(
                    "repaired", warnings={W_NO_PH: 2, W_NO_TS: 3, W_NO_DUR: 4}, n_kernels=gpu_count(e)
                ),
            ),
        ),
        Kind(
            "negative_durations",
            "5 negative kernel durations: clamped to 0, counted",
            _edit(
                _set("dur", [Decimal("-1.5")] * 5),
                lambda e: Outcome("repaired", warnings={W_NEG: 5}, n_kernels=gpu_count(e)),
            ),
        ),
        Kind(
            "absurd_durations",
            "2 kernels lasting 1e11 µs (27 hours): set to 0, counted",
            _edit(
                _set("dur", [Decimal(100000000000)] * 2),
                lambda e: Outcome("repaired", warnings={W_ABSURD: 2}, n_kernels=gpu_count(e)),
            ),
        ),
        Kind(
            "duplicate_events",
            "3 kernels written twice: the copies dropped, counted",
            _edit(_duplicate, lambda e: Outcome("repaired", warnings={W_DUP: 3}, n_kernels=gpu_count(e) - 3)),
        ),
        Kind(
            "unmatched_flows",
            "2 flow starts without a finish: kept unbound, counted",
            _edit(
                _unmatched_flows, lambda e: Outcome("repaired", warnings={W_FLOW: 2}, n_kernels=gpu_count(e))
            ),
        ),
        Kind(
            "reused_correlation_ids",
            "two ranks numbering correlation ids alike: each rank links on its own",
            _reused_correlation,
        ),
        Kind(
            "unknown_categories",
            "3 events of categories nobody knows: kept, counted",
            _edit(
                lambda e: [
                    dict(x, cat="mystery_cat")
                    if i
                    in [j for j, y in enumerate(e) if y.get("ph") == "X" and y.get("cat") == "cpu_op"][:3]
                    else x
                    for i, x in enumerate(e)
                ],
                lambda e: Outcome("repaired", warnings={W_UNKNOWN: 3}, n_kernels=gpu_count(e)),
            ),
        ),
        Kind(
            "huge_kernel_name",
            "one kernel name of 100 MB: read (DuckDB's object size is raised for it), cut to its first 65,536 "
            "characters and the md5 of the whole (counted)",
            _huge_name,
        ),
        Kind(
            "deeply_nested_args",
            "args nested 5000 deep (and Input Dims 500 deep): read, the unknown key ignored",
            _edit(lambda e: e, lambda e: Outcome("clean", n_kernels=gpu_count(e)), raw=_deep_args_raw),
        ),
        Kind(
            "one_bad_byte",
            "one byte in one event's value is not JSON: only that event is lost, counted with its position",
            _edit(lambda e: e, _one_bad_byte_outcome, raw=_one_bad_byte_raw),
        ),
        Kind("scalars_in_array", "numbers and strings among the events: skipped, counted", _scalars),
        Kind("empty_trace_events", "traceEvents is []: nothing to ingest -> error", _empty_events),
        Kind("metadata_only", "only ph M events: nothing timed to ingest -> error", _metadata_only),
        Kind(
            "directory_with_non_trace_files",
            "a profile folder with notes.txt and config.json beside the trace: "
            "both skipped (counted: a small .json without traceEvents is a sidecar); the trace lands",
            _dir_with_non_trace,
        ),
    ]
}


def make_case(name: str, folder: Path) -> Case:
    return KINDS[name].make(folder)

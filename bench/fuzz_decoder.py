"""Fuzz target for the trace decoder (atheris / libFuzzer): bytes -> source.read_trace -> decode -> SQL.

Any exception other than TracehouseError (TraceFormatError included) is a crash: bad input must be
reported, never crash ingest. atheris is not a dependency of tracehouse; install it into the venv:

    .venv/bin/pip install atheris
    .venv/bin/python bench/fuzz_decoder.py -max_total_time=600        # or: make fuzz
    .venv/bin/python bench/fuzz_decoder.py -runs=2000 CORPUS_DIR       # libFuzzer options pass through

The first byte of each input picks how the rest is fed: as plain JSON, gzip-compressed, or
gzip-compressed and then cut or bit-flipped (so the inflate and salvage paths are fuzzed too). A seed
corpus (small valid traces, including the shipped edge-case traces) is written to a temporary folder
when no corpus folder is given. `--transforms` also runs every ingest SQL stage (slower per input).
libFuzzer reports the count at the end (`Done N runs in T second(s)`; with -print_final_stats=1 also
`stat::number_of_executed_units`); a crash stops the run and saves the input as crash-<sha1>.
"""

from __future__ import annotations

import gzip
import json
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

import atheris

with atheris.instrument_imports():
    import duckdb
    from tracehouse.ingest import decode, source
    from tracehouse.ingest.rank import run_transforms

    from tracehouse.errors import TracehouseError

WORK = Path(tempfile.mkdtemp(prefix="tracehouse-fuzz-"))
TRANSFORMS = "--transforms" in sys.argv


def _bytes_for(data: bytes) -> tuple[bytes, str]:
    if not data:
        return b"", ".json"
    mode, body = data[0] % 4, data[1:]
    if mode == 0:
        return body, ".json"
    packed = gzip.compress(body, compresslevel=1, mtime=0)
    if mode == 1:
        return packed, ".json.gz"
    if mode == 2 and packed:  # cut the gzip stream
        return packed[: (len(body) * 7919) % len(packed)], ".json.gz"
    if packed:  # flip one byte of the deflate data
        at = 10 + (len(body) * 104729) % max(1, len(packed) - 18)
        flipped = bytearray(packed)
        if at < len(flipped):
            flipped[at] ^= 0x5A
        return bytes(flipped), ".json.gz"
    return packed, ".json.gz"


def TestOneInput(data: bytes) -> None:
    raw, suffix = _bytes_for(data)
    path = WORK / f"input{suffix}"
    events_file = WORK / "events.json"
    path.write_bytes(raw)
    con = duckdb.connect(":memory:")
    try:
        src = source.read_trace(path, events_file)
        decode.load_raw_events(con, events_file, src)
        if TRANSFORMS:
            run_transforms(con, None, None)
            decode.event_warnings(con)
    except TracehouseError:
        pass  # reported to the user as one line: the expected outcome for bad input
    finally:
        con.close()
        events_file.unlink(missing_ok=True)


def _seed_corpus() -> Path:
    from tracebuilder import simple_events

    seeds = WORK / "seeds"
    seeds.mkdir()
    doc = {
        "schemaVersion": 1,
        "deviceProperties": [{"id": 0, "name": "H100"}],
        "traceEvents": simple_events(),
        "traceName": "t",
    }
    variants = {
        "pretty": json.dumps(doc, indent=1).encode(),
        "minified": json.dumps(doc, separators=(",", ":")).encode(),
        "bare": json.dumps(simple_events()).encode(),
        "nan": json.dumps(doc).replace('"dur": 15.0', '"dur": NaN').encode(),
    }
    for name, body in variants.items():
        for mode in (0, 1):
            (seeds / f"{name}-{mode}").write_bytes(bytes([mode]) + body)
    for rel in (
        "edge/tiny_base.json.gz",
        "edge/legacy_categories_rank1.json.gz",
        "edge/backward_thread.json",
    ):
        real = ROOT.parent / "shared" / "traces" / rel
        if real.is_file():
            body = real.read_bytes()
            body = gzip.decompress(body) if rel.endswith(".gz") else body
            (seeds / Path(rel).name).write_bytes(b"\x00" + body)
    return seeds


def main() -> None:
    argv = [a for a in sys.argv if a != "--transforms"]
    if not any(not a.startswith("-") for a in argv[1:]):
        argv.append(str(_seed_corpus()))
    argv += ["-timeout=60", "-rss_limit_mb=4096", "-max_len=65536"]
    atheris.Setup(argv, TestOneInput)
    atheris.Fuzz()


if __name__ == "__main__":
    os.environ.setdefault("TRACEHOUSE_MEMORY_LIMIT", "1GB")
    main()

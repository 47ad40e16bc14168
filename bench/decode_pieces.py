"""The event array decoded in pieces side by side, against one read of the whole array, in one run.

    python bench/decode_pieces.py --trace a.json.gz [--trace b.json.gz ...] [--reps 3]
    python bench/decode_pieces.py --synth 300000000     # a synthesized serving trace of that many JSON bytes

For each trace, interleaved (one file, pieces, one file, pieces, ...), best of --reps: stages 1-2 of
ingest (ingest.source.read_trace + ingest.decode.load_raw_events: inflate, cut, decode, type) and a
rank's whole ingest (ingest.rank.staged + write_tables: the same plus the transforms and Parquet), with
the pieces read_trace cuts by default (ingest.decode.piece_bytes) and with none. The rows of `events`
are compared (a hash of every row, ev_id included) on each trace.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tracehouse.ingest import rank
from tracehouse.ingest.decode import load_raw_events, piece_bytes
from tracehouse.ingest.source import read_trace, remove_array

ROW_HASH = "SELECT count(*), sum(hash(COLUMNS(*))) FROM events"


def decode_once(trace: Path, work: Path, pieces: bool) -> tuple[float, int, tuple]:
    """Seconds of read + decode, the pieces cut, and the rows' hash."""
    events_file = work / "events.json"
    began = time.perf_counter()
    source = read_trace(trace, events_file, piece_bytes(trace) if pieces else None)
    con = rank.work_connection(work)
    try:
        load_raw_events(con, events_file, source)
        seconds = time.perf_counter() - began
        digest = con.execute(ROW_HASH).fetchone()
    finally:
        con.close()
        remove_array(events_file)
    return seconds, len(source.pieces), digest


def rank_once(trace: Path, work: Path, pieces: bool) -> float:
    """Seconds of a rank's whole ingest (stages and Parquet)."""
    saved = rank.piece_bytes
    rank.piece_bytes = saved if pieces else (lambda path: None)
    try:
        began = time.perf_counter()
        with rank.staged(trace, work / "stage") as staged:
            rank.write_tables(staged.con, work / "out", 0)
        return time.perf_counter() - began
    finally:
        rank.piece_bytes = saved


def measure(trace: Path, reps: int) -> dict:
    best = {}
    digests = {}
    cut = 0
    with tempfile.TemporaryDirectory() as tmp:
        for rep in range(reps):
            for pieces in (False, True):
                work = Path(tmp) / f"{rep}-{pieces}"
                work.mkdir()
                seconds, n, digest = decode_once(trace, work, pieces)
                digests[pieces] = digest
                cut = max(cut, n)
                best[("decode", pieces)] = min(best.get(("decode", pieces), 1e9), seconds)
                seconds = rank_once(trace, work, pieces)
                best[("rank", pieces)] = min(best.get(("rank", pieces), 1e9), seconds)
    if digests[True] != digests[False]:
        raise SystemExit(f"{trace}: the pieces' events differ from the whole array's: {digests}")
    return {"best": best, "pieces": cut, "rows": digests[True][0]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trace", action="append", default=[], type=Path)
    ap.add_argument("--synth", type=int, help="also a synthesized serving trace of this many JSON bytes")
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    traces = list(args.trace)
    keep = None
    if args.synth:
        from tracehouse.synth import write_scenario

        keep = tempfile.TemporaryDirectory()
        write_scenario("serving-prefill", Path(keep.name), ranks=1, target_size=args.synth)
        traces += sorted(Path(keep.name).glob("*.trace.json.gz"))
    print(
        "| trace | MB on disk | events | pieces | read + decode: one file / pieces (s) | speed-up | "
        "a rank's ingest: one file / pieces (s) | speed-up |"
    )
    print("|---|---:|---:|---:|---|---:|---|---:|")
    for trace in traces:
        m = measure(trace, args.reps)
        b = m["best"]
        print(
            f"| {trace.name} | {trace.stat().st_size / 1e6:.1f} | {m['rows']:,} | {m['pieces']} | "
            f"{b['decode', False]:.3f} / {b['decode', True]:.3f} | {b['decode', False] / b['decode', True]:.2f}x | "
            f"{b['rank', False]:.3f} / {b['rank', True]:.3f} | {b['rank', False] / b['rank', True]:.2f}x |",
            flush=True,
        )


if __name__ == "__main__":
    main()

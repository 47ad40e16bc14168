"""Ingest progress (ingest/progress.py): per rank, bytes read of the expected JSON, then decoding, then done."""

from __future__ import annotations

import gzip
import os

from click.testing import CliRunner
from tracebuilder import simple_events, write_trace
from tracehouse.ingest.progress import IngestProgress, expected_json_bytes

from tracehouse.cli import main


def test_expected_bytes_is_the_uncompressed_size(tmp_path):
    plain = tmp_path / "a.json"
    plain.write_bytes(b"x" * 1234)
    packed = tmp_path / "b.json.gz"
    packed.write_bytes(gzip.compress(b"y" * 54321))
    assert expected_json_bytes(plain) == 1234 and expected_json_bytes(packed) == 54321


def test_lines_follow_a_rank_from_waiting_to_done(tmp_path):
    trace = tmp_path / "rank0.json"
    trace.write_bytes(b"z" * 1_000_000)
    progress = IngestProgress(tmp_path / "wh", [(trace, 0)])
    assert progress.lines() == ["  rank 0 rank0.json: waiting"]
    work = tmp_path / "wh" / "staging" / f"{os.getpid()}-abcd" / "work" / "rank-0"
    work.mkdir(parents=True)
    (work / "events.json").write_bytes(b"z" * 250_000)
    [line] = progress.lines()
    assert "reading 0.2 MB of 1.0 MB (25 %)" in line
    (work / "events.json").unlink()
    assert "decoding" in progress.lines()[0]
    progress.message("analysing run 42 (stored for its reports)")
    progress.message(f"ingested {trace}")
    done, note = progress.lines()
    assert done == "  rank 0 rank0.json: done (1.0 MB)" and note.startswith("  analysing run 42")


def test_quiet_when_stderr_is_not_a_terminal(tmp_path):
    trace = write_trace(tmp_path / "in" / "rank0.json.gz", simple_events())
    result = CliRunner().invoke(main, ["--warehouse", str(tmp_path / "wh"), "ingest", str(trace)])
    assert result.exit_code == 0 and result.stderr == ""

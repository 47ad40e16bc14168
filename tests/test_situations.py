"""The synthesized situations (synth/situations): each writes a valid trace that ingests without a
warning, its ground truth names what it expects, and the critical-path expectations hold.

Each defect class has its own test file reading the same `situation_warehouse` (conftest); this file
checks what every situation shares.
"""

from __future__ import annotations

import pytest
from tracehouse.synth.situations import SITUATIONS, write_situation
from tracehouse.synth.truth import load_truth
from tracehouse.warehouse.catalog import connect


def test_every_situation_ingests_cleanly(situation_warehouse):
    wh, runs, expect = situation_warehouse
    assert set(runs) == set(SITUATIONS)
    con = connect(wh)
    for name, run_id in runs.items():
        warnings, n_kernels = con.execute(
            "select warnings, n_kernels from runs where run_id = ?", [run_id]
        ).fetchone()
        assert n_kernels > 0 or expect[name].get("no_gpu_activity"), name
        # a situation may expect ingest's counted warnings (device activity of an uncounted kind), no other
        assert dict(warnings or {}) == expect[name].get("warnings", {}), (name, warnings)
        assert expect[name], f"{name}: ground truth without expectations"


def test_same_situation_same_bytes(tmp_path):
    for name in sorted(SITUATIONS):
        a = write_situation(name, tmp_path / "a" / name)
        b = write_situation(name, tmp_path / "b" / name)
        # a situation may write a folder of its own (capture_traces/ beside a graph replay)
        for f in sorted(str(p.relative_to(a)) for p in a.rglob("*") if p.is_file()):
            assert (a / f).read_bytes() == (b / f).read_bytes(), (name, f)


def test_unknown_situation_is_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match="unknown situation"):
        write_situation("no-such-situation", tmp_path)


def test_ground_truth_is_json_with_the_summary(tmp_path):
    for name, sit in SITUATIONS.items():
        truth = load_truth(write_situation(name, tmp_path / name))
        assert truth["situation"] == name and truth["summary"] == sit.summary

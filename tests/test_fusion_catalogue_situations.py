"""The fusion catalogue's newer patterns on their situations (synth/situations/fusion_catalogue.py): each
pattern gives its row on its engine and vendor, with the figures the situation wrote (chains, their GPU
time, and what the fusion would remove: the replaced kernels and the idle time inside the block), and no row
on the other vendor's GPU or on a model without the block."""

from __future__ import annotations

import pytest
from tracehouse.synth.situations import SITUATIONS
from tracehouse.synth.situations.fusion_catalogue import BLOCKS
from tracehouse.warehouse import fusion

from tests.conftest import RunFocused
from tests.conftest import query_rows as _rows

NAMES = sorted(n for n in SITUATIONS if n.startswith("fusion-cat-"))
FIELDS = ("status", "occurrences", "related_gpu_time_ns", "removable_gpu_time_ns", "pattern_framework")


@pytest.fixture(scope="module")
def sit(warehouses):
    """(connection, {situation: run id}, {situation: expect}) over the fusion catalogue situations alone
    (each situation is ingested once per session, whatever warehouses hold it: tests/warehouses.py)."""
    from tracehouse.warehouse.catalog import connect
    from warehouses import situation

    wh, runs, truths = warehouses.named({name: situation(name) for name in NAMES})
    con = connect(wh)
    yield RunFocused(con, runs.values()), runs, {n: t["expect"] for n, t in truths.items()}
    con.close()


def test_every_block_is_a_catalogue_pattern_of_its_engine_and_vendor():
    head, _ = fusion.load_fusion_catalog()
    pats = {r["pattern_id"]: r for r in head.to_pylist()}
    for pid, block in BLOCKS.items():
        assert pats[pid]["framework"] == block.engine and pats[pid]["vendor"] == block.vendor, pid
        assert len(block.kernels) == pats[pid]["n_splits"], pid


def test_each_block_fires_and_has_runs_where_it_must_not(sit):
    """Every block's pattern fires in a situation, is absent on a model without the block, and (a
    vendor-specific pattern) absent on the other vendor's GPU."""
    _, _, expect = sit
    fires, absent = set(), set()
    for name in NAMES:
        truth = expect[name]["fusion_catalogue"]
        fires |= set(truth["present"])
        absent |= {(pid, why) for pid, why in truth["absent"].items()}
    assert fires == set(BLOCKS)
    assert {p for p, why in absent if why == "without the block"} == set(BLOCKS)
    assert {p for p, why in absent if why == "other vendor"} == {
        p for p, b in BLOCKS.items() if b.vendor != "any"
    }


@pytest.mark.parametrize("name", NAMES)
def test_fusion_catalogue_rows_follow_what_the_situation_wrote(sit, name):
    con, runs, expect = sit
    truth = expect[name]["fusion_catalogue"]
    run = runs[name]
    (framework,) = con.execute("SELECT framework FROM runs WHERE run_id = ?", [run]).fetchone()
    assert framework == truth["framework"]
    rows = {r["pattern_id"]: r for r in _rows(con, "SELECT * FROM fusion_match WHERE run_id = ?", [run])}
    for pid, want in truth["present"].items():
        assert pid in rows, (name, pid, sorted(rows))
        assert {f: rows[pid][f] for f in FIELDS} == want, (name, pid)
        # the items what-if reads add up to the row's figure
        (items,) = con.execute(
            "SELECT coalesce(sum(removable_ns), 0) FROM fusion_removable WHERE run_id = ? AND pattern_id = ?",
            [run, pid],
        ).fetchone()
        assert items == want["removable_gpu_time_ns"], (name, pid)
        assert rows[pid]["share"] < rows[pid]["related_share"]
    for pid in truth["absent"]:
        assert pid not in rows, (name, pid)

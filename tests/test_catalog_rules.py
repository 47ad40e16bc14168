"""User rule files are a connection's own rule tables: the shared catalogue file (the views, bound once)
is the same whatever rules a command names, and a connection never sees another connection's rules."""

from __future__ import annotations

import pytest
from tracehouse.ingest.load import ingest_paths
from tracehouse.synth import write_scenario
from tracehouse.warehouse import catalog
from tracehouse.warehouse.catalog import connect
from tracehouse.warehouse.store import Warehouse


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    root = tmp_path_factory.mktemp("rules")
    wh = Warehouse(root / "wh")
    [outcome] = ingest_paths(
        wh, [write_scenario("serving-decode", root / "run", ranks=1, steps=2, layers=1)], analyse=False
    )
    return wh, outcome.run_id


def _user_rule_rows(con) -> int:
    return con.execute("SELECT count(*) FROM activity_category WHERE rule_name LIKE 'user:%'").fetchone()[0]


def test_a_rules_file_applies_to_its_connection_only(run, tmp_path):
    wh, _ = run
    user = tmp_path / "mine.csv"
    user.write_text("rule_order,rule_name,category,pattern\n1,everything_norm,norm,.\n", encoding="utf-8")
    before = catalog.catalog_file(wh)
    mine = connect(wh, rules_file=str(user))
    plain = connect(wh)
    assert catalog.catalog_file(wh) == before, "a rules file builds no catalogue of its own"
    kernels = mine.execute("SELECT count(*) FROM kernels WHERE kind = 'kernel'").fetchone()[0]
    assert kernels > 0
    # every kernel's name matches '.': the user rule decides all of them unless an op rule does
    assert 0 < _user_rule_rows(mine) <= kernels
    assert (
        mine.execute(
            "SELECT count(DISTINCT category) FROM kernel_category WHERE rule_name LIKE 'user:%'"
        ).fetchone()[0]
        == 1
    )
    assert _user_rule_rows(plain) == 0, "the shipped rules on a connection without the file"


def test_a_user_peaks_file_sets_the_roofline_peaks(run, tmp_path, monkeypatch):
    """TRACEHOUSE_DEVICE_PEAKS: its rows come before the shipped ones on the connection that reads it."""
    wh, run_id = run
    device = connect(wh).execute("SELECT device FROM _run_device WHERE run_id = ?", [run_id]).fetchone()
    assert device is not None, "the synthesized run names a device with shipped peaks"
    peaks = tmp_path / "peaks.csv"
    peaks.write_text(
        "rule_order,device,pattern,props_match,bf16_tflops,fp8_tflops,fp4_tflops,tf32_tflops,"
        "fp32_tflops,hbm_tbps,link_gbps,source,note\n"
        "1,My GPU,.,,100,200,,50,10,1.5,100,my lab's measurement,\n",
        encoding="utf-8",
    )
    monkeypatch.setenv("TRACEHOUSE_DEVICE_PEAKS", str(peaks))
    assert connect(wh).execute(
        "SELECT device, hbm_tbps FROM _run_device WHERE run_id = ?", [run_id]
    ).fetchone() == ("My GPU", 1.5)
    monkeypatch.delenv("TRACEHOUSE_DEVICE_PEAKS")
    assert (
        connect(wh).execute("SELECT device FROM _run_device WHERE run_id = ?", [run_id]).fetchone() == device
    )

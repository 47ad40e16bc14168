"""tests/warehouses.py: a shared warehouse is built once per key, also across pytest-xdist workers, and its
key is what it holds (the sources in order and whether derived), not how a test names them."""

from __future__ import annotations

import pickle

import pytest
from warehouses import built_once, key_of, real, scenario, situation


class _Factory:
    """What built_once reads of pytest's tmp_path_factory: a worker's base folder."""

    def __init__(self, base):
        self.base = base

    def getbasetemp(self):
        return self.base


def test_same_sources_same_key_other_sources_or_derived_another():
    a = [scenario("serving-decode", ranks=2, straggler=(0, 20.0)), situation("single-step")]
    assert key_of(a, False) == key_of([scenario("serving-decode", straggler=(0, 20.0), ranks=2), a[1]], False)
    assert key_of(a, False) != key_of(a, True)
    assert key_of(a, False) != key_of(list(reversed(a)), False)
    assert key_of(a, False) != key_of([scenario("serving-decode", ranks=2, straggler=(0, 21.0)), a[1]], False)
    assert key_of([real("edge/x.json.gz")], False) != key_of([situation("edge/x.json.gz")], False)


@pytest.mark.parametrize("worker", [None, "gw0"])
def test_built_once_per_session_across_workers(tmp_path, monkeypatch, worker):
    session = tmp_path / "session"
    calls = []

    def make(folder):
        calls.append(folder)
        (folder / "wh").mkdir()
        return {"root": str(folder / "wh"), "n": len(calls)}

    if worker is None:
        monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
        bases = [session, session]
    else:  # two workers, each with its own base folder under the session's
        monkeypatch.setenv("PYTEST_XDIST_WORKER", worker)
        bases = [session / "popen-gw0", session / "popen-gw1"]
    for base in bases:
        base.mkdir(parents=True, exist_ok=True)
    got = [built_once(_Factory(base), "k", make) for base in bases]
    assert len(calls) == 1 and got[0] == got[1] == {"root": str(calls[0] / "wh"), "n": 1}
    assert calls[0].parent == session
    assert pickle.loads((session / "shared-k" / "built.pickle").read_bytes()) == got[0]
    assert (session / "shared-builds.log").read_text().count("\tk\n") == 1


def test_a_build_that_failed_half_way_is_built_again(tmp_path, monkeypatch):
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)

    def fails(folder):
        (folder / "half").write_text("x")
        raise RuntimeError("ingest failed")

    with pytest.raises(RuntimeError):
        built_once(_Factory(tmp_path), "k", fails)
    assert built_once(_Factory(tmp_path), "k", lambda folder: sorted(p.name for p in folder.iterdir())) == []


def test_a_source_is_ingested_once_and_a_linked_warehouse_reads_as_one_ingested_whole(
    tmp_path, monkeypatch, tmp_path_factory
):
    """Two warehouses sharing a source ingest it once (units linked together); the linked derived
    warehouse has the same runs, table rows and kept rows as the same sources ingested into one
    warehouse by `ingest_paths` as `tracehouse ingest` does (derived before it returns)."""
    from tracehouse.ingest import load
    from tracehouse.ingest.load import ingest_paths
    from tracehouse.synth.situations import write_situation
    from tracehouse.warehouse.catalog import connect
    from tracehouse.warehouse.derived import is_derived
    from tracehouse.warehouse.store import TABLES, Warehouse
    from warehouses import Warehouses

    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    ingested = []
    plan = load._ingest_plan
    monkeypatch.setattr(load, "_ingest_plan", lambda *a, **k: ingested.append(a[1]) or plan(*a, **k))
    factory = Warehouses(_Factory(tmp_path / "session"))
    (tmp_path / "session").mkdir()
    names = ["single-step", "two-stream-overlap"]
    both = factory.get([situation(n) for n in names], derived=True)
    one = factory.get([situation(names[1])])
    assert len(ingested) == 2 and one.run_ids == both.run_ids[1:]
    assert all(is_derived(both.warehouse, r) for r in both.run_ids)

    direct = Warehouse(tmp_path / "direct")
    ids = [ingest_paths(direct, [write_situation(n, tmp_path / n)])[0].run_id for n in names]
    assert ids == both.run_ids and direct.run_ids() == both.warehouse.run_ids()

    def rows(wh) -> dict:
        con = connect(wh)
        try:
            return {
                name: sorted(map(repr, con.execute(f"SELECT * FROM {name}").fetchall()))
                for name in (*TABLES, "gpu_timeline", "step_breakdown")
            }
        finally:
            con.close()

    linked, ingested_whole = rows(both.warehouse), rows(direct)
    assert linked["gpu_timeline"] and linked["step_breakdown"]
    assert linked == ingested_whole


def test_a_name_another_worker_is_building_is_left_for_later_unless_waited_for(tmp_path, monkeypatch):
    """wait=False: None while the name's lock is held (another worker building it), make not called; the
    lock is the name's own, so another name builds meanwhile; once free, it is built."""
    import fcntl

    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    calls = []

    def make(folder):
        calls.append(folder.name)
        return {"n": len(calls)}

    with open(tmp_path / "shared-k.lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        assert built_once(_Factory(tmp_path), "k", make, wait=False) is None
        assert built_once(_Factory(tmp_path), "other", make, wait=False) == {"n": 1}
    assert built_once(_Factory(tmp_path), "k", make, wait=False) == {"n": 2}
    assert calls == ["shared-other", "shared-k"]

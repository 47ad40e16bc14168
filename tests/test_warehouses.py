"""tests/warehouses.py: a shared warehouse is built once per key, also across pytest-xdist workers, and its
key is what it holds (the sources in order and whether derived), not how a test names them."""

from __future__ import annotations

import json

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
    assert json.loads((session / "shared-k" / "built.json").read_text()) == got[0]
    assert (session / "shared-builds.log").read_text().count("\tk\n") == 1


def test_a_build_that_failed_half_way_is_built_again(tmp_path, monkeypatch):
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)

    def fails(folder):
        (folder / "half").write_text("x")
        raise RuntimeError("ingest failed")

    with pytest.raises(RuntimeError):
        built_once(_Factory(tmp_path), "k", fails)
    assert built_once(_Factory(tmp_path), "k", lambda folder: sorted(p.name for p in folder.iterdir())) == []

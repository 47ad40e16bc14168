"""Where the suite's time goes: with TRACEHOUSE_TEST_COUNT=FILE, every test phase (setup, call, teardown)
appends one JSON line to FILE: its node id, its CPU seconds (this process and its reaped children, so a
worker pool's ingest counts) and how many times it ingested a run, derived runs, synthesized a scenario
or situation and opened a catalogue connection, with the seconds each took and the real traces ingested.
Off (nothing patched) without the variable. pytest-xdist workers append to the same file.

    TRACEHOUSE_TEST_COUNT=/tmp/counts.jsonl python -m pytest -q -p no:xdist -m slow tests/test_x.py
    python tests/suite_counts.py /tmp/counts.jsonl      # totals by module and phase, repeated ingests
"""

from __future__ import annotations

import collections
import functools
import json
import os
import resource
import sys
import time
from pathlib import Path

import pytest

OUT = os.environ.get("TRACEHOUSE_TEST_COUNT")
# (module, function): what is counted, under a short name
COUNTED = {
    "ingest": ("tracehouse.ingest.load", "_ingest_plan"),
    "derive": ("tracehouse.warehouse.derived", "derive"),
    "scenario": ("tracehouse.synth.scenario", "write_scenario"),
    "situation": ("tracehouse.synth.situations", "write_situation"),
    "connect": ("tracehouse.warehouse.catalog", "connect"),
}
_phase: dict = {}


def _cpu() -> float:
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def _counted(name: str, fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        started = time.monotonic()
        try:
            return fn(*args, **kwargs)
        finally:
            _phase[name] = _phase.get(name, 0) + 1
            _phase[f"{name}_s"] = _phase.get(f"{name}_s", 0.0) + time.monotonic() - started
            if name == "ingest":
                files = args[1] if len(args) > 1 else kwargs.get("files", [])
                _phase.setdefault("files", []).extend(_short(f) for f in files)

    return wrapper


def _short(path) -> str:
    text = str(path)
    return text.split("/shared/traces/", 1)[1] if "/shared/traces/" in text else "synth:" + Path(text).name


def pytest_configure(config):
    if not OUT:
        return
    import importlib

    for name, (module, attr) in COUNTED.items():
        mod = importlib.import_module(module)
        setattr(mod, attr, _counted(name, getattr(mod, attr)))
    # the re-exports read at import by the code that counts on them
    from tracehouse import synth

    synth.write_scenario = sys.modules["tracehouse.synth.scenario"].write_scenario


def _record(item, when: str, cpu: float) -> None:
    line = {"id": item.nodeid, "when": when, "cpu": round(cpu, 3), **_phase}
    line["worker"] = os.environ.get("PYTEST_XDIST_WORKER", "main")
    with open(OUT, "a") as f:
        f.write(json.dumps(line) + "\n")
    _phase.clear()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item):
    yield from _measured(item, "setup")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    yield from _measured(item, "call")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item):
    yield from _measured(item, "teardown")


def _measured(item, when: str):
    if not OUT:
        yield
        return
    _phase.clear()
    started = _cpu()
    yield
    _record(item, when, _cpu() - started)


def summary(lines: list[dict]) -> str:
    """Totals: CPU seconds by phase and by module; counts; the real traces ingested more than once."""
    by_module, by_phase, counts = collections.Counter(), collections.Counter(), collections.Counter()
    files = collections.Counter()
    for line in lines:
        module = line["id"].split("::", 1)[0]
        by_module[module] += line["cpu"]
        by_phase[line["when"]] += line["cpu"]
        for name in COUNTED:
            counts[name] += line.get(name, 0)
            counts[f"{name}_s"] += line.get(f"{name}_s", 0.0)
        files.update(f for f in line.get("files", []) if not f.startswith("synth:"))
    calls = sum(1 for line in lines if line["when"] == "call")
    out = [
        f"{calls} tests, {sum(by_phase.values()):.1f} CPU-s: "
        + ", ".join(f"{k} {v:.1f}" for k, v in by_phase.most_common())
    ]
    out.append(", ".join(f"{n} {counts[n]} ({counts[n + '_s']:.1f} s)" for n in COUNTED))
    out.append(
        "real files ingested more than once: "
        + ", ".join(f"{f} x{n}" for f, n in files.most_common() if n > 1)
    )
    out += [f"{v:8.1f}  {m}" for m, v in by_module.most_common()]
    return "\n".join(out)


if __name__ == "__main__":
    print(summary([json.loads(line) for line in Path(sys.argv[1]).read_text().splitlines() if line]))

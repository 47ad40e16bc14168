"""The test session's warehouses, each ingested once per session and shared read-only.

A warehouse is asked for by what it holds: its sources in order (a synthesized scenario with its options,
a synthesized situation, a real trace or folder of ../shared) and whether its runs are derived (ingested
as `tracehouse ingest` does: the kept rows of the per-run views computed) or not (every view computed by
its reader). Every test asking for the same sources and `derived` reads the same folder, built once per
test session, also under pytest-xdist (the first worker to ask builds it, the others wait for it).

A test that needs a few runs of a larger shared warehouse asks for the larger one and focuses its
connection on its runs (`connect(wh, runs=...)`: every table and view sees those runs only, as in a
warehouse of its own). A test that changes a warehouse (labels, rm, ingest into it) copies it first
(`copy_warehouse`), never the shared folder.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TRACES = ROOT.parent / "shared" / "traces"

# the sources: tuples, so that a list of them is a key (and JSON)


def scenario(name: str, **opts) -> tuple:
    """A synthesized scenario (synth.write_scenario(name, folder, **opts)); its folder is ingested."""
    return (
        "scenario",
        name,
        tuple(sorted((k, list(v) if isinstance(v, tuple) else v) for k, v in opts.items())),
    )


def scenario_files(name: str, **opts) -> tuple:
    """A synthesized scenario whose trace files are ingested (not its folder)."""
    return ("scenario-files", name, scenario(name, **opts)[2])


def situation(name: str) -> tuple:
    """A synthesized situation (synth.situations.write_situation)."""
    return ("situation", name)


def real(rel: str) -> tuple:
    """A real trace file or folder of ../shared/traces, relative to it."""
    return ("real", rel)


@dataclass(frozen=True)
class Built:
    """A built warehouse: run ids, ground truths (synthesized sources) and input folders, in the order of
    the sources asked for."""

    root: Path
    run_ids: list[str]
    truths: list[dict | None]
    inputs: list[Path]

    @property
    def warehouse(self):
        from tracehouse.warehouse.store import Warehouse

        return Warehouse(self.root)


def _write(source: tuple, folder: Path) -> tuple[list[Path], Path]:
    """(the paths to ingest, the input folder or file) of one source."""
    kind, name = source[0], source[1]
    if kind in ("scenario", "scenario-files"):
        from tracehouse.synth import write_scenario

        opts = {k: tuple(v) if isinstance(v, list) else v for k, v in source[2]}
        out = write_scenario(name, folder, **opts)
        files = sorted(out.glob("*.trace.json.gz"))
        return ([out] if kind == "scenario" or len(files) > 1 else files), out
    if kind == "situation":
        from tracehouse.synth.situations import write_situation

        out = write_situation(name, folder)
        return [out], out
    if kind == "real":
        return [TRACES / name], TRACES / name
    raise ValueError(f"unknown source kind {kind!r}")


def build(sources: list[tuple], derived: bool, folder: Path) -> dict:
    """Ingest every source, in order, into folder/wh; the JSON-able description of what was built."""
    from tracehouse.ingest.load import ingest_paths
    from tracehouse.synth.truth import load_truth, truth_path
    from tracehouse.warehouse.store import Warehouse

    wh = Warehouse(folder / "wh")
    run_ids, truths, inputs = [], [], []
    names = [s[1] for s in sources]
    for i, source in enumerate(sources):
        # a synthesized source is written in a folder named after it (as the fixtures before this did)
        name = source[1] if names.count(source[1]) == 1 else f"{source[1]}-{i}"
        paths, out = _write(source, folder / name)
        [outcome] = ingest_paths(wh, paths, analyse=derived)
        assert outcome.run_id and not outcome.problems, (source, outcome.problems)
        run_ids.append(outcome.run_id)
        synthesized = source[0] != "real" and truth_path(out).is_file()
        truths.append(load_truth(out) if synthesized else None)
        inputs.append(str(out))
    return {"root": str(wh.root), "run_ids": run_ids, "truths": truths, "inputs": inputs}


def key_of(sources: list[tuple], derived: bool) -> str:
    text = json.dumps([[list(s) for s in sources], derived], sort_keys=True, default=list)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def built_once(tmp_path_factory, name: str, make):
    """make(folder) -> a JSON-able result, run once per test session, also under pytest-xdist: the first
    worker to get here builds in a folder all workers share, the others wait for it and read its result.
    The folder's contents are then read-only for the tests (a test that changes a warehouse copies it)."""
    if os.environ.get("PYTEST_XDIST_WORKER") is None:
        base = tmp_path_factory.getbasetemp()
    else:
        base = tmp_path_factory.getbasetemp().parent  # the session's folder, above each worker's
    folder = base / f"shared-{name}"
    done = folder / "built.json"
    with open(base / f"shared-{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if not done.is_file():
            if folder.exists():  # a build that failed half-way: start again
                shutil.rmtree(folder)
            folder.mkdir()
            started = time.monotonic()
            result = make(folder)
            with open(base / "shared-builds.log", "a") as log:  # read by conftest's terminal summary
                log.write(f"{time.monotonic() - started:.1f}\t{name}\n")
            (folder / "built.json.part").write_text(json.dumps(result))
            (folder / "built.json.part").rename(done)
    return json.loads(done.read_text())


class Warehouses:
    """The session's warehouse factory (the `warehouses` fixture)."""

    def __init__(self, tmp_path_factory) -> None:
        self.tmp_path_factory = tmp_path_factory
        self.seen: dict[str, Built] = {}

    def get(self, sources: list[tuple], derived: bool = False) -> Built:
        if any(s[0] == "real" for s in sources):
            from conftest import require_shared

            require_shared()
        key = key_of(sources, derived)
        if key not in self.seen:
            got = built_once(self.tmp_path_factory, key, lambda folder: build(sources, derived, folder))
            self.seen[key] = Built(
                Path(got["root"]), got["run_ids"], got["truths"], [Path(p) for p in got["inputs"]]
            )
        return self.seen[key]

    def named(self, named: dict[str, tuple], derived: bool = False) -> tuple:
        """(Warehouse, {name: run id}, {name: ground truth}) of the sources given by name."""
        got = self.get(list(named.values()), derived)
        names = list(named)
        return (
            got.warehouse,
            dict(zip(names, got.run_ids)),
            dict(zip(names, got.truths)),
        )


def copy_warehouse(wh, folder: Path):
    """A copy of a shared warehouse for a test that changes it."""
    from tracehouse.warehouse.store import Warehouse

    shutil.copytree(wh.root, folder)
    return Warehouse(folder)

"""The test session's warehouses, each ingested once per session and shared read-only.

A warehouse is asked for by what it holds: its sources in order (a synthesized scenario with its options,
a synthesized situation, a real trace or folder of ../shared) and whether its runs are derived (ingested
as `tracehouse ingest` does: the kept rows of the per-run views computed) or not (every view computed by
its reader). Every test asking for the same sources and `derived` reads the same folder, built once per
test session, also under pytest-xdist (the first worker to ask builds it, the others wait for it; each
folder has its own lock, so workers build different warehouses side by side).

Each source is ingested once per session, whatever warehouses hold it: a source is first a warehouse of
its own run (a unit; its derived unit is the same run, its files linked, then derived), and a warehouse
of several sources is its units' run folders linked together (a run's folders are its own: Hive
partitions by run id, tables and kept rows alike). So the real traces of ../shared are read once each by
every module asking for any of them, and a situation once for every warehouse that holds it.

A test that needs a few runs of a larger shared warehouse asks for the larger one and focuses its
connection on its runs (`connect(wh, runs=...)`: every table and view sees those runs only, as in a
warehouse of its own), or asks for a warehouse of just those sources (as cheap: linked). A test that
changes a warehouse (labels, rm, ingest into it) copies it first (`copy_warehouse`), never the shared
folder: its files are hard links shared with other warehouses of the session.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import pickle
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


def build_unit(source: tuple, folder: Path) -> dict:
    """Ingest one source into folder/wh, not derived; the JSON-able description of its run."""
    from tracehouse.ingest.load import ingest_paths
    from tracehouse.synth.truth import load_truth, truth_path
    from tracehouse.warehouse.store import Warehouse

    wh = Warehouse(folder / "wh")
    # a synthesized source is written in a folder named after it (as the fixtures before this did)
    paths, out = _write(source, folder / source[1].replace("/", "_"))
    [outcome] = ingest_paths(wh, paths, analyse=False)
    assert outcome.run_id and not outcome.problems, (source, outcome.problems)
    synthesized = source[0] != "real" and truth_path(out).is_file()
    truth = load_truth(out) if synthesized else None
    return {"root": str(wh.root), "run_ids": [outcome.run_id], "truths": [truth], "inputs": [str(out)]}


def derive_unit(base: dict, folder: Path, batch: dict | None = None) -> dict:
    """A unit's run derived (its kept rows computed, as `tracehouse ingest` does), in folder/wh: the base
    unit's files linked, then the run derived there. batch: a warehouse where the run was derived with
    others (derive_together): its kept rows are linked from there, and the derive finds nothing to do."""
    from tracehouse.ingest.load import derive_one
    from tracehouse.warehouse.store import Warehouse

    wh = Warehouse(folder / "wh")
    link_tree(Path(base["root"]), wh.root)
    [run_id] = base["run_ids"]
    if batch is not None:
        derived = Path(batch["root"]) / "derived"
        for kept in derived.glob(f"*/*/run_id={run_id}"):  # <store>/<view>/run_id=<id>/
            link_tree(kept, wh.root / "derived" / kept.relative_to(derived))
            for file in kept.parent.iterdir():  # the view's own files (its column types)
                if file.is_file() and not (wh.root / "derived" / file.relative_to(derived)).exists():
                    os.link(file, wh.root / "derived" / file.relative_to(derived))
    assert derive_one(wh, run_id), f"run {run_id} of {base['inputs']} could not be derived"
    return {**base, "root": str(wh.root)}


def derive_together(bases: list[dict], folder: Path) -> dict:
    """Several units' runs derived at once, in folder/wh (their files linked): small runs share one
    connection's views (warehouse.derived.derive's batches), ~5x faster than each alone on the real traces."""
    from tracehouse.warehouse.derived import derive
    from tracehouse.warehouse.store import Warehouse

    wh = Warehouse(folder / "wh")
    for base in bases:
        link_tree(Path(base["root"]), wh.root)
    run_ids = [b["run_ids"][0] for b in bases]
    failed = {r: why for r, why in derive(wh, run_ids).items() if why}
    assert not failed, f"runs that could not be derived: {failed}"
    return {"root": str(wh.root), "run_ids": run_ids}


def assemble(units: list[dict], folder: Path) -> dict:
    """The warehouse of several units: each unit's files linked into folder/wh (the runs' partitions and
    kept rows; the same run twice is one run, as ingesting the same files twice is)."""
    for unit in units:
        link_tree(Path(unit["root"]), folder / "wh")
    return {
        "root": str((folder / "wh").resolve()),
        "run_ids": [u["run_ids"][0] for u in units],
        "truths": [u["truths"][0] for u in units],
        "inputs": [u["inputs"][0] for u in units],
    }


LEFT_OUT = {"staging", ".locks", ".logs", ".lock"}  # a warehouse's own: its writers' locks and work


def link_tree(source: Path, target: Path) -> None:
    """Hard-link every file under source into target (copied where a link cannot be made); a file
    already there is kept. Locks and staging are left out: each warehouse has its own."""
    for folder, dirs, files in os.walk(source):
        dirs[:] = [d for d in dirs if d not in LEFT_OUT]
        into = target / Path(folder).relative_to(source)
        into.mkdir(parents=True, exist_ok=True)
        for name in files:
            if name in LEFT_OUT or (into / name).exists():
                continue
            try:
                os.link(Path(folder) / name, into / name)
            except OSError:
                shutil.copy2(Path(folder) / name, into / name)


def key_of(sources: list[tuple], derived: bool) -> str:
    text = json.dumps([[list(s) for s in sources], derived], sort_keys=True, default=list)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def built_once(tmp_path_factory, name: str, make, wait: bool = True, probe: bool = False):
    """make(folder) -> a result (anything pickle keeps), run once per test session, also under pytest-xdist: the first
    worker to get here builds in a folder all workers share, the others wait for it and read its result
    (wait=False: None while another worker builds it). Each name has its own lock: workers build
    different names side by side. The folder's contents are then read-only for the tests (a test that
    changes a warehouse copies it). probe: only whether it is built (nothing is made)."""
    if os.environ.get("PYTEST_XDIST_WORKER") is None:
        base = tmp_path_factory.getbasetemp()
    else:
        base = tmp_path_factory.getbasetemp().parent  # the session's folder, above each worker's
    folder = base / f"shared-{name}"
    done = folder / "built.pickle"
    if probe:  # only whether it is built
        return done.is_file()
    if done.is_file():  # renamed into place whole: built
        return pickle.loads(done.read_bytes())
    with open(base / f"shared-{name}.lock", "w") as lock:
        try:  # released when the file closes
            fcntl.flock(lock, fcntl.LOCK_EX if wait else fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return None
        if not done.is_file():
            if folder.exists():  # a build that failed half-way: start again
                shutil.rmtree(folder)
            folder.mkdir()
            started = time.monotonic()
            result = make(folder)
            with open(base / "shared-builds.log", "a") as log:  # read by conftest's terminal summary
                log.write(f"{time.monotonic() - started:.1f}\t{name}\n")
            (folder / "built.pickle.part").write_bytes(pickle.dumps(result))
            (folder / "built.pickle.part").rename(done)
    return pickle.loads(done.read_bytes())


class Warehouses:
    """The session's warehouse factory (the `warehouses` fixture)."""

    def __init__(self, tmp_path_factory) -> None:
        self.tmp_path_factory = tmp_path_factory
        self.seen: dict[str, Built] = {}

    def unit(self, source: tuple, derived: bool, wait: bool = True, batch: dict | None = None) -> dict | None:
        """The warehouse of this one source's run (built once per session: ingested once, derived once);
        wait=False: None while another worker builds it (or the run it derives). batch: where the run was
        derived with others (derive_together), if it was."""
        if derived:
            base = self.unit(source, False, wait)
            if base is None:
                return None
            make = lambda folder: derive_unit(base, folder, batch)
        else:
            make = lambda folder: build_unit(source, folder)
        return built_once(self.tmp_path_factory, "unit-" + key_of([source], derived), make, wait)

    def _is_built(self, source: tuple, derived: bool) -> bool:
        return built_once(self.tmp_path_factory, "unit-" + key_of([source], derived), None, probe=True)

    def derived_units(self, sources: list[tuple]) -> list[dict]:
        """Each source's derived unit, in order; those not derived yet are derived together first (one
        batch, built once by one worker; the others wait for it)."""
        unique = {key_of([s], True): s for s in sources}.values()  # a source is a tuple of lists: unhashable
        todo = [s for s in unique if not self._is_built(s, True)]
        batch = None
        if len(todo) > 1:
            bases = self.units(todo, False)
            batch = built_once(
                self.tmp_path_factory, "batch-" + key_of(todo, True), lambda f: derive_together(bases, f)
            )
        return [self.unit(s, True, batch=batch) for s in sources]

    def units(self, sources: list[tuple], derived: bool) -> list[dict]:
        """Each source's unit, in order. Under pytest-xdist the units another worker is building are
        left for later, and this worker builds the next free one: two workers asking for the same
        warehouse of many sources build its units side by side rather than one after the other. Derived
        units are derived together (derived_units)."""
        if derived and len(sources) > 1:
            return self.derived_units(sources)
        got: dict[int, dict] = {}
        while len(got) < len(sources):
            pending = [i for i in range(len(sources)) if i not in got]
            for i in pending:
                unit = self.unit(sources[i], derived, wait=False)
                if unit is not None:
                    got[i] = unit
            if all(i not in got for i in pending):  # every one left is being built: wait for the first
                got[pending[0]] = self.unit(sources[pending[0]], derived)
        return [got[i] for i in range(len(sources))]

    def get(self, sources: list[tuple], derived: bool = False) -> Built:
        if any(s[0] == "real" for s in sources):
            from conftest import require_shared

            require_shared()
        key = key_of(sources, derived)
        if key not in self.seen:
            units = self.units(sources, derived)
            if len(units) == 1:
                got = units[0]
            else:
                got = built_once(self.tmp_path_factory, key, lambda folder: assemble(units, folder))
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


def replay_only_and_mapping(folder: Path) -> tuple:
    """A serving-decode run ingested twice into one warehouse under `folder`: its traces alone (graph replays
    without capture traces: a replayed kernel's site is the replay call) and whole, with its capture traces
    (the mapping run: the model's lines are known). Returns (warehouse, replay-only run id, mapping run id)."""
    from tracehouse.ingest.load import ingest_paths
    from tracehouse.synth import write_scenario
    from tracehouse.warehouse.store import Warehouse

    full = write_scenario("serving-decode", folder / "decode", ranks=1, steps=2, layers=2, seed=3)
    replay_only = folder / "replay_only"
    replay_only.mkdir()
    for f in full.glob("*.trace.json.gz"):
        shutil.copy(f, replay_only / f.name)
    wh = Warehouse(folder / "wh")
    [target] = ingest_paths(wh, [replay_only])
    [mapping] = ingest_paths(wh, [full])
    return wh, target.run_id, mapping.run_id

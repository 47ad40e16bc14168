"""Every kind of broken trace (tests/broken_traces.py) gives exactly its documented outcome through the
CLI, and the warehouse's other runs are untouched. Then: hostile run ids, labels and file names."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pytest
from broken_traces import KINDS, make_case
from tracebuilder import simple_events, write_trace
from tracehouse.warehouse.catalog import connect
from tracehouse.warehouse.derived import is_derived
from tracehouse.warehouse.store import Warehouse
from warehouses import built_once

from tracehouse.cli import main

GOOD_ROWS = (
    "SELECT rank, kernel_id, name, start_ns, dur_ns, linked FROM kernels WHERE run_id = ? ORDER BY ALL"
)


@pytest.fixture(scope="module")
def template(tmp_path_factory, cli_runner):
    """A warehouse holding one good run: (folder, run id, its kernel rows)."""
    folder = tmp_path_factory.mktemp("template")
    trace = write_trace(folder / "good" / "good.json.gz", simple_events())
    result = cli_runner.invoke(main, ["--warehouse", str(folder / "wh"), "ingest", str(trace)])
    assert result.exit_code == 0, result.output
    run_id = result.stdout.split()[0]
    con = connect(Warehouse(folder / "wh"))
    return folder / "wh", run_id, con.execute(GOOD_ROWS, [run_id]).fetchall()


@pytest.fixture
def warehouse(template, tmp_path):
    wh = tmp_path / "wh"
    shutil.copytree(template[0], wh)
    return wh


def _warnings_match(actual: dict, expected: dict, only: bool) -> None:
    rest = dict(actual)
    for key, count in expected.items():
        if key.startswith("__prefix__"):
            prefix = key[len("__prefix__") :]
            found = [k for k in rest if k.startswith(prefix)]
            assert len(found) == 1, (prefix, actual)
            assert rest.pop(found[0]) == count, (found[0], actual)
        else:
            assert rest.pop(key, None) == count, (key, actual)
    if only:
        assert rest == {}, rest


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_broken_kind_has_its_documented_outcome(kind, warehouse, template, tmp_path, cli_runner):
    case = make_case(kind, tmp_path / "case")
    expect = case.outcome
    _, good_run, good_rows = template
    # the ingest's outcome only: the derived rows of each broken run are test_broken_run_derives_cleanly's
    # (~5 CPU-s a run, most of this module's time in the fast tier)
    result = cli_runner.invoke(
        main, ["--warehouse", str(warehouse), "ingest", "--no-derive", *map(str, case.paths)]
    )
    assert result.exit_code == expect.exit_code, (result.output, result.exception)
    assert "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    con = connect(Warehouse(warehouse))
    # the good run is untouched
    assert con.execute(GOOD_ROWS, [good_run]).fetchall() == good_rows
    runs = con.execute(
        "SELECT run_id, n_kernels, warnings FROM runs WHERE run_id <> ?", [good_run]
    ).fetchall()
    if expect.kind == "error":
        assert len(errors) == 1, result.stderr
        line = errors[0]
        bad = expect.bad_file or case.paths[0].name
        assert bad in line and expect.what in line and f"at {expect.where}" in line, line
        assert "(" in line and line.rstrip().endswith(")"), "the error says what to do next: " + line
        if not expect.n_kernels:
            assert runs == []
            return
    else:
        assert errors == [], result.stderr
    [(run_id, n_kernels, warnings)] = runs
    warnings = dict(warnings or {})
    if expect.kind == "clean":
        assert warnings == {}
    else:
        _warnings_match(warnings, expect.warnings, expect.only)
    if expect.n_kernels is not None:
        assert n_kernels == expect.n_kernels
    assert con.execute("SELECT count(*) FROM kernels WHERE run_id = ?", [run_id]).fetchone()[0] == n_kernels
    if kind == "huge_kernel_name":  # cut, the md5 of the whole kept (hashlib's, not the SQL's own md5)
        whole = hashlib.md5(b"k" * (100 << 20)).hexdigest()
        long = "SELECT name FROM kernels WHERE run_id = ? AND length(name) > 1000"
        assert con.execute(long, [run_id]).fetchall() == [
            ("k" * 65536 + f" [cut; md5 of the whole: {whole}]",)
        ]
    # the warnings are printed too
    for key in warnings:
        assert f"warning: {key}:" in result.stderr


@pytest.fixture(scope="module")
def broken_runs_derived(template, tmp_path_factory, cli_runner):
    """Every kind's run (what its trace leaves) in one warehouse, then one `tracehouse derive` of them all, as
    after an upgrade: (the warehouse, {kind: its run id, or None where the kind leaves no run}, the derive's
    stdout). Small runs are derived together, and a batch that fails derives its runs one by one, so each
    kind's outcome is still its own (~5 CPU-s a run alone; the batch is ~0.3 s a run). Built once per test
    session, also when two workers run this module's tests (tests/warehouses.py built_once)."""

    def make(folder: Path) -> dict:
        shutil.copytree(template[0], folder / "wh")
        wh = ["--warehouse", str(folder / "wh")]
        runs: dict[str, str | None] = {}
        for kind in sorted(KINDS):
            case = make_case(kind, folder / kind)
            before = set(_run_ids(folder / "wh"))
            ingested = cli_runner.invoke(main, [*wh, "ingest", "--no-derive", *map(str, case.paths)])
            new = sorted(set(_run_ids(folder / "wh")) - before)
            if case.outcome.kind == "error" and not case.outcome.n_kernels:
                assert ingested.exit_code == case.outcome.exit_code and not new, (kind, ingested.output)
                runs[kind] = None
            else:
                [runs[kind]] = new
        derived = cli_runner.invoke(main, [*wh, "derive", *sorted({r for r in runs.values() if r})])
        return {"root": str(folder / "wh"), "runs": runs, "output": derived.output, "stdout": derived.stdout}

    built = built_once(tmp_path_factory, "broken-kinds-derived", make)
    return Path(built["root"]), built["runs"], built


def _run_ids(warehouse: Path) -> list[str]:
    con = connect(Warehouse(warehouse))
    try:
        return [r for (r,) in con.execute("SELECT run_id FROM runs").fetchall()]
    finally:
        con.close()


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_broken_run_derives_cleanly(kind, broken_runs_derived):
    """What a broken trace leaves as a run (most kinds: its good events) is derived like any run: `tracehouse
    derive` computes its kept rows without an error (what each kind's ingest did before the two were split)."""
    warehouse, runs, derived = broken_runs_derived
    run_id = runs[kind]
    if run_id is None:
        return  # no run: nothing to derive (the fixture checked the ingest's exit code)
    assert "Traceback" not in derived["output"], derived["output"]
    assert f"{run_id}\tderived\n" in derived["stdout"], derived["output"]
    assert is_derived(Warehouse(warehouse), run_id)


def test_there_are_at_least_twenty_kinds():
    assert len(KINDS) >= 20
    assert all(k.doc for k in KINDS.values())


# ---- hostile run ids, labels and file names ----------------------------------------------------------
HOSTILE_RUN_IDS = [
    "../../etc/passwd",
    "..",
    "/",
    "abc\x00def",
    "$(touch pwned)",
    "`touch pwned`",
    "; rm -rf /",
    "*",
    "%",
    "run_id=*",
    "latest/../x",
    "' OR 1=1 --",
    "\n",
    "",
]


def _files(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


@pytest.mark.parametrize("run", HOSTILE_RUN_IDS)
def test_hostile_run_ids_are_not_paths(run, warehouse, tmp_path, cli_runner, monkeypatch):
    monkeypatch.chdir(tmp_path)
    before = _files(tmp_path)
    for args in (
        ["report", "--run", run, "--format", "html"],
        ["diff", run, "latest"],
        ["diff", "latest", run],
    ):
        result = cli_runner.invoke(main, ["--warehouse", str(warehouse), *args])
        assert result.exit_code == 1, (args, result.output, result.exception)
        errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
        assert len(errors) == 1 and "run" in errors[0], result.stderr
        assert "Traceback" not in result.output
    assert _files(tmp_path) == before  # nothing written, no `pwned`
    assert not Path("/pwned").exists()


HOSTILE_LABELS = {
    "model": "../../etc/passwd",
    "config": "$(touch pwned); `id` | tee x && rm -rf ~",
    "note": "<script>alert('label')</script>",
    "nul": "a\x00b",
    "../key": "<img src=x onerror=alert(3)>",
}


def test_hostile_labels_and_file_names_are_data(tmp_path, cli_runner, monkeypatch):
    from tracehouse.reports.run import build_run_report, render_run_report

    monkeypatch.chdir(tmp_path)
    trace = write_trace(
        tmp_path / "in" / "$(touch pwned);'\"<b onmouseover=alert(4)>.json.gz", simple_events()
    )
    wh = tmp_path / "wh"
    args = ["--warehouse", str(wh), "ingest", str(trace)]
    for key, value in HOSTILE_LABELS.items():
        args += ["--label", f"{key}={value}"]
    result = cli_runner.invoke(main, args)
    assert result.exit_code == 0, result.output
    run_id = result.stdout.split()[0]
    assert all(c in "0123456789abcdef" for c in run_id)
    assert not (tmp_path / "pwned").exists() and not (tmp_path / "x").exists()
    assert {p.name for p in (wh / "tables" / "runs").iterdir()} == {"run_id=" + run_id, "run_id=_schema"}
    con = connect(Warehouse(wh))
    labels = dict(con.execute("SELECT labels FROM runs").fetchone()[0])
    assert labels == HOSTILE_LABELS  # stored as given, as data
    assert con.execute("SELECT files[1].name FROM runs").fetchone()[0] == trace.name
    html = render_run_report(build_run_report(con, run_id), "html")
    # the page's one script is its own (sorting, filters: allowed by hash under the CSP); labels never add one
    from tracehouse.reports.render import PAGE_JS

    assert html.lower().count("<script") == 1 and f"<script>{PAGE_JS}</script>" in html
    assert "<script>alert" not in html.lower() and "<img src=x" not in html and "<b onmouseover" not in html
    assert _files(tmp_path / "in") == [trace.name]

"""The export's analysis tracks in bounded memory (issue 18): per-step analyses over scoped batches give the
views' own rows, a track that does not fit the memory limit is left out and said so, never half-written."""

from __future__ import annotations

import duckdb
import pytest
from tracehouse.reports import export
from tracehouse.reports.export import analysis, export_run, scoped
from tracehouse.reports.perfetto_proto import read_slices, track_rank
from tracehouse.warehouse.catalog import connect


@pytest.fixture(scope="module")
def decode(warehouses):
    from warehouses import scenario

    built = warehouses.get([scenario("serving-decode", seed=5, ranks=2, steps=3, layers=2)])
    return built.warehouse, built.run_ids[0]


def _slices(path, category):
    _, slices = read_slices(path.read_bytes())
    return [s for s in slices if s.get("category") == category]


def test_scoped_batches_give_the_views_rows(decode, tmp_path):
    """Batches of 2 steps, each over its span's rows only: the critical path and layers drawn are exactly
    those of the views computed over the whole run."""
    wh, run_id = decode
    out = tmp_path / "b.pftrace"
    export_run(wh, run_id, out, step_batch=2)
    con = connect(wh)
    cp = sorted(
        con.execute(
            "SELECT rank, step, seq, start_ns, dur_ns, kind FROM critical_path WHERE run_id = ?", [run_id]
        ).fetchall()
    )
    layers = sorted(
        con.execute(
            "SELECT rank, step, layer, start_ns, end_ns - start_ns FROM export_layers WHERE run_id = ?",
            [run_id],
        ).fetchall()
    )
    steps = con.execute(
        "SELECT count(DISTINCT step) FROM kernels WHERE run_id = ? AND step IS NOT NULL", [run_id]
    ).fetchone()[0]
    con.close()
    assert steps >= 3  # more than one batch per rank
    tracks, slices = read_slices(out.read_bytes())

    def rank(uuid):

        return track_rank(tracks, uuid)

    got = sorted(
        (rank(s["track"]), s["args"]["step"], s["args"]["seq"], s["start_ns"], s["dur_ns"], s["args"]["kind"])
        for s in slices
        if s.get("category") == "critical_path"
    )
    assert got == cp and len(cp) > 0
    got_layers = sorted(
        (rank(s["track"]), s["args"]["step"], s["args"]["layer"], s["start_ns"], s["dur_ns"])
        for s in slices
        if s.get("category") == "layer"
    )
    assert got_layers == layers and len(layers) > 0


def _oom_on(monkeypatch, needle: str, scoped_too: bool = True):
    """Make the analysis queries whose SQL contains `needle` fail as DuckDB's out-of-memory does (only when no
    rank scope is active, unless scoped_too)."""
    real = scoped.fetch
    real_temp = scoped.temp_table

    def in_scope(con) -> bool:
        return bool(
            con.execute(
                "SELECT count(*) FROM duckdb_views() WHERE temporary AND view_name = 'kernels'"
            ).fetchone()[0]
            + con.execute(
                "SELECT count(*) FROM duckdb_tables() WHERE temporary AND table_name = 'kernels'"
            ).fetchone()[0]
        )

    def fetch(con, sql, params):
        if needle in sql and (scoped_too or not in_scope(con)):
            raise duckdb.OutOfMemoryException("Out of Memory Error: failed to pin block (test)")
        return real(con, sql, params)

    def temp(con, name, sql, params):
        if needle in sql and (scoped_too or not in_scope(con)):
            raise duckdb.OutOfMemoryException("Out of Memory Error: failed to pin block (test)")
        return real_temp(con, name, sql, params)

    monkeypatch.setattr(scoped, "fetch", fetch)
    monkeypatch.setattr(scoped, "temp_table", temp)


def test_track_that_does_not_fit_is_left_out_and_said(decode, tmp_path, monkeypatch):
    wh, run_id = decode
    _oom_on(monkeypatch, "FROM critical_path")  # every batch of every rank
    out = tmp_path / "cut.pftrace"
    summary = export_run(wh, run_id, out)
    assert _slices(out, "critical_path") == []
    assert summary.counts["critical_path"] == 0
    notes = [n for n in summary.notes if "critical path of steps" in n and "not drawn: Out of Memory" in n]
    assert len(notes) == 2  # one batch per rank, each said
    assert _slices(out, "idle_gap") and _slices(out, "layer")  # the other tracks are whole


def test_idle_gaps_written_whole_or_not_at_all(decode, tmp_path, monkeypatch):
    wh, run_id = decode
    _oom_on(monkeypatch, "FROM idle_gaps")
    out = tmp_path / "gaps.pftrace"
    summary = export_run(wh, run_id, out)
    assert _slices(out, "idle_gap") == [] and summary.counts["idle_gaps"] == 0
    assert sum("idle gaps not drawn" in n for n in summary.notes) == 2
    tracks, _ = read_slices(out.read_bytes())
    assert not any((t.get("name") or "").startswith("idle gaps") for t in tracks.values())


def test_data_quality_run_flags_that_do_not_fit_are_said(decode, tmp_path, monkeypatch):
    """The flags of the run and its ranks (one query of streaming aggregates, unscoped) do not fit: they are not
    drawn and the file says so; the per-step flags, computed per batch over the batch's rows, still are."""
    wh, run_id = decode
    con = connect(wh)
    per_step = sorted(
        con.execute(
            "SELECT rank, flag, step FROM data_quality WHERE run_id = ? AND flag IN ?",
            [run_id, list(export.STEP_FLAGS)],
        ).fetchall()
    )
    con.close()
    _oom_on(monkeypatch, "FROM _data_quality_tables", scoped_too=False)
    out = tmp_path / "dq.pftrace"
    summary = export_run(wh, run_id, out)
    assert any(n.startswith("data-quality flags of the run and its ranks not drawn") for n in summary.notes)
    got = sorted(
        (s["args"]["rank"], s["args"]["flag"], s["args"].get("step")) for s in _slices(out, "data_quality")
    )
    assert got == per_step


def test_export_takes_the_memory_policy(tmp_path, monkeypatch):
    """The export's connection settings are the policy's (warehouse.memory), spilling into its own folder."""
    from tracehouse.reports.export.params import export_settings, spill_dir
    from tracehouse.warehouse.store import Warehouse

    monkeypatch.setenv("TRACEHOUSE_MEMORY_LIMIT", "900MB")
    wh = Warehouse(tmp_path)
    got = export_settings(wh)
    assert got["memory_limit"] == "900MB" and got["threads"] == "1"
    assert got["temp_directory"] == str(spill_dir(wh)) and got["max_temp_directory_size"]


def test_gpu_tracks_that_do_not_fit_fail_in_one_line_nothing_written(
    decode, tmp_path, monkeypatch, cli_runner
):
    from cli import main

    wh, run_id = decode

    def batches(con, sql, params):
        raise duckdb.OutOfMemoryException("Out of Memory Error: failed to pin block (test)")
        yield

    monkeypatch.setattr(scoped, "batches", batches)
    out = tmp_path / "none.pftrace"
    result = cli_runner.invoke(main, ["--warehouse", str(wh.root), "export", run_id, "-o", str(out)])
    assert result.exit_code == 1
    assert "did not fit DuckDB's memory limit" in result.output and "Traceback" not in result.output
    assert len(result.output.strip().splitlines()) == 1
    assert not list(tmp_path.iterdir())


def test_takeaways_that_do_not_fit_are_left_out_and_said(decode, tmp_path, monkeypatch):
    """The run report inside the export (its takeaways) reads views that are not stored, over the whole run: when
    it runs out of the export's memory the takeaways are not drawn and the file says so; the rest is written."""
    wh, run_id = decode
    monkeypatch.setattr(analysis, "is_derived", lambda *_: True)

    def report(con, run):
        raise duckdb.OutOfMemoryException("Out of Memory Error: could not allocate block (test)")

    monkeypatch.setattr(analysis, "build_run_report", report)
    out = tmp_path / "t.pftrace"
    summary = export_run(wh, run_id, out)
    assert any(n.startswith("the run report's takeaways not drawn: Out of Memory") for n in summary.notes)
    assert summary.counts["takeaways"] == 0 and summary.counts["gpu"] > 0
    assert not _slices(out, "takeaway") and _slices(out, "critical_path")

"""synth's ground truth on disk: plain ground_truth.json for ordinary runs, ground_truth.json.gz (gzip, the
same JSON, same bytes for the same seed) when it is large; one reader, synth.load_truth; ingest leaves the
.gz out of the run; `synth --target-size` progress on a terminal only (synth/progress.py)."""

from __future__ import annotations

import gzip
import io
import json

import pytest
from tracehouse.synth import load_truth, truth_path, write_scenario
from tracehouse.synth import truth as truth_module
from tracehouse.synth.progress import SizeProgress


def _write(folder, **kw):
    return write_scenario("serving-decode", folder, ranks=2, steps=3, layers=2, seed=3, **kw)


def test_ordinary_run_writes_plain_json_that_load_truth_reads(tmp_path):
    out = _write(tmp_path / "a")
    assert truth_path(out).name == "ground_truth.json" and not (out / "ground_truth.json.gz").exists()
    assert load_truth(out) == json.loads((out / "ground_truth.json").read_text())
    assert not list(out.glob(".*"))  # no partial or step-row files left behind


def test_large_truth_is_gzipped_with_the_same_content_and_deterministic(tmp_path, monkeypatch):
    plain = load_truth(_write(tmp_path / "plain"))
    monkeypatch.setattr(truth_module, "COMPRESS_OVER", 1000)  # every run is "large" now
    a, b = _write(tmp_path / "gz-a"), _write(tmp_path / "gz-b")
    assert truth_path(a).name == "ground_truth.json.gz" and not (a / "ground_truth.json").exists()
    assert load_truth(a) == plain
    assert json.loads(gzip.decompress((a / "ground_truth.json.gz").read_bytes())) == plain  # a plain gzip
    assert (a / "ground_truth.json.gz").read_bytes() == (b / "ground_truth.json.gz").read_bytes()
    assert not list(a.glob(".*"))


def test_rewriting_a_folder_leaves_only_this_runs_truth(tmp_path, monkeypatch):
    out = _write(tmp_path / "run")
    monkeypatch.setattr(truth_module, "COMPRESS_OVER", 1000)
    write_scenario("serving-decode", tmp_path / "run", ranks=2, steps=4, layers=2, seed=3)
    assert not (out / "ground_truth.json").exists()  # the old plain one is gone
    assert load_truth(out)["n_steps"] == 4  # the new one is the run's
    monkeypatch.setattr(truth_module, "COMPRESS_OVER", 10**12)
    _write(tmp_path / "run")
    assert not (out / "ground_truth.json.gz").exists() and load_truth(out)["n_steps"] == 3


def test_ingest_leaves_a_gzipped_truth_out_of_the_run(tmp_path, monkeypatch):
    from tracehouse.ingest.run import plan_runs

    monkeypatch.setattr(truth_module, "COMPRESS_OVER", 1000)
    out = _write(tmp_path / "run")
    [plan] = plan_runs([out])
    assert sorted(p.name for p in plan.files) == sorted(load_truth(out)["files"].values())
    assert plan.skipped == []  # not a trace, and not reported as a stray file either


def test_load_truth_of_a_folder_without_one_names_it(tmp_path):
    with pytest.raises(FileNotFoundError, match="no ground_truth.json or ground_truth.json.gz"):
        load_truth(tmp_path)


class Clock:
    def __init__(self):
        self.t = 100.0

    def __call__(self):
        return self.t


def test_size_progress_line_bytes_percent_eta():
    clock, stream = Clock(), io.StringIO()
    p = SizeProgress(stream=stream, interval=0.25, clock=clock)
    clock.t += 10
    p(50_000_000, 200_000_000)  # a quarter in 10 s: 30 s to go at that rate
    assert stream.getvalue().endswith("synth: 50 MB of 200 MB (25 %), ETA 30 s")
    clock.t += 0.1
    p(60_000_000, 200_000_000)  # within the interval: not redrawn
    assert "60 MB" not in stream.getvalue()
    clock.t += 1
    p(210_000_000, 200_000_000)  # past the target (the last step overshoots): 100 %, no ETA
    assert stream.getvalue().endswith("synth: 210 MB of 200 MB (100 %)")
    p.note("writing the ground truth")
    assert stream.getvalue().endswith("synth: 210 MB of 200 MB (100 %); writing the ground truth")
    p.done("; ground truth: ground_truth.json.gz")
    assert stream.getvalue().endswith(
        "synth: 210 MB of trace JSON in 11 s; ground truth: ground_truth.json.gz\n"
    )


def test_target_size_run_reports_progress_per_step(tmp_path):
    seen = []
    out = write_scenario(
        "serving-decode",
        tmp_path / "run",
        ranks=1,
        layers=2,
        target_size=400_000,
        progress=lambda written, target: seen.append((written, target)),
    )
    assert len(seen) == load_truth(out)["n_steps"] and {t for _, t in seen} == {400_000}
    stream = io.StringIO()
    write_scenario(
        "serving-decode",
        tmp_path / "run2",
        ranks=1,
        layers=2,
        target_size=400_000,
        progress=SizeProgress(stream=stream, interval=0.0),
    )
    drawn = stream.getvalue().split("\r\x1b[2K")
    assert drawn[-1].endswith("(100 %); writing the ground truth") and "%" in drawn[1]
    assert [w for w, _ in seen] == sorted(w for w, _ in seen) and seen[-1][0] >= 400_000 > seen[-2][0]


def test_synth_cli_is_quiet_when_stderr_is_not_a_terminal(tmp_path, cli_runner):
    from tracehouse import cli

    res = cli_runner.invoke(
        cli.main,
        ["synth", "serving-decode", "--ranks", "1", "--target-size", "300KB", "-o", str(tmp_path / "run")],
    )
    assert res.exit_code == 0, res.output
    assert res.stdout == f"{tmp_path / 'run'}\n" and "synth:" not in res.stderr


@pytest.mark.parametrize("size", ["10XB", "0", "-5MB", "infGB", "nanMB", "big"])
def test_synth_cli_refuses_a_bad_target_size_in_one_line(tmp_path, cli_runner, size):
    from tracehouse import cli

    res = cli_runner.invoke(
        cli.main, ["synth", "serving-decode", "--target-size", size, "-o", str(tmp_path / "run")]
    )
    assert res.exit_code == 2 and res.exception is None or isinstance(res.exception, SystemExit), res.output
    assert "Traceback" not in res.output and f"'{size}' is not a size like 500MB or 2GB" in res.output
    assert not (tmp_path / "run").exists()  # refused before anything is written

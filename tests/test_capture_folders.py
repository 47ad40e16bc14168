"""Capture traces found beside a profile without --capture (issue 38): our `capture_traces/`, SGLang's
`graph_capture_profile/` (`--enable-profile-cuda-graph`: <SGLANG_TORCH_PROFILER_DIR>/graph_capture_profile/
{runner}_bs_{bs}_rank{rank}.json.gz, no execution_details.json) and vLLM's `capture_traces/`
(`--profiler-config.capture_torch_profiler`: <torch_profiler_dir>/capture_traces/
graph_capture_rank_0.<ms>.pt.trace.json.gz, local rank 0 only, every shape's capture in one trace inside
`capture_{num_tokens}_{mode}` annotations; vllm/profiler/graph_capture.py, vllm/config/profiler.py).

A synthesized serving-decode run written with SGLang's layout (synth/scenario.py CAPTURE_LAYOUTS) is
ingested as a folder: every replayed kernel gets the launch site the simulation gave it, from the capture
traces, and ingest says on stderr that it found them; the same run without the folder has no capture site.
"""

from __future__ import annotations

import shutil
from collections import defaultdict

import pytest
from tracehouse.ingest.load import ingest_paths
from tracehouse.ingest.run import capture_folder, plan_runs
from tracehouse.synth import write_scenario
from tracehouse.synth.truth import load_truth
from tracehouse.warehouse.catalog import connect
from tracehouse.warehouse.store import Warehouse

SITES_SQL = """
SELECT k.rank, k.step, k.name, s.file, s.line, s.function, s.site_source, s.capture_file
FROM kernels k JOIN kernel_launch_site s USING (run_id, rank, kernel_id)
WHERE k.run_id = ? ORDER BY k.rank, k.step, k.stream, k.start_ns, k.kernel_id
"""


@pytest.fixture(scope="module")
def sglang_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("capture_folders")
    return write_scenario("serving-decode", root / "run", ranks=2, steps=3, layers=2, capture_layout="sglang")


def test_sglang_capture_folder_is_found_and_attributes(sglang_run, tmp_path, capsys):
    assert (sglang_run / "graph_capture_profile" / "DecodeCudaGraphRunner_bs_32_rank1.json.gz").is_file()
    assert not (sglang_run / "capture_traces").exists()
    assert capture_folder(sglang_run) == sglang_run / "graph_capture_profile"
    plans = plan_runs([sglang_run])
    assert [p.capture_dir for p in plans] == [sglang_run / "graph_capture_profile"]
    truth = load_truth(sglang_run)
    wh = Warehouse(tmp_path / "wh")
    outcomes = ingest_paths(wh, [sglang_run])
    assert len(outcomes) == 1 and outcomes[0].run_id and not outcomes[0].problems
    assert "capture traces found in graph_capture_profile/" in capsys.readouterr().err
    con = connect(wh)
    got = defaultdict(list)
    for r in con.execute(SITES_SQL, [outcomes[0].run_id]).fetchall():
        got[(r[0], r[1])].append(r)
    from_capture = 0
    for step in truth["steps"]:
        expected = truth["launch_site_templates"][step["launch_sites"]]
        ours = got[(step["rank"], step["step"])]
        assert [(e[0], e[1], e[2], e[3]) for e in expected] == [(r[2], r[3], r[4], r[5]) for r in ours]
        from_capture += sum(r[6] == "capture" for r in ours)
    assert from_capture > 0
    assert {r[7] for rs in got.values() for r in rs if r[6] == "capture"} <= {
        f"DecodeCudaGraphRunner_bs_{bs}_rank{rank}.json.gz" for bs in (16, 32) for rank in (0, 1)
    }


def test_without_a_capture_folder_nothing_is_found(sglang_run, tmp_path, capsys):
    run_dir = tmp_path / "run"
    shutil.copytree(sglang_run, run_dir)
    shutil.rmtree(run_dir / "graph_capture_profile")
    (run_dir / "graph_capture_profile").mkdir()  # an empty folder is not a capture
    assert capture_folder(run_dir) is None
    assert [p.capture_dir for p in plan_runs([run_dir])] == [None]
    wh = Warehouse(tmp_path / "wh")
    outcomes = ingest_paths(wh, [run_dir])
    assert "capture traces found" not in capsys.readouterr().err
    sql = "SELECT count(*) FROM kernel_launch_site WHERE run_id = ? AND site_source = 'capture'"
    assert connect(wh).execute(sql, [outcomes[0].run_id]).fetchone()[0] == 0


def test_vllm_capture_folder_one_trace_of_rank_0_attributes_every_rank(tmp_path, capsys):
    """vLLM's layout: one capture trace of rank 0 holding both batch sizes' captures (capture_16_FULL,
    capture_32_FULL), no execution_details.json. Found beside the profile; every replayed kernel of both
    ranks gets the simulated launch site from it, from the capture of the replay's batch size (32)."""
    from tracehouse.synth.scenario import VLLM_CAPTURE_FILE

    run = write_scenario(
        "serving-decode", tmp_path / "run", ranks=2, steps=3, layers=2, capture_layout="vllm"
    )
    assert [p.name for p in (run / "capture_traces").iterdir()] == [VLLM_CAPTURE_FILE]
    assert capture_folder(run) == run / "capture_traces"
    truth = load_truth(run)
    wh = Warehouse(tmp_path / "wh")
    outcomes = ingest_paths(wh, [run])
    assert len(outcomes) == 1 and outcomes[0].run_id and not outcomes[0].problems
    assert "capture traces found in capture_traces/" in capsys.readouterr().err
    con = connect(wh)
    rows = con.execute(SITES_SQL, [outcomes[0].run_id]).fetchall()
    got = defaultdict(list)
    for r in rows:
        got[(r[0], r[1])].append(r)
    for step in truth["steps"]:
        expected = truth["launch_site_templates"][step["launch_sites"]]
        ours = got[(step["rank"], step["step"])]
        assert [(e[0], e[1], e[2], e[3]) for e in expected] == [(r[2], r[3], r[4], r[5]) for r in ours]
    captured = [r for r in rows if r[6] == "capture"]
    assert {r[0] for r in captured} == {0, 1}  # rank 1 from rank 0's capture: vLLM writes no other
    assert {r[7] for r in captured} == {VLLM_CAPTURE_FILE}
    # the file holds the captures of batch sizes 16 then 32 (windows 0, 1): the replays (bs 32) use the second
    assert truth["batch_size"] == 32
    windows = con.execute(
        "SELECT DISTINCT capture_window FROM kernel_sites WHERE run_id = ? AND source = 'capture'",
        [outcomes[0].run_id],
    ).fetchall()
    assert windows == [(1,)]

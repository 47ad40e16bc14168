"""Per-request cost: request_step_cost and request_cost, from request annotations and from a requests file.

Synthesized ground truth (synth/situations/serving_requests.py: the split computed from the same numbers
with fractions), the split's conservation against `steps`, the requests file's reader and its errors, and the
real traces (none names its requests: the views are empty there, and the report says what to give)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import query_rows

REPO = Path(__file__).resolve().parent.parent

STEP_COLS = (
    "step",
    "request_id",
    "phase",
    "tokens",
    "kv_tokens",
    "requests_in_step",
    "attention_ns",
    "other_ns",
    "gpu_ns",
    "step_gpu_ns",
    "attention_split",
    "other_split",
)
COST_COLS = (
    "request_id",
    "steps",
    "prefill_steps",
    "decode_steps",
    "first_step",
    "last_step",
    "prefill_tokens",
    "decode_tokens",
    "max_kv_tokens",
    "prefill_gpu_ns",
    "decode_gpu_ns",
    "unknown_gpu_ns",
    "gpu_ns",
    "attention_gpu_ns",
    "decode_gpu_ns_per_token",
)


def _cli(*args: str, warehouse: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(REPO / "cli.py"), "--warehouse", str(warehouse), *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=600,
        check=False,
    )


@pytest.fixture(scope="module")
def requests_wh(tmp_path_factory):
    """The annotated situation ingested as is; the file situation ingested twice over: without its requests
    file (run `bare`), and in another warehouse with --requests (run `file`)."""
    from tracehouse.ingest.load import ingest_paths
    from tracehouse.synth.situations import write_situation
    from tracehouse.warehouse.catalog import connect
    from tracehouse.warehouse.store import Warehouse

    root = tmp_path_factory.mktemp("requests")
    wh = Warehouse(root / "wh")
    runs, expect, dirs = {}, {}, {}
    for name in ("serving-requests", "serving-requests-file"):
        out = write_situation(name, root / name)
        [outcome] = ingest_paths(wh, [out], analyse=False)
        assert not outcome.problems, outcome.problems
        runs[name], dirs[name] = outcome.run_id, out
        expect[name] = json.loads((out / "ground_truth.json").read_text())["expect"]
    file_dir = dirs["serving-requests-file"]
    done = _cli(
        "ingest",
        str(file_dir),
        "--no-analyses",
        "--requests",
        str(file_dir / expect["serving-requests-file"]["requests_file"]),
        warehouse=root / "wh-file",
    )
    assert done.returncode == 0, done.stderr
    assert "requests of" in done.stderr and "11 row(s)" in done.stderr
    con = connect(wh)
    file_con = connect(Warehouse(root / "wh-file"))
    yield {"con": con, "file_con": file_con, "runs": runs, "expect": expect, "root": root, "dirs": dirs}
    con.close()
    file_con.close()


def _step_rows(con, run_id):
    return query_rows(
        con,
        f"SELECT {', '.join(STEP_COLS)}, source FROM request_step_cost WHERE run_id = ? "
        "ORDER BY step, request_id",
        [run_id],
    )


def _cost_rows(con, run_id):
    return query_rows(
        con,
        f"SELECT {', '.join(COST_COLS)}, ranks FROM request_cost WHERE run_id = ? ORDER BY request_id",
        [run_id],
    )


def _same(rows, truth, cols):
    assert len(rows) == len(truth)
    for row, want in zip(rows, sorted(truth, key=lambda r: (r.get("step", 0), r["request_id"]))):
        got = {c: row[c] for c in cols}
        exp = {c: want[c] for c in cols}
        if exp.get("decode_gpu_ns_per_token") is not None:
            assert got.pop("decode_gpu_ns_per_token") == pytest.approx(
                exp.pop("decode_gpu_ns_per_token"), rel=1e-12
            )
        assert got == exp


def test_annotated_requests_split_equals_truth(requests_wh):
    run = requests_wh["runs"]["serving-requests"]
    truth = requests_wh["expect"]["serving-requests"]
    rows = _step_rows(requests_wh["con"], run)
    _same(rows, truth["request_step_cost"], STEP_COLS)
    assert {r["source"] for r in rows} == {"annotation"}


def test_request_cost_equals_truth(requests_wh):
    run = requests_wh["runs"]["serving-requests"]
    rows = _cost_rows(requests_wh["con"], run)
    _same(rows, requests_wh["expect"]["serving-requests"]["request_cost"], COST_COLS)
    assert {r["ranks"] for r in rows} == {1}


def test_shares_add_up_to_each_steps_gpu_time(requests_wh):
    """Shared time is split, never charged in full to each request: a step's shares sum to its GPU time, which
    is the sum of the step's per-category time in `steps`."""
    con, run = requests_wh["con"], requests_wh["runs"]["serving-requests"]
    rows = query_rows(
        con,
        """
        WITH shares AS (SELECT rank, step, sum(gpu_ns) AS charged, sum(attention_ns) AS attention,
                               any_value(step_gpu_ns) AS step_gpu_ns
                        FROM request_step_cost WHERE run_id = ? GROUP BY rank, step)
        SELECT s.step, x.charged, x.step_gpu_ns, x.attention, s.attention_ns,
               s.gemm_ns + s.attention_ns + s.moe_ns + s.communication_ns + s.norm_ns + s.activation_ns + s.rope_ns
               + s.quantize_ns + s.sampling_ns + s.elementwise_ns + s.reduction_ns + s.memory_ns
               + s.convolution_ns + s.embedding_ns + s.other_ns AS categories_ns
        FROM steps AS s JOIN shares AS x USING (rank, step) WHERE s.run_id = ? ORDER BY s.step""",
        [run, run],
    )
    assert len(rows) == 5
    for r in rows:
        assert r["charged"] == r["step_gpu_ns"] == r["categories_ns"]
        assert r["attention"] == r["attention_ns"]


def test_requests_file_gives_the_same_costs(requests_wh):
    con, run = requests_wh["file_con"], requests_wh["runs"]["serving-requests-file"]
    truth = requests_wh["expect"]["serving-requests-file"]
    rows = _step_rows(con, run)
    _same(rows, truth["request_step_cost"], STEP_COLS)
    assert {r["source"] for r in rows} == {"file"}
    _same(_cost_rows(con, run), truth["request_cost"], COST_COLS)


def test_without_requests_nothing_is_guessed(requests_wh):
    """The same trace ingested without its requests file names no request: the views are empty."""
    con, run = requests_wh["con"], requests_wh["runs"]["serving-requests-file"]
    assert _step_rows(con, run) == []
    assert _cost_rows(con, run) == []


def test_requests_replaced_on_reingest(requests_wh, tmp_path):
    """Ingesting the stored run again with another requests file replaces its requests (and says so)."""
    root, d = requests_wh["root"], requests_wh["dirs"]["serving-requests-file"]
    (tmp_path / "one.jsonl").write_text(
        '{"step": 0, "request_id": "solo", "tokens": 160}\n{"step": 99, "request_id": "ghost", "tokens": 1}\n'
    )
    done = _cli(
        "ingest",
        str(d),
        "--no-analyses",
        "--requests",
        str(tmp_path / "one.jsonl"),
        warehouse=root / "wh-file",
    )
    assert done.returncode == 0, done.stderr
    assert "replaced by" in done.stderr
    assert "whose step the run does not have: 1" in done.stderr
    out = _cli(
        "sql",
        "--format",
        "json",
        "SELECT request_id, gpu_ns, prefill_gpu_ns FROM request_cost",
        warehouse=root / "wh-file",
    )
    assert out.returncode == 0, out.stderr
    rows = json.loads(out.stdout)
    step0 = requests_wh["expect"]["serving-requests-file"]["request_step_cost"][0]["step_gpu_ns"]
    assert rows == [{"request_id": "solo", "gpu_ns": step0, "prefill_gpu_ns": step0}]
    # put the situation's own file back for the other tests of the module
    done = _cli(
        "ingest",
        str(d),
        "--no-analyses",
        "--requests",
        str(d / requests_wh["expect"]["serving-requests-file"]["requests_file"]),
        warehouse=root / "wh-file",
    )
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize(
    "text, suffix, message",
    [
        ("step,request_id,tokens\n0,a,x\n", ".csv", "line 2: tokens 'x' is not a whole number"),
        ("step,tokens\n0,5\n", ".csv", "line 2: no request_id"),
        ("step,request_id,phase\n0,a,warmup\n", ".csv", "phase 'warmup' is not prefill or decode"),
        ("step,request_id\n0,a\n0,a\n", ".csv", "line 3: request 'a' in step 0 again (first at line 2)"),
        ('{"step": 0, "request_id": "a"}\n[1]\n', ".jsonl", "line 2: not a JSON object"),
        ('{"step": -1, "request_id": "a"}\n', ".jsonl", "step -1 is below 0"),
        ('{"step": 1.5, "request_id": "a"}', ".json", "not a JSON list of objects"),
        ('[{"step": 1.5, "request_id": "a"}]', ".json", "item 1: step 1.5 is not a whole number"),
        ("", ".csv", "no rows"),
        ("step,request_id\n0,a\n", ".txt", "unknown requests file type '.txt'"),
    ],
)
def test_bad_requests_file_is_one_clear_error(tmp_path, text, suffix, message):
    from tracehouse.ingest.requests import read_requests

    from tracehouse.errors import TracehouseError

    path = tmp_path / f"r{suffix}"
    path.write_text(text)
    with pytest.raises(TracehouseError) as e:
        read_requests(path)
    assert message in str(e.value)


def test_bad_requests_file_stops_the_ingest_before_any_work(requests_wh, tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("step,request_id,tokens\n0,a,many\n")
    wh = tmp_path / "wh"
    done = _cli("ingest", str(requests_wh["dirs"]["serving-requests"]), "--requests", str(bad), warehouse=wh)
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    assert "line 2: tokens 'many' is not a whole number" in done.stderr
    assert not (wh / "tables" / "runs").exists() or not any(
        (wh / "tables" / "runs").glob("run_id=*/run.parquet")
    )


def test_requests_for_two_runs_is_refused(requests_wh, tmp_path):
    good = tmp_path / "r.csv"
    good.write_text("step,request_id\n0,a\n")
    d = requests_wh["dirs"]
    done = _cli(
        "ingest",
        str(d["serving-requests"] / "sglang-TP-0-requests.trace.json.gz"),
        str(d["serving-requests-file"]),
        "--requests",
        str(good),
        warehouse=tmp_path / "wh",
    )
    assert done.returncode != 0
    assert "--requests describes one run" in done.stderr


def test_reader_reads_every_format(tmp_path):
    from tracehouse.ingest.requests import read_requests

    (tmp_path / "a.csv").write_text(
        "step,request_id,tokens,kv_tokens,phase,rank,extra\n3,r1,1,90,Decode,,x\n3,r1,1,91,,1,\n"
    )
    (tmp_path / "a.jsonl").write_text(
        '{"step": 3, "request_id": "r1", "tokens": 1, "kv_tokens": 90, '
        '"phase": "decode"}\n\n{"step": 3, "request_id": "r1", "tokens": 1, '
        '"kv_tokens": 91, "rank": 1}\n'
    )
    (tmp_path / "a.json").write_text(
        '[{"step": 3, "request_id": "r1", "tokens": 1, "kv_tokens": 90, '
        '"phase": "decode"}, {"step": 3, "request_id": "r1", "tokens": 1, '
        '"kv_tokens": 91, "rank": 1}]'
    )
    want = [
        {"rank": None, "step": 3, "request_id": "r1", "tokens": 1, "kv_tokens": 90, "phase": "decode"},
        {"rank": 1, "step": 3, "request_id": "r1", "tokens": 1, "kv_tokens": 91, "phase": None},
    ]
    for name in ("a.csv", "a.jsonl", "a.json"):
        rows = read_requests(tmp_path / name)
        assert [{k: v for k, v in r.items() if k != "line"} for r in rows] == want, name


def test_report_shows_request_cost_or_says_what_to_give(requests_wh):
    from tracehouse.reports.charts import fmt_ns

    root, runs = requests_wh["root"], requests_wh["runs"]
    done = _cli("report", "--run", runs["serving-requests"], warehouse=root / "wh")
    assert done.returncode == 0, done.stderr
    section = done.stdout.split("Per-request GPU cost", 1)[1].split("\n## ", 1)[0]
    truth = {r["request_id"]: r for r in requests_wh["expect"]["serving-requests"]["request_cost"]}
    assert "4 requests" in section and "requests from annotation" in section
    for rid, want in truth.items():
        [line] = [ln for ln in section.splitlines() if ln.startswith(f"| `{rid}`")]
        cells = [c.strip() for c in line.strip("|").split("|")]
        assert cells[1:5] == [
            str(want["steps"]),
            str(want["prefill_tokens"]),
            str(want["decode_tokens"]),
            str(want["max_kv_tokens"]),
        ]
        assert cells[5:7] == [fmt_ns(want["prefill_gpu_ns"]), fmt_ns(want["decode_gpu_ns"])]
    bare = _cli("report", "--run", runs["serving-requests-file"], warehouse=root / "wh")
    assert bare.returncode == 0, bare.stderr
    assert "Per-request cost: the trace names no requests" in bare.stdout
    assert "--requests requests.csv" in bare.stdout


def test_diff_compares_request_medians(requests_wh, tmp_path):
    d, expect = requests_wh["dirs"], requests_wh["expect"]
    wh = tmp_path / "wh"
    a = _cli("ingest", str(d["serving-requests"]), "--no-analyses", warehouse=wh)
    b = _cli(
        "ingest",
        str(d["serving-requests-file"]),
        "--no-analyses",
        "--requests",
        str(d["serving-requests-file"] / expect["serving-requests-file"]["requests_file"]),
        warehouse=wh,
    )
    assert a.returncode == 0 and b.returncode == 0, a.stderr + b.stderr
    base, target = a.stdout.split()[0], b.stdout.split()[0]
    out = _cli("diff", base, target, "--format", "json", warehouse=wh)
    assert out.returncode == 0, out.stderr
    rows = {r["figure"]: r for r in json.loads(out.stdout)["request_cost"]}
    costs = sorted(
        r["prefill_gpu_ns"] for r in expect["serving-requests"]["request_cost"] if r["prefill_steps"]
    )
    assert rows["requests"]["base"] == rows["requests"]["target"] == 4
    assert rows["median_prefill_gpu_ns"]["base"] == costs[(len(costs) - 1) // 2]  # the lower middle one
    assert rows["median_prefill_gpu_ns"]["delta"] == 0


REAL_DECODE = "inference/sglang_decode/sglang_Qwen3-8B_decode.json.gz"  # one step[DECODE bs=32]


def test_real_traces_name_no_requests_and_a_file_splits_them(tmp_path):
    """No real trace names its requests: the views are empty (nothing guessed). Given a requests file with the
    annotation's 32 decode requests, each is charged 1/32 of the step's GPU time (whole ns, the leftover ns to
    the first ids), and the shares add up to the step's GPU time."""
    from tests.conftest import TRACES, require_shared

    require_shared()
    from tracehouse.ingest.load import ingest_paths
    from tracehouse.ingest.requests import attach_requests, read_requests
    from tracehouse.warehouse.catalog import connect
    from tracehouse.warehouse.store import Warehouse

    wh = Warehouse(tmp_path / "wh")
    [outcome] = ingest_paths(wh, [TRACES / REAL_DECODE], analyse=False)
    run = outcome.run_id
    con = connect(wh)
    try:
        assert query_rows(con, "SELECT * FROM request_cost WHERE run_id = ?", [run]) == []
        [step] = query_rows(con, "SELECT step, batch_size, phase FROM steps WHERE run_id = ?", [run])
        assert (step["batch_size"], step["phase"]) == (32, "decode")
        [(gpu_ns,)] = con.execute(
            "SELECT sum(dur_ns) FROM kernels WHERE run_id = ? AND step = ?", [run, step["step"]]
        ).fetchall()
    finally:
        con.close()
    path = tmp_path / "requests.csv"
    path.write_text("step,request_id,tokens\n" + "".join(f"{step['step']},r{i:02d},1\n" for i in range(32)))
    assert attach_requests(wh, run, read_requests(path)) == {"rows": 32, "unmatched": 0}
    con = connect(wh)
    try:
        rows = query_rows(
            con,
            "SELECT request_id, gpu_ns, decode_gpu_ns, decode_tokens FROM request_cost "
            "WHERE run_id = ? ORDER BY request_id",
            [run],
        )
        parts = query_rows(
            con,
            "SELECT attention_ns, other_ns, attention_split FROM request_step_cost WHERE run_id = ?",
            [run],
        )
        [(attention,)] = con.execute("SELECT attention_ns FROM steps WHERE run_id = ?", [run]).fetchall()
    finally:
        con.close()
    assert len(rows) == 32 and sum(r["gpu_ns"] for r in rows) == gpu_ns
    assert all(r["decode_gpu_ns"] == r["gpu_ns"] and r["decode_tokens"] == 1 for r in rows)
    # attention and the rest are split separately: each part is one of two whole-ns values
    assert attention > 0 and {p["attention_split"] for p in parts} == {"tokens"}
    assert {p["attention_ns"] for p in parts} <= {attention // 32, attention // 32 + 1}
    other = gpu_ns - attention
    assert {p["other_ns"] for p in parts} <= {other // 32, other // 32 + 1}

"""Nsight Systems SQLite exports (ingest/nsys.py): the synthesized export's ground truth (synth/nsys.py) as
each export schema writes it (3.25, 3.13, 2.9, no metadata table), bad input, and the five real exports
(Nsight Systems 2022.1, 2024.5, 2026.2) checked against independent queries over the SQLite files."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from conftest import TRACES, query_rows, require_shared
from tracehouse.warehouse.catalog import connect
from tracehouse.warehouse.derived import derive
from tracehouse.warehouse.store import Warehouse
from warehouses import built_once

NSYS = ["h100_2gpu_1s.sqlite", "mfu_2gpu_before.sqlite", "mfu_2gpu_after.sqlite"]
OLDER = ["cloverleaf_a100_nsys2024.5.sqlite", "con_kernel_gtx1060_nsys2022.1.sqlite"]
SCHEMAS = ["3.25", "3.13", "2.9", "none"]


def _ingest(wh, paths):
    from tracehouse.ingest.load import ingest_paths

    return ingest_paths(wh, [Path(p) for p in paths], analyse=False)


@pytest.fixture(scope="module", params=SCHEMAS)
def synth_run(tmp_path_factory, request):
    from tracehouse.synth.nsys import write_export

    root = tmp_path_factory.mktemp("nsys-synth")
    truth = write_export(root / "synth.sqlite", schema=request.param)
    wh = Warehouse(root / "wh")
    [outcome] = _ingest(wh, [root / "synth.sqlite"])
    assert not outcome.problems, outcome.problems
    return connect(wh), outcome, truth


def test_synth_counts_times_and_linking(synth_run):
    con, outcome, truth = synth_run
    rows = query_rows(
        con,
        "SELECT rank, device, kind, count(*) AS n, sum(dur_ns) AS ns, "
        "count(*) FILTER (WHERE linked) AS linked FROM kernels WHERE run_id = ? GROUP BY ALL",
        [outcome.run_id],
    )
    assert {r["rank"] for r in rows} == {t["rank"] for t in truth["ranks"]}
    for t in truth["ranks"]:
        mine = [r for r in rows if r["rank"] == t["rank"]]
        assert sum(r["n"] for r in mine if r["kind"] == "kernel") == t["kernels"]
        assert sum(r["n"] for r in mine if r["kind"] == "memcpy") == t["memcpy"]
        assert sum(r["n"] for r in mine if r["kind"] == "memset") == t["memset"]
        assert {r["device"]: r["ns"] for r in mine if r["kind"] == "kernel"} == {
            int(d): ns for d, ns in t["kernel_ns_by_device"].items()
        }
        assert sum(r["linked"] for r in mine) == t["linked"]
    streams = query_rows(
        con,
        "SELECT DISTINCT rank, device, stream FROM kernels WHERE run_id = ? ORDER BY ALL",
        [outcome.run_id],
    )
    for t in truth["ranks"]:
        assert [(r["device"], r["stream"]) for r in streams if r["rank"] == t["rank"]] == t["streams"]
    busy = query_rows(
        con,
        "SELECT rank, device, busy_ns FROM gpu_timeline WHERE run_id = ? AND step IS NULL "
        "AND variant = 'exact'",
        [outcome.run_id],
    )
    assert {(r["rank"], r["device"]): r["busy_ns"] for r in busy} == {
        (t["rank"], int(d)): ns for t in truth["ranks"] for d, ns in t["busy_ns_by_device"].items()
    }


def test_synth_graph_replays_host_ops_and_steps(synth_run):
    con, outcome, truth = synth_run
    run = outcome.run_id
    graph = query_rows(
        con,
        "SELECT rank, count(*) AS n, count(DISTINCT correlation) AS corr FROM kernels "
        "WHERE run_id = ? AND launch_call = 'cudaGraphLaunch' GROUP BY rank",
        [run],
    )
    assert {r["rank"]: r["n"] for r in graph} == {
        t["rank"]: t["graph_replayed"] for t in truth["ranks"] if t["graph_replayed"]
    }
    assert all(r["corr"] == 2 for r in graph)  # one graph launch per step replays three kernels
    # the GEMM launched inside aten::linear > aten::addmm has the inner op as its host op
    ops = query_rows(
        con,
        "SELECT k.rank, o.name, o.depth, p.name AS parent, p.sequence_number, p.input_dims "
        "FROM kernels k JOIN cpu_ops o ON o.run_id = k.run_id AND o.rank = k.rank AND o.op_id = k.cpu_op_id "
        "JOIN cpu_ops p ON p.run_id = o.run_id AND p.rank = o.rank AND p.op_id = o.parent_op_id "
        "WHERE k.run_id = ? AND k.name LIKE 'nvjet%' ORDER BY k.rank, k.start_ns",
        [run],
    )
    assert [(r["rank"], r["name"], r["parent"]) for r in ops] == [
        (r, "aten::addmm", "aten::linear") for r in (0, 0, 1, 1)
    ]
    assert [r["sequence_number"] for r in ops] == [10, 11, 10, 11]
    assert ops[0]["input_dims"] == "[[8, 4096], [4096, 4096], [4096]]"
    assert all(r["depth"] == 2 for r in ops)  # ProfilerStep#N > aten::linear > aten::addmm
    steps = query_rows(
        con, "SELECT rank, name, start_ns, end_ns FROM step_spans WHERE run_id = ? ORDER BY rank, step", [run]
    )
    for t in truth["ranks"]:
        mine = [{k: r[k] for k in ("name", "start_ns", "end_ns")} for r in steps if r["rank"] == t["rank"]]
        assert mine == (
            t["steps"]
            or [{"name": "whole trace", "start_ns": mine[0]["start_ns"], "end_ns": mine[0]["end_ns"]}]
        )
    cats = query_rows(
        con, "SELECT rank, cat, count(*) AS n FROM cpu_ops WHERE run_id = ? GROUP BY ALL", [run]
    )
    by = {(r["rank"], r["cat"]): r["n"] for r in cats}
    for t in truth["ranks"]:
        assert by.get((t["rank"], "cpu_op"), 0) == t["cpu_ops"]
        assert by.get((t["rank"], "user_annotation"), 0) == t["annotations"]
        assert by.get((t["rank"], "cuda_driver"), 0) == t["driver_calls"]
        assert (
            by.get((t["rank"], "cuda_runtime"), 0) + by.get((t["rank"], "cuda_driver"), 0)
            == t["runtime_calls"]
        )
    names = {
        r["name"]
        for r in query_rows(
            con, "SELECT DISTINCT name FROM cpu_ops WHERE run_id = ? AND cat = 'cuda_runtime'", [run]
        )
    }
    assert "cudaLaunchKernel" in names and not any("_v" in n for n in names)  # the API version suffix is cut


def test_synth_waits_metadata_and_warnings(synth_run):
    con, outcome, truth = synth_run
    run = outcome.run_id
    waits = query_rows(
        con,
        "SELECT rank, stream, wait_on_stream, wait_on_event_corr FROM cpu_ops WHERE run_id = ? "
        "AND cat = 'cuda_sync' AND name = 'Stream Wait Event' ORDER BY rank, start_ns",
        [run],
    )
    assert waits == [{"rank": t["rank"], **w} for t in truth["ranks"] for w in t["waits"]]
    edges = query_rows(
        con, "SELECT count(*) AS n FROM _critical_path_pred WHERE run_id = ? AND edge = 'event_wait'", [run]
    )
    assert edges[0]["n"] > 0  # the recorded stream pair reaches the critical path
    [row] = query_rows(
        con,
        "SELECT hardware, base_time_ns, trace_start_ns, n_ranks, capture_mode, warnings, framework FROM runs "
        "WHERE run_id = ?",
        [run],
    )
    assert row["framework"] == "pytorch"  # its NVTX ranges are PyTorch's operators (aten::linear, ...)
    # 2.9 / none: a laptop's display adapters (no SM, cuDevice 0) are listed before the GPUs; not devices
    assert row["hardware"] == truth["hardware"]
    assert row["base_time_ns"] == truth["base_time_ns"]
    assert row["trace_start_ns"] == truth["trace_start_ns"]
    assert row["n_ranks"] == len(truth["ranks"])
    assert row["capture_mode"] == "mixed"
    assert dict(row["warnings"])["NVTX ranges without an end skipped"] == sum(
        t["open_ranges"] for t in truth["ranks"]
    )
    flags = query_rows(con, "SELECT rank, flag, message FROM data_quality WHERE run_id = ?", [run])
    assert any(
        f["flag"] == "no_python_stacks" and "Nsight Systems records none" in f["message"] for f in flags
    )
    assert {f["rank"] for f in flags if f["flag"] == "nsys_no_host_ops"} == {
        t["rank"] for t in truth["ranks"] if t["cpu_ops"] == 0
    }


# ---- bad input: one line, exit 1, nothing stored ---------------------------------------------------
def _bad_inputs(root: Path) -> dict[str, Path]:
    from tracehouse.synth.nsys import write_export, write_no_gpu_export

    good = root / "good.sqlite"
    write_export(good)
    data = good.read_bytes()
    out = {}
    (out.setdefault("truncated", root / "truncated.sqlite")).write_bytes(data[: len(data) // 2])
    # the same size, every page after the schema's overwritten: SQLite opens it and cannot read its tables
    page = int.from_bytes(data[16:18], "big")
    (out.setdefault("damaged", root / "damaged.sqlite")).write_bytes(
        data[:page] + b"\x0d" * (len(data) - page)
    )
    plain = out.setdefault("plain", root / "plain.sqlite")
    with sqlite3.connect(plain) as con:
        con.execute("CREATE TABLE t (x INTEGER)")
    nvprof = out.setdefault("nvprof", root / "nvprof.sqlite")  # CUPTI tables, strings in StringTable
    with sqlite3.connect(nvprof) as con:
        con.execute("CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER, end INTEGER, name INTEGER)")
        con.execute("CREATE TABLE StringTable (_id_ INTEGER, value TEXT)")
    write_no_gpu_export(out.setdefault("no_gpu", root / "no_gpu.sqlite"))
    write_no_gpu_export(out.setdefault("no_gpu_2.9", root / "no_gpu_29.sqlite"), schema="2.9")
    (out.setdefault("report", root / "run.nsys-rep")).write_bytes(b"\x00NSYS binary report")
    (out.setdefault("garbage", root / "garbage.sqlite")).write_bytes(b"SQLite format 3\x00" + b"\xff" * 4000)
    return out


@pytest.mark.parametrize(
    "case, words",
    [
        ("truncated", "truncated SQLite database"),
        ("damaged", "damaged SQLite database"),
        ("plain", "not an Nsight Systems export"),
        ("nvprof", "not an Nsight Systems export"),
        ("no_gpu", "no GPU activity in this export: CUDA tracing was off"),
        ("no_gpu_2.9", "no GPU activity in this export: CUDA tracing was off"),
        ("report", "nsys export --type sqlite"),
        ("garbage", "SQLite database"),
    ],
)
def test_bad_input_one_line_nothing_left(tmp_path, cli_runner, case, words):
    from tracehouse import cli

    path = _bad_inputs(tmp_path)[case]
    wh = tmp_path / "wh"
    result = cli_runner.invoke(cli.main, ["--warehouse", str(wh), "ingest", str(path)])
    assert result.exit_code == 1, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and words in lines[0], result.output
    assert "Traceback" not in result.output
    runs = wh / "runs"
    assert not runs.exists() or not any(runs.rglob("*.parquet"))
    staging = [p for p in wh.rglob("*") if "staging" in p.name]
    assert not any(any(p.iterdir()) for p in staging if p.is_dir())


def test_nsys_folder_and_mixed_run(tmp_path):
    """A folder of exports of one session is one run (ranks in file order); an export beside Kineto traces
    is a run of its own (its own session), or with --one-run skipped, with a warning, the PyTorch traces
    being the run."""
    from tracehouse.synth.nsys import write_export

    folder = tmp_path / "ranks"
    write_export(folder / "a.sqlite")
    write_export(folder / "b.sqlite")
    wh = Warehouse(tmp_path / "wh")
    [outcome] = _ingest(wh, [folder])
    assert not outcome.problems
    # the two files are byte-identical: the same content is the same run's files, ranks 0..5
    ranks = query_rows(
        connect(wh), "SELECT DISTINCT rank FROM kernels WHERE run_id = ? ORDER BY rank", [outcome.run_id]
    )
    assert [r["rank"] for r in ranks] == list(range(6))
    from tracehouse.synth.situations import write_situation

    kineto = write_situation("single-step", tmp_path / "k")
    write_export(kineto / "beside.sqlite")
    from tracehouse.ingest.load import ingest_paths

    own = ingest_paths(wh, [kineto], analyse=False)
    n_ranks = [
        query_rows(connect(wh), "SELECT n_ranks FROM runs WHERE run_id = ?", [o.run_id])[0]["n_ranks"]
        for o in own
    ]
    assert len(own) == 2 and sorted(n_ranks) == [1, 3] and not any(o.problems for o in own)
    old = Warehouse(tmp_path / "one-run")  # the same Kineto run: a fresh warehouse stores it again
    [mixed] = ingest_paths(old, [kineto], analyse=False, one_run=True)
    assert mixed.run_id and not mixed.problems
    assert any("Nsight Systems files beside" in k for k in mixed.warnings)
    runs = query_rows(connect(old), "SELECT n_ranks FROM runs WHERE run_id = ?", [mixed.run_id])
    assert runs == [{"n_ranks": 1}]


# ---- the real exports ----------------------------------------------------------------------------
def independent(path: Path) -> dict:
    """Figures straight from the SQLite file, with no tracehouse code."""
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    out = {
        "kernels": {},
        "kernel_ns": {},
        "memcpy": con.execute("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_MEMCPY").fetchone()[0],
        "memset": con.execute("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_MEMSET").fetchone()[0],
        "busy": {},
    }
    for device, n, ns in con.execute(
        "SELECT deviceId, count(*), sum(end - start) FROM CUPTI_ACTIVITY_KIND_KERNEL GROUP BY 1"
    ):
        out["kernels"][device], out["kernel_ns"][device] = n, ns
    spans: dict[int, list] = {}
    for table in ("KERNEL", "MEMCPY", "MEMSET"):
        for device, s, e in con.execute(f"SELECT deviceId, start, end FROM CUPTI_ACTIVITY_KIND_{table}"):
            spans.setdefault(device, []).append((s, e))
    for device, iv in spans.items():
        total, reach = 0, None
        for s, e in sorted(iv):
            if reach is None or s >= reach:
                total, reach = total + e - s, e
            elif e > reach:
                total, reach = total + e - reach, e
        out["busy"][device] = total
    # activities whose runtime call (same process, same correlation) is in the export
    out["with_call"] = sum(
        con.execute(
            f"SELECT count(*) FROM CUPTI_ACTIVITY_KIND_{t} a WHERE EXISTS (SELECT 1 FROM CUPTI_ACTIVITY_KIND_RUNTIME r "
            "WHERE r.correlationId = a.correlationId AND (r.globalTid >> 24) = (a.globalPid >> 24))"
        ).fetchone()[0]
        for t in ("KERNEL", "MEMCPY", "MEMSET")
    )
    con.close()
    return out


@pytest.fixture(scope="module")
def real_nsys(tmp_path_factory):
    """(the real Nsight exports' warehouse, derived, built once per session; a connection; {name: run id})."""
    require_shared()

    for missing in [n for n in NSYS if not (TRACES / "nsys" / n).is_file()][:1]:
        pytest.skip(f"{TRACES / 'nsys' / missing} not found")
    wh, runs = built_once(tmp_path_factory, "nsys-real", _real_nsys)
    return wh, connect(wh), runs


def _real_nsys(folder):
    wh = Warehouse(folder / "wh")
    outcomes = {name: _ingest(wh, [TRACES / "nsys" / name])[0] for name in NSYS}
    assert not any(o.problems for o in outcomes.values()), outcomes
    assert not any(derive(wh).values())  # derived (`tracehouse derive`): the reports below read kept rows
    return wh, {name: o.run_id for name, o in outcomes.items()}


@pytest.mark.parametrize("name", NSYS)
def test_real_export_matches_sqlite(real_nsys, name):
    _, con, runs = real_nsys
    truth = independent(TRACES / "nsys" / name)
    run = runs[name]
    rows = query_rows(
        con,
        "SELECT device, kind, count(*) AS n, sum(dur_ns) AS ns, count(*) FILTER (WHERE linked) AS linked "
        "FROM kernels WHERE run_id = ? GROUP BY ALL",
        [run],
    )
    assert {r["device"]: r["n"] for r in rows if r["kind"] == "kernel"} == truth["kernels"]
    assert {r["device"]: r["ns"] for r in rows if r["kind"] == "kernel"} == truth["kernel_ns"]
    assert sum(r["n"] for r in rows if r["kind"] == "memcpy") == truth["memcpy"]
    assert sum(r["n"] for r in rows if r["kind"] == "memset") == truth["memset"]
    assert (
        sum(r["linked"] for r in rows) == truth["with_call"]
    )  # every activity whose call is there is linked
    busy = query_rows(
        con,
        "SELECT device, busy_ns FROM gpu_timeline WHERE run_id = ? AND step IS NULL AND variant = 'exact'",
        [run],
    )
    assert {r["device"]: r["busy_ns"] for r in busy} == truth["busy"]
    [meta] = query_rows(con, "SELECT n_ranks, world_size, n_kernels FROM runs WHERE run_id = ?", [run])
    assert meta["n_ranks"] == 2 and meta["n_kernels"] == sum(r["n"] for r in rows)


def test_real_hand_checked_figures(real_nsys):
    """Figures read off the files by hand (sqlite3 CLI): h100_2gpu_1s device 0 has 1721 kernels, 22.385163 ms."""
    _, con, runs = real_nsys
    rows = query_rows(
        con,
        "SELECT device, count(*) AS n, sum(dur_ns) AS ns FROM kernels WHERE run_id = ? "
        "AND kind = 'kernel' GROUP BY device ORDER BY device",
        [runs["h100_2gpu_1s.sqlite"]],
    )
    assert rows == [{"device": 0, "n": 1721, "ns": 22_385_163}, {"device": 1, "n": 1721, "ns": 22_444_359}]


def test_real_exports_have_no_graph_nodes(real_nsys):
    """Read off the files by hand (python sqlite3): the three exports' kernel rows (3442, 4010 and 3587) all
    have graphNodeId NULL (no CUDA graph ran): every kernel's graph_node_id is NULL, none is invented."""
    _, con, runs = real_nsys
    counts = {"h100_2gpu_1s.sqlite": 3442, "mfu_2gpu_before.sqlite": 4010, "mfu_2gpu_after.sqlite": 3587}
    for name, n in counts.items():
        row = con.execute(
            "SELECT count(*), count(graph_node_id), count(graph_id) FROM kernels WHERE run_id = ? AND kind = 'kernel'",
            [runs[name]],
        ).fetchone()
        assert row == (n, 0, 0), name


@pytest.mark.parametrize("name", NSYS)
def test_real_critical_path_and_streams(real_nsys, name):
    _, con, runs = real_nsys
    run = runs[name]
    for rank in (0, 1):
        [util] = query_rows(
            con,
            "SELECT busy_ns / span_ns AS u FROM gpu_timeline WHERE run_id = ? AND rank = ? "
            "AND step IS NULL AND variant = 'exact'",
            [run, rank],
        )
        shares = query_rows(
            con,
            "SELECT kind, sum(dur_ns) AS ns FROM critical_path WHERE run_id = ? AND rank = ? GROUP BY kind",
            [run, rank],
        )
        total = sum(r["ns"] for r in shares)
        gpu = sum(r["ns"] for r in shares if r["kind"] in ("gpu", "kernel_gap", "sync_wait", "gpu_queued"))
        # where the GPU is busy, most of the path is GPU work and GPU-side waits (h100_2gpu_1s: 99 % busy,
        # 99.5 % of its path; the mfu pair: 89-91 % busy, 58-70 %, the rest the host issuing work after
        # each cudaStreamSynchronize while the GPU drained)
        if util["u"] > 0.85:
            assert gpu / total > 0.5, (name, rank, shares)
        if util["u"] > 0.98:
            assert gpu / total > 0.95, (name, rank, shares)
        streams = query_rows(
            con,
            "SELECT stream, activities, busy_ns, exclusive_ns, gpu_time_ns FROM stream_summary "
            "WHERE run_id = ? AND rank = ? AND step IS NULL",
            [run, rank],
        )
        assert streams and all(0 < s["exclusive_ns"] <= s["busy_ns"] <= s["gpu_time_ns"] for s in streams)


def test_real_diff_and_reports(real_nsys, cli_runner):
    from tracehouse import cli

    wh, _, runs = real_nsys
    args = ["--warehouse", str(wh.root)]
    result = cli_runner.invoke(
        cli.main, args + ["diff", runs["mfu_2gpu_before.sqlite"], runs["mfu_2gpu_after.sqlite"]]
    )
    assert result.exit_code == 0, result.output
    assert "flash_fwd_kernel" in result.output and "ncclDevKernel_SendRecv" in result.output
    for name in NSYS:
        result = cli_runner.invoke(cli.main, args + ["report", "--run", runs[name]])
        assert result.exit_code == 0, result.output
        assert "Nsight Systems records none" in result.output and "Critical path" in result.output


def test_synth_cuda_application_is_framework_cuda(tmp_path):
    """A process with no PyTorch operator range and no ATen kernel is a CUDA application: framework cuda."""
    from tracehouse.synth.nsys import build, write_export

    x = build()
    x.nvtx = [n for n in x.nvtx if not n[3].startswith("aten::")]
    write_export(tmp_path / "app.sqlite", x, schema="2.9")
    wh = Warehouse(tmp_path / "wh")
    [outcome] = _ingest(wh, [tmp_path / "app.sqlite"])
    assert not outcome.problems, outcome.problems
    rows = query_rows(connect(wh), "SELECT framework FROM runs WHERE run_id = ?", [outcome.run_id])
    assert rows == [{"framework": "cuda"}]


# ---- older real exports: Nsight Systems 2024.5 (schema 3.13.2) and 2022.1 (schema 2.9.1) -------------
def independent_older(path: Path) -> dict:
    """Figures straight from the SQLite file (no tracehouse code). A stream runs one kernel at a time, so
    two kernel rows with the same stream, start, end and name are one execution recorded twice
    (con_kernel has one such pair): `executions` counts them once, `rows` as recorded."""
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    con.text_factory = lambda b: b.decode("utf-8", "replace")
    kernels = con.execute(
        "SELECT DISTINCT k.deviceId, k.streamId, k.start, k.end, s.value FROM CUPTI_ACTIVITY_KIND_KERNEL k "
        "JOIN StringIds s ON s.id = k.demangledName"
    ).fetchall()
    out = {
        "rows": con.execute("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()[0],
        "executions": len(kernels),
        "kernel_ns": sum(e - s for _, _, s, e, _ in kernels),
        "streams": len({(d, st) for d, st, _, _, _ in kernels}),
        "utc_start": con.execute("SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME").fetchone()[0],
        "gpu": con.execute("SELECT name FROM TARGET_INFO_GPU WHERE smCount > 0 LIMIT 1").fetchone()[0],
    }
    con.close()
    return out


@pytest.fixture(scope="module")
def older_nsys(tmp_path_factory):
    require_shared()

    wh = Warehouse(tmp_path_factory.mktemp("nsys-older") / "wh")
    outcomes = {}
    for name in OLDER:
        path = TRACES / "nsys" / name
        if not path.is_file():
            pytest.skip(f"{path} not found")
        [outcome] = _ingest(wh, [path])
        assert not outcome.problems, outcome.problems
        outcomes[name] = outcome
    return connect(wh), outcomes


@pytest.mark.parametrize("name", OLDER)
def test_older_real_export_matches_sqlite(older_nsys, name):
    con, outcomes = older_nsys
    truth = independent_older(TRACES / "nsys" / name)
    outcome = outcomes[name]
    [k] = query_rows(
        con,
        "SELECT count(*) AS n, sum(dur_ns) AS ns, count(DISTINCT (device, stream)) AS streams FROM kernels "
        "WHERE run_id = ? AND kind = 'kernel'",
        [outcome.run_id],
    )
    assert (k["n"], k["ns"], k["streams"]) == (truth["executions"], truth["kernel_ns"], truth["streams"])
    dropped = dict(outcome.warnings).get("duplicate GPU activities dropped", 0)
    assert truth["rows"] - truth["executions"] == dropped
    [run] = query_rows(
        con, "SELECT framework, hardware, base_time_ns FROM runs WHERE run_id = ?", [outcome.run_id]
    )
    assert run["framework"] == "cuda"  # CloverLeaf and a CUDA sample: no PyTorch range, no ATen kernel
    assert run["hardware"] == truth["gpu"]
    assert run["base_time_ns"] == truth["utc_start"]  # no systemClockNs: times count from the session start


def test_older_real_hand_checked_figures(older_nsys):
    """Read off the files by hand (sqlite3 CLI): cloverleaf 1312 kernels on 1 stream, 294.404540 ms;
    con_kernel 9 kernel rows (one recorded twice: 8 executions, 271.032975 ms) on 5 streams."""
    con, outcomes = older_nsys
    got = {}
    for name, outcome in outcomes.items():
        [row] = query_rows(
            con,
            "SELECT count(*) AS n, sum(dur_ns) AS ns, count(DISTINCT stream) AS streams FROM kernels "
            "WHERE run_id = ? AND kind = 'kernel'",
            [outcome.run_id],
        )
        got[name] = row
    assert got == {
        "cloverleaf_a100_nsys2024.5.sqlite": {"n": 1312, "ns": 294_404_540, "streams": 1},
        "con_kernel_gtx1060_nsys2022.1.sqlite": {"n": 8, "ns": 271_032_975, "streams": 5},
    }


def test_host_bound_remedy_names_torch_compile_only_for_pytorch(tmp_path):
    """The withheld overlap takeaway of a host-bound step (synth situation overlap-host-bound) says how to
    launch faster: torch.compile for a PyTorch run, not for a CUDA application's (framework cuda)."""
    from tracehouse.reports.run import _Windows, build_run_report
    from tracehouse.reports.takeaways import takeaways
    from tracehouse.synth.situations import write_situation

    out = write_situation("overlap-host-bound", tmp_path / "sit")
    wh = Warehouse(tmp_path / "wh")
    [outcome] = _ingest(wh, [out])
    con = connect(wh, runs=[outcome.run_id])
    report = build_run_report(con, outcome.run_id)
    assert report.framework == "pytorch"
    reasons = {}
    for framework in ("pytorch", "cuda"):
        report.framework = framework
        _, withheld = takeaways(report, _Windows(con, outcome.run_id, report.trace_start_ns))
        [reasons[framework]] = [w.reason for w in withheld if w.figure == "overlap_opportunity"]
    assert "CUDA graphs" in reasons["pytorch"] and "torch.compile" in reasons["pytorch"]
    assert "CUDA graphs" in reasons["cuda"] and "torch" not in reasons["cuda"]


def test_export_without_gpu_rows_beside_one_with_is_skipped_and_counted(tmp_path):
    """In a folder, the export recorded without CUDA tracing is skipped with its one-line reason (one
    problem, counted in the run's skipped files) and the other export is the run."""
    from tracehouse.synth.nsys import write_export, write_no_gpu_export

    folder = tmp_path / "ranks"
    truth = write_export(folder / "a.sqlite", schema="3.13")
    write_no_gpu_export(folder / "b.sqlite", schema="none")
    wh = Warehouse(tmp_path / "wh")
    [outcome] = _ingest(wh, [folder])
    assert outcome.run_id
    assert [p for p in outcome.problems if "no GPU activity in this export: CUDA tracing was off" in str(p)]
    assert len(outcome.problems) == 1
    [row] = query_rows(connect(wh), "SELECT n_ranks FROM runs WHERE run_id = ?", [outcome.run_id])
    assert row["n_ranks"] == len(truth["ranks"])


def test_a_cuda_applications_flags_name_no_pytorch_remedy(tmp_path):
    """A CUDA application (framework cuda) gets the CUDA/Nsight remedy in every data-quality message (NVTX
    ranges, cudaProfilerApi capture ranges), no torch API, and no nsys_no_host_ops flag (it has no PyTorch
    operator to record); the same export with PyTorch's ranges keeps the PyTorch remedies."""
    from tracehouse.synth.nsys import build, write_export

    messages = {}
    for framework, keep_aten in (("cuda", False), ("pytorch", True)):
        x = build()
        if not keep_aten:
            x.nvtx = [n for n in x.nvtx if not n[3].startswith("aten::")]
        x.nvtx = [n for n in x.nvtx if not n[3].startswith("ProfilerStep#")]  # no steps: no_step_markers
        write_export(tmp_path / f"{framework}.sqlite", x, schema="3.13")
        wh = Warehouse(tmp_path / f"wh-{framework}")
        [outcome] = _ingest(wh, [tmp_path / f"{framework}.sqlite"])
        assert not outcome.problems, outcome.problems
        con = connect(wh)
        assert query_rows(con, "SELECT framework FROM runs") == [{"framework": framework}]
        rows = query_rows(con, "SELECT flag, message FROM data_quality")
        messages[framework] = {r["flag"]: r["message"] for r in rows}
    cuda, torch = messages["cuda"], messages["pytorch"]
    assert {"no_python_stacks", "no_step_markers"} <= set(cuda)
    assert "nsys_no_host_ops" not in cuda
    assert not [m for m in cuda.values() if "torch" in m], cuda
    assert "nvtxRangePushA" in cuda["no_step_markers"]
    assert "CUDA application" in cuda["no_python_stacks"]
    assert "torch.cuda.nvtx.range_push" in torch["no_step_markers"]
    assert "torch.profiler.profile(with_stack=True)" in torch["no_python_stacks"]

"""First contact (issue 17): the help is true of each command, every expected failure is one line with
exit 1 and no traceback, `runs` fits a terminal, `schema` documents the views, gpu_timeline_run sums
as a user expects, `label` changes labels."""

from __future__ import annotations

import json
import re
import shutil
import time

import pytest
from click.testing import CliRunner
from tracebuilder import BASE_US, launch_pair, simple_events, write_trace

from tests.conftest import TRACES, query_rows, require_shared
from tracehouse.cli import main

FORMATS = {"table", "csv", "json", "ndjson", "md", "html", "perfetto", "triage"}


def _run(args: list[str], env: dict | None = None):
    return CliRunner().invoke(main, args, env=env)


def _one_error_line(result, *needles: str) -> str:
    """Exit 1, exactly one line on stderr that starts with `error:`, no traceback, the needles in it."""
    assert result.exit_code == 1, (result.exit_code, result.output, result.exception)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("error:")]
    assert len(errors) == 1, result.stderr
    assert "Traceback" not in result.output and "<class" not in result.stderr, result.stderr
    for needle in needles:
        assert needle in errors[0], (needle, errors[0])
    return errors[0]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """A warehouse with one hand-written run: kernels [10, 15.25) and [16, 16.875) µs on stream 7 and
    [11, 13) µs on stream 8 of device 0. Busy = 5.25 + 0.875 µs (stream 8 lies under stream 7),
    span = 16.875 - 10 µs, idle = 0.75 µs."""
    root = tmp_path_factory.mktemp("first-contact")
    events = simple_events() + launch_pair(13, 2.0, 11.0, 2.0, name="void other_kernel()", stream=8)
    events.append(
        {
            "ph": "X",
            "cat": "user_annotation",
            "name": "ProfilerStep#1",
            "pid": 1,
            "tid": 100,
            "ts": BASE_US + 0.0,
            "dur": 30.0,
            "args": {},
        }
    )
    trace = write_trace(root / "profile" / "rank0.json.gz", events)
    wh = root / "wh"
    # --wait: derived, as `tracehouse derive` or a first report leaves it (ingest's default is none): `runs` reads
    # its kept run_metrics rather than computing them at each call
    result = _run(
        [
            "--warehouse",
            str(wh),
            "ingest",
            str(trace.parent),
            "--label",
            "series=tiny",
            "--commit",
            "c1",
            "--wait",
        ]
    )
    assert result.exit_code == 0, result.output
    run_id = result.stdout.split("\t")[0]
    return wh, run_id, trace


# ---- help -------------------------------------------------------------------------------------------


def _commands():
    return sorted(main.commands)


@pytest.mark.parametrize("command", _commands())
def test_format_help_names_exactly_the_commands_choices(command):
    """`--format [md|html|json]` must not say `an aligned table ... csv`: the help names each choice
    the command has, and no other."""
    cmd = main.commands[command]
    for param in cmd.params:
        if param.name != "fmt":
            continue
        choices = set(param.type.choices)
        mentioned = {c for c in FORMATS if re.search(rf"\b{c}:", param.help)}
        assert mentioned == choices, (command, param.help)
        rendered = _run([command, "-h"]).stdout
        assert "[" + "|".join(param.type.choices) + "]" in rendered


@pytest.mark.parametrize("command", _commands())
def test_output_help_is_of_a_file_whose_folder_must_exist(command):
    for param in main.commands[command].params:
        if param.name == "output":
            assert "folder must exist" in param.help


def test_version():
    result = _run(["--version"])
    assert result.exit_code == 0 and re.fullmatch(r"tracehouse \d+\.\d+\.\d+\S*\n", result.stdout), (
        result.stdout
    )
    assert _run(["-V"]).stdout == result.stdout


# ---- error paths: one line, exit 1 ------------------------------------------------------------------


def test_output_into_a_missing_folder_fails_before_any_work(tiny, tmp_path):
    wh = tiny[0]
    for args in (["report", "--run", "no-such-run"], ["diff", "nope", "nada"], ["trend"]):
        started = time.perf_counter()
        result = _run(["--warehouse", str(wh)] + args + ["-o", str(tmp_path / "missing" / "x.md")])
        _one_error_line(result, "missing", "does not exist")  # about -o, not about the run: checked first
        assert time.perf_counter() - started < 5
    assert not (tmp_path / "missing").exists()


def test_sql_errors_are_duckdbs_words_with_its_hint(tiny):
    wh = str(tiny[0])
    line = _one_error_line(_run(["--warehouse", wh, "sql", "selct * from kernels"]), 'near "selct"')
    assert "Required keyword" not in line
    _one_error_line(_run(["--warehouse", wh, "sql", "select * from kernel"]), 'Did you mean "kernels"')
    _one_error_line(_run(["--warehouse", wh, "sql", "select nme from kernels"]), '"name"')


def test_a_mistyped_warehouse_is_refused_not_created(tmp_path):
    typo = tmp_path / "typo" / "path"
    for args in (
        ["runs"],
        ["sql", "select 1"],
        ["schema"],
        ["check"],
        ["trend"],
        ["report", "--run", "latest"],
    ):
        _one_error_line(_run(["--warehouse", str(typo)] + args), str(typo), "--warehouse")
    _one_error_line(_run(["runs"], env={"TRACEHOUSE_WAREHOUSE": str(typo)}), "TRACEHOUSE_WAREHOUSE")
    assert not typo.exists() and not typo.parent.exists()


def test_ingest_of_a_missing_path_or_capture_folder(tiny, tmp_path):
    wh, _, trace = tiny
    _one_error_line(
        _run(["--warehouse", str(wh), "ingest", str(tmp_path / "profile-dir")]),
        "no such file or directory",
        "profile directory",
    )
    _one_error_line(
        _run(["--warehouse", str(wh), "ingest", str(trace), "--capture", str(tmp_path / "nope")]),
        "--capture",
        "no such folder",
    )


def test_a_server_args_json_beside_the_traces_is_skipped_not_refused(tmp_path):
    folder = tmp_path / "sglang-profile"
    write_trace(folder / "TP-0.trace.json.gz", simple_events())
    (folder / "server_args.json").write_text(json.dumps({"model_path": "Qwen/Qwen3-8B", "tp_size": 1}))
    # --no-analyses: what is skipped is the point, not the report views (they are not read here)
    result = _run(["--warehouse", str(tmp_path / "wh"), "ingest", str(folder), "--no-analyses"])
    assert result.exit_code == 0, result.output
    assert "stored\t1 file(s)" in result.stdout and "non-trace files skipped: 1" in result.stderr


def test_reingest_with_new_labels_says_so_and_label_sets_them(tiny, tmp_path):
    src = tmp_path / "copy"
    shutil.copytree(tiny[2].parent, src)  # same bytes: the same run
    wh = tmp_path / "wh"
    # --no-analyses: the labels are the point, no report is read (a re-ingest stores nothing either way)
    first = _run(["--warehouse", str(wh), "ingest", str(src), "--label", "model=llama", "--no-analyses"])
    run_id = first.stdout.split("\t")[0]
    again = _run(["--warehouse", str(wh), "ingest", str(src), "--label", "model=qwen", "--commit", "abc"])
    assert again.exit_code == 0 and "already in the warehouse" in again.stdout
    assert (
        "labels not changed" in again.stderr
        and f"tracehouse label {run_id} commit=abc model=qwen" in again.stderr
    )

    result = _run(["--warehouse", str(wh), "label", run_id[:6], "model=qwen", "commit=abc", "config=tp1"])
    assert result.exit_code == 0, result.output
    [row] = json.loads(_run(["--warehouse", str(wh), "runs", "--format", "json"]).stdout)
    assert row["labels"] == {"model": "qwen", "commit": "abc", "config": "tp1"}
    assert (row["model"], row["commit"]) == ("qwen", "abc")  # the columns follow their labels
    _run(["--warehouse", str(wh), "label", run_id, "config=", "commit="])
    [row] = json.loads(_run(["--warehouse", str(wh), "runs", "--format", "json"]).stdout)
    assert row["labels"] == {"model": "qwen"} and row["commit"] is None
    quiet = _run(["--warehouse", str(wh), "ingest", str(src), "--label", "model=qwen"])
    assert "labels not changed" not in quiet.stderr  # nothing differs: nothing to say

    _one_error_line(_run(["--warehouse", str(wh), "label", run_id, "phase=decode"]), "phase")
    _one_error_line(_run(["--warehouse", str(wh), "label", "ffff", "a=b"]), "no run 'ffff'")


def test_report_for_a_phase_the_run_does_not_have_names_its_phases(tiny):
    wh, run_id, _ = tiny
    _one_error_line(
        _run(["--warehouse", str(wh), "report", "--run", run_id, "--phase", "prefill"]),
        "no prefill phase",
        "its phases: unknown",
    )


def test_trend_gate_fails_when_it_matches_nothing(tiny, tmp_path):
    wh = str(tiny[0])
    _one_error_line(
        _run(["--warehouse", wh, "trend", "--where", "series=tyop", "--fail-on-regression"]),
        "series=tyop",
        "series: tiny",
    )
    _one_error_line(
        _run(["--warehouse", wh, "trend", "--where", "cluster=a", "--fail-on-regression"]),
        "cluster: no run has this label",
    )
    _one_error_line(
        _run(["--warehouse", wh, "trend", "--metric", "categroy.*", "--fail-on-regression"]),
        "categroy.*",
        "category.*",
    )
    empty = tmp_path / "empty"
    (empty / "tables" / "runs").mkdir(parents=True)
    _one_error_line(_run(["--warehouse", str(empty), "trend", "--fail-on-regression"]), "holds no runs")
    # one run cannot be judged: the gate says how many it needs and does not pass
    res = _run(["--warehouse", wh, "trend", "--where", "series=tiny", "--fail-on-regression"])
    assert res.exit_code == 1, res.output
    assert "cannot judge tiny" in res.stderr and "1 run: need at least 6 to flag a regression" in res.stderr


def test_schema_unknown_view_suggests_the_close_ones(tiny):
    _one_error_line(_run(["--warehouse", str(tiny[0]), "schema", "gpu_timelin"]), "gpu_timeline_run")


# ---- runs, schema, gpu_timeline_run -------------------------------------------------------------------


def test_runs_is_narrow_with_right_aligned_numbers(tiny):
    wh, run_id, _ = tiny
    result = _run(["--warehouse", str(wh), "runs"])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert max(len(line) for line in lines) <= 120
    header, row = lines[0], lines[2]
    assert header.split()[:3] == ["run", "ingested", "what"] and "step_ms" in header and "busy_%" in header
    assert row.startswith(run_id[:12] + " ") and "pytorch · H100" in row
    # step_ms right-aligned: the value ends where its header ends (one step: 16.875 - 10 µs = 0.006875 ms,
    # shown to the µs)
    end = header.index("step_ms") + len("step_ms")
    assert row[:end].endswith(" 0.007")
    wide = _run(["--warehouse", str(wh), "runs", "--wide"]).stdout
    assert "n_kernels" in wide and "device_properties" in wide
    [record] = json.loads(_run(["--warehouse", str(wh), "runs", "--format", "json"]).stdout)
    assert record["run_id"] == run_id and record["steps"] == 1 and record["n_kernels"] == 3
    assert record["step_time_median_ms"] == pytest.approx(0.006875)
    assert record["gpu_busy_pct"] == pytest.approx(round(100 * 6125 / 6875, 1))


def test_runs_where_matching_nothing_names_the_keys(tiny):
    _one_error_line(_run(["--warehouse", str(tiny[0]), "runs", "--where", "modle=x"]), "modle=x", "series")


def test_schema_lists_grains_and_columns_with_meaning(tiny):
    wh = str(tiny[0])
    overview = _run(["--warehouse", wh, "schema"]).stdout
    assert re.search(
        r"^gpu_timeline_run\s+view\s+One row per \(run_id, rank, device\)", overview, re.MULTILINE
    )
    assert re.search(r"^kernels\s+table\s+one row per GPU activity", overview, re.MULTILINE)
    assert "_kernel_facts" not in overview  # helpers stay out of the overview
    cols = json.loads(_run(["--warehouse", wh, "schema", "gpu_timeline_run", "--format", "json"]).stdout)
    meaning = {c["column"]: c["meaning"] for c in cols}
    assert meaning["busy_pct"].startswith("100 * busy_ns / span_ns")
    assert meaning["activities"].startswith("number of GPU activities")
    assert all(meaning[c] for c in meaning)


def test_schema_lists_each_view_and_column_once_with_its_meaning_on_a_derived_run(tmp_path):
    """A reader's temp view over a view's kept rows has the view's name and columns: `schema VIEW` lists
    the catalogue's columns once each, with their meanings, on a derived run too (it listed both)."""
    trace = write_trace(tmp_path / "profile" / "rank0.json.gz", simple_events())
    wh = str(tmp_path / "wh")
    run_id = _run(["--warehouse", wh, "ingest", "--no-derive", str(trace.parent)]).stdout.split()[0]
    assert _run(["--warehouse", wh, "derive", run_id]).exit_code == 0
    cols = json.loads(_run(["--warehouse", wh, "schema", "kernel_summary", "--format", "json"]).stdout)
    names = [c["column"] for c in cols if c["column"] != "(row)"]
    assert names and len(names) == len(set(names)), names
    assert all(c["meaning"] for c in cols)
    # the overview names each view once, with its grain (it listed the kept views twice, the temp one bare)
    listed = json.loads(_run(["--warehouse", wh, "schema", "--format", "json"]).stdout)
    views = [r["name"] for r in listed]
    assert "kernel_summary" in views and len(views) == len(set(views)), sorted(views)
    assert all(r["one row is"] for r in listed if r["kind"] == "view")


def test_gpu_timeline_run_is_the_exact_whole_run_per_device(tiny):
    from tracehouse.warehouse.catalog import connect
    from tracehouse.warehouse.store import Warehouse

    wh, run_id, _ = tiny
    con = connect(Warehouse(wh))
    [row] = query_rows(con, "SELECT * FROM gpu_timeline_run WHERE run_id = ?", [run_id])
    assert (row["activities"], row["span_ns"], row["busy_ns"], row["idle_ns"]) == (3, 6875, 6125, 750)
    assert (
        row["compute_ns"] + row["exposed_comm_ns"] + row["exposed_memory_ns"] + row["idle_ns"]
        == row["span_ns"]
    )
    assert row["busy_pct"] == pytest.approx(100 * 6125 / 6875)
    # the pitfall it avoids: gpu_timeline sums every variant and the step rows too
    naive = con.execute("SELECT sum(busy_ns) FROM gpu_timeline WHERE run_id = ?", [run_id]).fetchone()[0]
    assert naive > 2 * row["busy_ns"]


def _independent_union(path) -> dict[int, tuple[int, int, int]]:
    """{device pid: (activities, span ns, busy ns)} from the raw trace, with a plain interval union."""
    from tests.conftest import GPU_CATS, load_json

    events = load_json(path)["traceEvents"]
    by_device: dict[int, list[tuple[int, int]]] = {}
    for e in events:
        if e.get("ph") == "X" and str(e.get("cat", "")).lower() in GPU_CATS:
            start = int(e["ts"] * 1000)
            by_device.setdefault(e["pid"], []).append((start, start + max(0, int(e.get("dur", 0) * 1000))))
    out = {}
    for pid, spans in by_device.items():
        spans.sort()
        busy, reach = 0, None
        for s, t in spans:
            if reach is None or s >= reach:
                busy += t - s
                reach = t
            elif t > reach:
                busy += t - reach
                reach = t
        out[pid] = (len(spans), max(t for _, t in spans) - spans[0][0], busy)
    return out


def test_gpu_timeline_run_on_real_traces_matches_an_independent_union(tmp_path):
    """Hand-checkable: the H100 Qwen1.5 trace is one device, 1707 activities, span 49.652832 ms,
    busy 45.6473 ms (91.9 %)."""
    require_shared()
    from tracehouse.warehouse.catalog import connect
    from tracehouse.warehouse.store import Warehouse

    path = TRACES / "nvidia" / "h100_qwen1.5-0.5b.json.gz"
    wh = tmp_path / "wh"
    result = _run(["--warehouse", str(wh), "ingest", str(path), "--no-analyses"])
    assert result.exit_code == 0, result.output
    [row] = query_rows(connect(Warehouse(wh)), "SELECT * FROM gpu_timeline_run")
    [(count, span, busy)] = _independent_union(path).values()
    assert (row["activities"], row["span_ns"], row["busy_ns"]) == (count, span, busy)
    assert (count, span, busy) == (1707, 49652832, 45647300)
    assert round(row["busy_pct"], 1) == 91.9


@pytest.mark.parametrize("command", _commands())
def test_every_option_has_help_true_of_its_command(command):
    """Each option says what it does; none names an output format, engine or file its command lacks."""
    cmd = main.commands[command]
    formats = set()
    for param in cmd.params:
        if param.name == "fmt":
            formats = set(param.type.choices)
    for param in cmd.params:
        if not isinstance(param, click_option_type()):
            continue
        assert param.help, f"`tracehouse {command} {param.opts[0]}` has no help"
        if param.name != "fmt":
            for fmt in FORMATS - formats:
                assert not re.search(rf"--format {fmt}\b", param.help), (command, param.opts, param.help)
        if param.name == "master":
            assert any(p.name == "engine" for p in cmd.params)


def click_option_type():
    import click

    return click.Option


def test_global_options_are_taken_after_the_command(tiny):
    """`tracehouse runs --warehouse X` is `tracehouse --warehouse X runs` (users type both); --warehouse=X and
    --debug too; nothing after `--` moves."""
    from tracehouse.cli import global_options_first

    wh = str(tiny[0])
    before = _run(["--warehouse", wh, "runs", "--format", "json"])
    after = _run(["runs", "--format", "json", "--warehouse", wh])
    assert before.exit_code == after.exit_code == 0, after.output
    assert after.stdout == before.stdout and after.stdout.strip()
    res = _run(["sql", f"--warehouse={wh}", "select count(*) AS n from runs", "--debug", "--format", "csv"])
    assert res.exit_code == 0 and res.stdout.splitlines()[1] == "1", res.output
    assert global_options_first(["sql", "--", "--warehouse", "x"]) == ["sql", "--", "--warehouse", "x"]
    assert global_options_first(["runs", "--debug", "--warehouse", "w"]) == [
        "--debug",
        "--warehouse",
        "w",
        "runs",
    ]


def test_a_closed_pipe_exits_0_quietly(tiny):
    """`tracehouse sql ... | head -1`: the reader stops reading; the command exits 0 and says nothing."""
    import subprocess
    import sys

    command = [sys.executable, "-c", "from tracehouse.cli import entry; entry()"]
    command += [
        "--warehouse",
        str(tiny[0]),
        "sql",
        "select * from range(300000)",
    ]  # ~2.4 MB: past any pipe buffer
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout.readline()  # the header: the command is writing
    proc.stdout.close()  # the reader leaves
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert err.decode().strip() == ""


def test_report_takes_the_run_as_an_argument(tiny):
    """`report RUN` as diff, export and label take it; `--run RUN` kept; two different runs refused."""
    wh = str(tiny[0])
    positional = _run(["--warehouse", wh, "report", "latest", "--format", "json"])
    option = _run(["--warehouse", wh, "report", "--run", "latest", "--format", "json"])
    assert positional.exit_code == option.exit_code == 0, positional.output
    assert json.loads(positional.stdout)["run_id"] == json.loads(option.stdout)["run_id"] == tiny[1]
    both = _run(["--warehouse", wh, "report", "latest", "--run", "latest~1"])
    assert both.exit_code == 2 and "two runs given" in both.output
    none = _run(["--warehouse", wh, "report"])
    assert none.exit_code == 2 and "tracehouse report RUN" in none.output

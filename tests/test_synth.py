"""Tests of the trace synthesizer: determinism, format, ground-truth consistency, conventions, memory."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import orjson
import pytest
from tracehouse.synth import SCENARIOS, write_scenario
from tracehouse.synth.kineto import us
from tracehouse.synth.truth import load_truth

ROOT = Path(__file__).resolve().parents[1]
TRACES = ROOT.parent / "shared" / "traces"

# A few real traces per vendor cover every convention the synthesizer uses (kept small for speed).
REAL = {
    "nvidia": [
        "nvidia/b200_eager_rank0.json.gz",
        "nvidia/a100_nccl_rank0.json.gz",
        "nvidia/critical_path/cuda_event_sync.json.gz",
        "nvidia/critical_path/cuda_event_sync_multi_stream.json.gz",
        "nvidia/a100_multistream_rank0.json.gz",
    ],
    "amd": [
        "inference/sglang_decode/sglang_Qwen3-8B_decode.json.gz",
        "inference/sglang_decode/capture_traces/bs_32_rank0.json.gz",
        "inference/sglang_prefilldecode/sglang_Qwen3-8B_prefilldecode.json.gz",
        "amd/mi300_resnet_act_checkpoint.json.gz",
        "amd/mi300_qwen1.5-0.5b.json.gz",
    ],
}


def _load(p: Path) -> dict:
    with gzip.open(p, "rb") if p.suffix == ".gz" else open(p, "rb") as f:
        return orjson.loads(f.read())


def _traces(d: Path) -> list[Path]:
    return sorted(d.glob("*.json.gz")) + sorted((d / "capture_traces").glob("*.json.gz"))


def _conventions(docs) -> tuple[set, dict, set]:
    pairs: set = set()
    keys: dict = defaultdict(set)
    top: set = set()
    for d in docs:
        top.update(k for k in d if k != "traceEvents")
        for e in d["traceEvents"]:
            pc = (e.get("ph"), e.get("cat"))
            pairs.add(pc)
            keys[pc].update((e.get("args") or {}).keys())
            keys[pc].update("@" + k for k in e if k != "args")
    return pairs, keys, top


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict:
    out = {}
    base = tmp_path_factory.mktemp("synth")
    for sc in SCENARIOS:
        for vendor in ("nvidia", "amd"):
            out[(sc, vendor)] = write_scenario(
                sc,
                base / f"{sc}-{vendor}",
                vendor=vendor,
                steps=3,
                layers=2,
                straggler=(1, 30.0),
                host_stall_us=100.0,
                slow_kernel=("nvjet|Cijk", 1.3),
            )
    return out


def test_us_formatting_is_exact():
    assert us(1_765_432_100_123_456_789) == "1765432100123456.789"
    assert us(5) == "0.005" and us(1000) == "1.000" and us(0) == "0.000"


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_deterministic_bytes(tmp_path, scenario):
    a = write_scenario(scenario, tmp_path / "a", seed=3, steps=2, layers=2)
    b = write_scenario(scenario, tmp_path / "b", seed=3, steps=2, layers=2)
    fa = sorted(p.relative_to(a) for p in a.rglob("*") if p.is_file())
    assert fa == sorted(p.relative_to(b) for p in b.rglob("*") if p.is_file())
    for rel in fa:
        assert (a / rel).read_bytes() == (b / rel).read_bytes(), rel
    c = write_scenario(scenario, tmp_path / "c", seed=4, steps=2, layers=2)
    assert load_truth(c)["steps"] != load_truth(a)["steps"]


def test_files_parse_and_names(runs):
    for (sc, vendor), d in runs.items():
        truth = load_truth(d)
        names = [p.name for p in sorted(d.glob("*.json.gz"))]
        assert sorted(truth["files"].values()) == names
        for p in _traces(d):
            doc = _load(p)
            assert doc["schemaVersion"] == 1 and doc["traceEvents"]
            assert doc["distributedInfo"]["world_size"] == 2
        if sc == "serving-decode":
            assert all(n.endswith("-DECODE.trace.json.gz") and "-TP-" in n for n in names)
            det = json.loads((d / "capture_traces" / "execution_details.json").read_text())
            assert {x["batch_size"] for x in det} == {16, 32} and all(x["mode"] == "FULL" for x in det)
        elif sc == "serving-prefill":
            assert all(n.endswith("-EXTEND.trace.json.gz") for n in names)
        else:
            assert all(n.startswith("rank-") and n.endswith(".pt.trace.json.gz") for n in names)


def test_timestamps_have_ns_text(runs):
    """ts/dur carry exactly three decimals and match the truth's integer ns (no float round trip)."""
    d = runs[("serving-decode", "nvidia")]
    truth = load_truth(d)
    with gzip.open(d / truth["files"]["0"]) as f:
        text = f.read().decode()
    first = truth["steps"][0]["gpu_start_ns"]
    assert f'"ts": {us(first)}' in text


def test_ground_truth_identities(runs):
    for (sc, vendor), d in runs.items():
        t = load_truth(d)
        assert t["steps"] and t["ranks_summary"]
        for row in t["steps"] + t["ranks_summary"]:
            assert (
                row["compute_ns"] + row["exposed_comm_ns"] + row["exposed_memory_ns"] + row["idle_ns"]
                == row["span_ns"]
            ), (sc, vendor, row.get("step"))
            assert row["busy_ns"] == row["span_ns"] - row["idle_ns"]
            assert sum(row["category_ns"].values()) >= row["busy_ns"]
        for row in t["steps"]:
            assert sum(v[1] for v in row["kernels"].values()) == row["n_activities"]
            assert len(t["launch_site_templates"][row["launch_sites"]]) == row["n_activities"]
            assert row["host_start_ns"] <= row["gpu_start_ns"] and row["gpu_end_ns"] <= row["host_end_ns"]
            for busy, excl, _n in row["streams"].values():
                assert 0 <= excl <= busy
        assert set(t["kernel_categories"].values()) <= {
            "gemm",
            "attention",
            "moe",
            "communication",
            "norm",
            "activation",
            "rope",
            "quantize",
            "sampling",
            "elementwise",
            "reduction",
            "memory",
            "convolution",
            "embedding",
            "other",
        }
        # the straggler (rank 1) arrives last at most collectives (prefill's long kernels jitter more than
        # the 30 us of lateness, so only the short-kernel scenarios are checked)
        if sc != "serving-prefill":
            last = [c["last_rank"] for c in t["collectives"]]
            assert last.count(1) > len(last) / 2, (sc, vendor, last)


def test_truth_matches_trace_events(runs):
    """Recount GPU activities and their time per rank straight from the written JSON."""
    for d in runs.values():
        t = load_truth(d)
        for r, name in t["files"].items():
            doc = _load(d / name)
            acts = [e for e in doc["traceEvents"] if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
            summ = t["ranks_summary"][int(r)]
            assert len(acts) == summ["n_activities"]
            text_total = sum(round(e["dur"] * 1000) for e in acts)
            assert text_total == sum(k["time_ns"] for k in summ["kernels"].values())
            corr_rt = {
                e["args"]["correlation"]
                for e in doc["traceEvents"]
                if e.get("cat") in ("cuda_runtime", "cuda_driver")
            }
            assert all(e["args"]["correlation"] in corr_rt for e in acts)  # every activity is linked


def test_decode_graph_replay_shape(runs):
    for vendor in ("nvidia", "amd"):
        d = runs[("serving-decode", vendor)]
        t = load_truth(d)
        doc = _load(d / t["files"]["0"])
        ev = doc["traceEvents"]
        g = [e for e in ev if e.get("name") in ("cudaGraphLaunch", "hipGraphLaunch")]
        assert len(g) == 3 and all(r["graph_launches"] == 1 for r in t["steps"])
        corr = g[0]["args"]["correlation"]
        replayed = [e for e in ev if e.get("cat") == "kernel" and e["args"]["correlation"] == corr]
        assert len(replayed) == 2 * t["layer_period"] + 2
        assert len({e["tid"] for e in replayed}) == 2  # main + routed-expert stream
        flows = [e for e in ev if e.get("cat") == "ac2g" and e["id"] == corr]
        assert len(flows) == len(replayed) + 1
        caps = [p for p in (d / "capture_traces").glob("bs_32_rank0.json.gz")]
        cap = _load(caps[0])["traceEvents"]
        launches = [
            e for e in cap if e.get("cat") in ("cuda_runtime", "cuda_driver") and "Launch" in e["name"]
        ]
        assert len(launches) == len(replayed)
        assert not [e for e in cap if e.get("cat") == "kernel"]


def test_conventions_match_real_traces(runs):
    if not TRACES.is_dir():
        pytest.skip(f"../shared/traces not found: {TRACES}")
    for vendor in ("nvidia", "amd"):
        real = [_load(TRACES / p) for p in REAL[vendor] if (TRACES / p).exists()]
        rpairs, rkeys, rtop = _conventions(real)
        docs = [_load(p) for (sc, v), d in runs.items() if v == vendor for p in _traces(d)]
        spairs, skeys, stop = _conventions(docs)
        assert spairs <= rpairs, (vendor, spairs - rpairs)
        for pc in spairs:
            assert skeys[pc] <= rkeys[pc], (vendor, pc, skeys[pc] - rkeys[pc])
        assert stop <= rtop, (vendor, stop - rtop)


def test_target_size_memory(tmp_path):
    code = (
        "import resource, sys\n"
        "from tracehouse.synth import write_scenario\n"
        f"write_scenario('serving-decode', {str(tmp_path / 'big')!r}, target_size=50_000_000, ranks=2)\n"
        # ru_maxrss survives exec on Linux (it would report pytest's own peak), so prefer VmHWM
        "import os\n"
        "hwm = [l for l in open('/proc/self/status') if l.startswith('VmHWM')] if os.path.exists('/proc/self/status') else []\n"
        "print(int(hwm[0].split()[1]) if hwm else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)\n"
    )
    res = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300, check=False
    )
    assert res.returncode == 0, res.stderr
    rss_mb = int(res.stdout.split()[-1]) / 1024
    assert rss_mb < 150, rss_mb
    total = 0
    for p in (tmp_path / "big").glob("*.trace.json.gz"):  # the rank traces (not ground_truth.json.gz)
        with gzip.open(p) as f:
            total += len(f.read())
    assert 50_000_000 <= total < 56_000_000
    # a ground truth this large is written gzipped, and only that way
    assert (tmp_path / "big" / "ground_truth.json.gz").is_file()
    assert not (tmp_path / "big" / "ground_truth.json").exists()

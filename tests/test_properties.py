"""Property-based tests (hypothesis): the event decoder round-trips random valid events to the exact
nanosecond, and gpu_timeline's figures hold for random intervals (identity, and busy = the union)."""

from __future__ import annotations

import json
from decimal import ROUND_HALF_EVEN, Decimal

import duckdb
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tracebuilder import BASE_US
from tracehouse.ingest.decode import load_raw_events
from tracehouse.ingest.rank import run_transforms
from tracehouse.ingest.source import read_trace

SETTINGS = {
    "deadline": None,
    "suppress_health_check": [HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
}

# µs with up to 3 decimals (Kineto's ns precision), epoch-sized timestamps: float64 would lose ns here
micros = st.decimals(min_value=Decimal(0), max_value=Decimal(1000000), places=3, allow_nan=False)
event = st.fixed_dictionaries(
    {
        "cat": st.sampled_from(["kernel", "gpu_memcpy", "gpu_memset", "cpu_op", "cuda_runtime"]),
        "name": st.text(min_size=0, max_size=30),
        "ts": micros,
        "dur": micros,
        "stream": st.integers(min_value=0, max_value=64),
    }
)


def _text(events: list[dict], pretty: bool) -> bytes:
    out = []
    for e in events:
        out.append(
            f'{{"ph": "X", "cat": {json.dumps(e["cat"])}, "name": {json.dumps(e["name"])}, "pid": 0, '
            f'"tid": {e["stream"]:d}, "ts": {BASE_US + e["ts"]}, "dur": {e["dur"]}, '
            f'"args": {{"stream": {e["stream"]:d}, "device": 0}}}}'
        )
    sep = ",\n" if pretty else ","
    return ('{"schemaVersion": 1, "traceEvents": [' + sep.join(out) + "]}").encode()


def _ns(us: Decimal) -> int:
    return int((us * 1000).to_integral_value(rounding=ROUND_HALF_EVEN))


@settings(max_examples=40, **SETTINGS)
@given(events=st.lists(event, min_size=1, max_size=40), pretty=st.booleans())
def test_decoder_round_trips_counts_and_exact_ns(tmp_path_factory, events, pretty):
    folder = tmp_path_factory.mktemp("prop")
    path = folder / "t.json"
    path.write_bytes(_text(events, pretty))
    con = duckdb.connect()
    try:
        source = read_trace(path, folder / "events.json")
        assert load_raw_events(con, folder / "events.json", source) == {}
        run_transforms(con, None, None)
        rows = con.execute("SELECT name, start_ns, dur_ns FROM events ORDER BY ev_id").fetchall()
    finally:
        con.close()
    assert len(rows) == len(events)
    for (name, start, dur), e in zip(rows, events):
        assert name == e["name"]
        assert start == _ns(BASE_US + e["ts"])
        assert dur == _ns(e["dur"])


# ---- interval views ---------------------------------------------------------------------------------
KINDS = {  # (cat, name) per class of activity
    "compute": ("kernel", "void gemm_kernel<1>()"),
    "comm": ("kernel", "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)"),
    "memory": ("gpu_memcpy", "Memcpy DtoD (Device -> Device)"),
}
interval = st.tuples(
    st.sampled_from(sorted(KINDS)), st.integers(0, 5000), st.integers(0, 800), st.integers(1, 4)
)


def _union(spans: list[tuple[int, int]]) -> int:
    total, end = 0, None
    for s, e in sorted(spans):
        if end is None or s > end:
            total += e - s
            end = e
        elif e > end:
            total += e - end
            end = e
    return total


@settings(max_examples=8, **SETTINGS)
@given(intervals=st.lists(interval, min_size=1, max_size=25))
def test_gpu_timeline_identity_and_busy_is_the_union(tmp_path_factory, intervals):
    from tracehouse.ingest.load import ingest_paths
    from tracehouse.warehouse.catalog import connect
    from tracehouse.warehouse.store import Warehouse

    folder = tmp_path_factory.mktemp("timeline")
    events = []
    for i, (kind, start, dur, stream) in enumerate(intervals):
        cat, name = KINDS[kind]
        events.append(
            {
                "ph": "X",
                "cat": cat,
                "name": name,
                "pid": 0,
                "tid": stream,
                "ts": BASE_US + start,
                "dur": dur,
                "args": {"device": 0, "stream": stream, "correlation": i + 1},
            }
        )
    path = folder / "t.json"
    path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": events}))
    wh = Warehouse(folder / "wh")
    [outcome] = ingest_paths(wh, [path])
    assert outcome.problems == []
    con = connect(wh)
    row = con.execute(
        "SELECT span_ns, busy_ns, compute_ns, exposed_comm_ns, exposed_memory_ns, idle_ns "
        "FROM gpu_timeline WHERE run_id = ? AND step IS NULL AND variant = 'exact'",
        [outcome.run_id],
    ).fetchone()
    span, busy, compute, comm, memory, idle = row
    assert compute + comm + memory + idle == span
    spans = {(s * 1000, (s + d) * 1000) for _, s, d, _ in intervals}  # exact duplicates are dropped
    assert busy == _union(list(spans))
    assert span == max(e for _, e in spans) - min(s for s, _ in spans)
    assert compute == _union([(s * 1000, (s + d) * 1000) for k, s, d, _ in intervals if k == "compute"])

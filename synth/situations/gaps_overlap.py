"""Idle-gap and overlap situations: why the GPU sat idle, and when overlap is an opportunity at all.

Real traces showed a gap called `sync_wait` because a 0.7 µs sync touched its start (the host then spent
126 ms in the DataLoader), thousands of 1-ns gaps between back-to-back kernels counted as causes, every
kernel of a single-stream run reported as overlap "headroom", and a stream's exclusive time above its
busy time when two activities of one stream overlap (programmatic dependent launch). Each situation
here places the events at exact ns, so the expected gap parts, classes, host ops and overlap rows are
exact. Times in `expect` are ns; `gap_start_ns` is absolute (T0_NS + the Timeline time).
"""

from __future__ import annotations

from pathlib import Path

from . import situation
from .timeline import T0_NS, Timeline

US = 1_000
MS = 1_000_000

GEMM = "ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_tn"
NORM = (
    "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<c10::BFloat16, float>(int, float)"
)
ADD = (
    "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>, "
    "at::detail::Array<char*, 3> >(int, at::native::CUDAFunctor_add<c10::BFloat16>, at::detail::Array<char*, 3>)"
)
NCCL = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"
DATALOADER = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"


def _gap(
    scope: str,
    stream: int | None,
    start: int,
    end: int,
    cls: str,
    *,
    wait: int,
    host: int,
    host_op: str | None,
    host_op_ns: int | None,
) -> dict:
    gap = end - start
    return {
        "scope": scope,
        "stream": stream,
        "gap_start_ns": T0_NS + start,
        "gap_ns": gap,
        "class": cls,
        "wait_ns": wait,
        "host_ns": host,
        "queued_ns": gap - wait - host,
        "host_op": host_op,
        "host_op_ns": host_op_ns,
    }


@situation(
    "dataloader-stall",
    "a training step ends in a 0.7 us cudaStreamSynchronize that touches the idle gap's start; the "
    "host then spends 126 ms in DataLoader.__next__ before it launches the next step's first kernel",
)
def dataloader_stall(out: Path) -> dict:
    tl = Timeline()
    # step 0: 20 kernels of 30 us, launched 10 us apart, so the GPU runs them back to back (no gap)
    s0 = tl.op("ProfilerStep#0", 0, 621 * US, cat="user_annotation")
    for i in range(20):
        tl.launch(GEMM if i % 2 == 0 else ADD, 10 * US + i * 10 * US, 20 * US + i * 30 * US, 30 * US)
    gpu_end = 20 * US + 20 * 30 * US  # 620 us
    # the sync: called 200 ns before the GPU finishes, returns 500 ns after (0.7 us); the host call only
    # (Timeline.stream_sync also writes a cuda_sync record whose flow has no start event)
    tl.call(tl.calls["stream_sync"], gpu_end - 200, gpu_end + 500)
    # step 1: the DataLoader, then the launches
    dl_start, dl_end = 622 * US, 622 * US + 126 * MS
    first_launch = dl_end + 2 * US
    s1 = tl.op("ProfilerStep#1", s0.end, 0, cat="user_annotation")
    tl.op(DATALOADER, dl_start, dl_end, cat="user_annotation")
    first_gpu = first_launch + 8 * US
    for i in range(20):
        tl.launch(GEMM if i % 2 == 0 else ADD, first_launch + i * 10 * US, first_gpu + i * 30 * US, 30 * US)
    s1.end = first_gpu + 20 * 30 * US + 50 * US
    tl.write(out / "rank-0.pt.trace.json.gz")
    # the gap [gpu_end, first_gpu): 500 ns under the sync, the rest until the launch call returned is the
    # host's (the DataLoader, then the 4 us launch call), 4 us of launch latency after it
    wait = 500
    host = (first_launch - gpu_end) - wait + 4 * US
    gap = _gap(
        "device",
        None,
        gpu_end,
        first_gpu,
        "host_bound",
        wait=wait,
        host=host,
        host_op=DATALOADER,
        host_op_ns=126 * MS,
    )
    return {
        "steps": 2,
        "idle_gaps": [gap, {**gap, "scope": "stream", "stream": 7}],
        # every other gap is zero-length (back-to-back kernels)
        "idle_class_counts": {"device": {"host_bound": 1}, "stream": {"host_bound": 1}},
        "old_rule_class": "sync_wait",
    }


@situation(
    "back-to-back-1ns",
    "2000 kernels of 5 us queued far ahead on one stream, each starting 1 ns after the previous one "
    "ended: 1999 gaps of 1 ns that are GPU scheduling, not causes",
)
def back_to_back_1ns(out: Path) -> dict:
    tl = Timeline()
    n = 2000
    step = tl.op("ProfilerStep#0", 0, 0, cat="user_annotation")
    gpu = 50 * US
    for i in range(n):
        # the host launches every 2 us: far ahead of the GPU (5 us each), so every launch is in time
        tl.launch(
            GEMM if i % 3 == 0 else (NORM if i % 3 == 1 else ADD),
            10 * US + i * 2 * US,
            gpu,
            5 * US,
            call_dur=1_500,
        )
        gpu += 5 * US + 1
    step.end = gpu + 20 * US
    tl.write(out / "rank-0.pt.trace.json.gz")
    counts = {"tiny": n - 1}
    return {
        "steps": 1,
        "idle_class_counts": {"device": counts, "stream": counts},
        "tiny_gap_ns_total": n - 1,
        "gpu_busy_ns": n * 5 * US,
    }


@situation(
    "stream-sync-wait",
    "two streams: the host sits in cudaStreamSynchronize on the long stream-8 kernel while stream 7 "
    "is idle (a real sync_wait for stream 7), then launches late; a kernel queued in time behind a "
    "cross-stream event waits on the GPU (other); a 3 ms launch call (lazy module load) holds the GPU "
    "idle (host_bound, though the call began before the gap)",
)
def stream_sync_wait(out: Path) -> dict:
    tl = Timeline()
    step = tl.op("ProfilerStep#0", 0, 0, cat="user_annotation")
    # A on stream 7 [10, 110) us; B on stream 8 [12, 2012) us
    tl.launch(GEMM, 2 * US, 10 * US, 100 * US, stream=7)
    tl.launch(NCCL, 6 * US, 12 * US, 2000 * US, stream=8)
    sync_start, sync_end = 20 * US, 2017 * US
    tl.call(tl.calls["stream_sync"], sync_start, sync_end)
    c_launch = 2020 * US
    c_start = c_launch + 8 * US
    tl.launch(NORM, c_launch, c_start, 50 * US, stream=7)  # C [2028, 2078) us
    # D on stream 8 runs 300 us; E on stream 7 is launched right away but waits (GPU side) for D's event
    tl.launch(GEMM, 2030 * US, 2080 * US, 300 * US, stream=8)  # D [2080, 2380) us
    tl.call(tl.calls["record"], 2035 * US, 2037 * US)
    tl.call(tl.calls["wait"], 2040 * US, 2042 * US)
    tl.launch(ADD, 2045 * US, 2380 * US, 40 * US, stream=7)  # E [2380, 2420) us
    # F: a 3 ms launch call that began 10 us before the GPU went idle; F starts before the call returns
    f_call = 2410 * US
    f_start = f_call + 2990 * US
    tl.launch(GEMM, f_call, f_start, 100 * US, stream=7, call_dur=3 * MS)  # F [5400, 5500) us
    step.end = f_start + 200 * US
    tl.write(out / "rank-0.pt.trace.json.gz")
    gaps = [
        # stream 7 idle [110, 2028) us: the sync covers [110, 2017); then 3 us of host and the 4 us call
        _gap(
            "stream",
            7,
            110 * US,
            c_start,
            "sync_wait",
            wait=sync_end - 110 * US,
            host=(c_launch - sync_end) + 4 * US,
            host_op="cudaStreamSynchronize",
            host_op_ns=sync_end - 110 * US,
        ),
        # the device idle [2012, 2028) us: 5 us under the sync, 3 us + 4 us host, 8 - 4 = 4 us latency; no
        # range below the step covers more than half of these 16 us (the sync 5 us, C's call 4 us)
        _gap(
            "device",
            None,
            2012 * US,
            c_start,
            "host_bound",
            wait=sync_end - 2012 * US,
            host=(c_launch - sync_end) + 4 * US,
            host_op="ProfilerStep#0",
            host_op_ns=c_start - 2012 * US,
        ),
        # stream 7 idle [2078, 2380) us: E was launched at 2045 (before the gap), the GPU waited on D; the
        # host sat in the step, nothing deeper
        _gap(
            "stream",
            7,
            2078 * US,
            2380 * US,
            "other",
            wait=0,
            host=0,
            host_op="ProfilerStep#0",
            host_op_ns=302 * US,
        ),
        # the device idle [2420, 5400) us: inside F's launch call (began at 2410) for all of it
        _gap(
            "device",
            None,
            2420 * US,
            f_start,
            "host_bound",
            wait=0,
            host=f_start - 2420 * US,
            host_op="cudaLaunchKernel",
            host_op_ns=f_start - 2420 * US,
        ),
    ]
    return {"steps": 1, "idle_gaps": gaps, "old_rule_class": {"device@2420000": "other"}}


@situation(
    "single-stream-overlap",
    "an eager run on one stream (GEMM, norm, add, each well above 1 %): nothing runs beside any "
    "kernel, so there is no overlap recommendation; a second stream would be needed",
)
def single_stream_overlap(out: Path) -> dict:
    tl = Timeline()
    t_gpu = 20 * US
    host = 10 * US
    for step in range(3):
        s = tl.op(f"ProfilerStep#{step}", host - 5 * US, 0, cat="user_annotation")
        for name, dur in ((GEMM, 200 * US), (NORM, 40 * US), (ADD, 60 * US), (GEMM, 200 * US)):
            tl.launch(name, host, t_gpu, dur)
            host += 5 * US
            t_gpu += dur
        s.end = t_gpu + 10 * US
        host = s.end + 10 * US
        t_gpu = host + 10 * US
    tl.write(out / "rank-0.pt.trace.json.gz")
    busy = 3 * 500 * US
    return {
        "steps": 3,
        "overlap": {
            "reportable_rows": 0,
            "rows": {
                n: {
                    "verdict": "single-stream",
                    "recommendation": "not applicable",
                    "second_stream_needed": True,
                    "peer_streams": 0,
                    "reportable": False,
                    "exclusive_ratio": 1.0,
                }
                for n in (GEMM, NORM, ADD)
            },
        },
        "streams": {"7": {"busy_ns": busy, "exclusive_ns": busy}},
    }


@situation(
    "two-stream-overlap",
    "a layer repeated 3 times: a GEMM runs alone on stream 7 while the communication stream is idle "
    "(genuine headroom: try overlap), then an all-reduce on stream 8 runs under the norm and the add",
)
def two_stream_overlap(out: Path) -> dict:
    tl = Timeline()
    period = 1000 * US
    for rep in range(3):
        o = rep * period + 20 * US
        s = tl.op(f"ProfilerStep#{rep}", o - 15 * US, o + 800 * US, cat="user_annotation")
        h = s.start + 2 * US
        tl.launch(GEMM, h, o, 300 * US, stream=7)  # [0, 300) alone
        tl.launch(NORM, h + 5 * US, o + 300 * US, 100 * US, stream=7)  # [300, 400) under the all-reduce
        tl.launch(NCCL, h + 10 * US, o + 300 * US, 400 * US, stream=8)  # [300, 700) under norm + add
        tl.launch(ADD, h + 15 * US, o + 400 * US, 300 * US, stream=7)  # [400, 700) under the all-reduce
    tl.write(out / "rank-0.pt.trace.json.gz")
    total = 3 * 1100 * US
    return {
        "steps": 3,
        "overlap": {
            "reportable_rows": 4,
            "rows": {
                GEMM: {
                    "verdict": "headroom",
                    "recommendation": "try overlap",
                    "priority": "P1",
                    "dependency_risk": "low",
                    "second_stream_needed": False,
                    "peer_streams": 1,
                    "reportable": True,
                    "gpu_time_ns": 900 * US,
                    "exclusive_ns": 900 * US,
                    "share": 900 * US / total,
                },
                NORM: {
                    "verdict": "low-roi-hidden",
                    "recommendation": "skip overlap",
                    "second_stream_needed": False,
                    "reportable": True,
                    "exclusive_ns": 0,
                },
                ADD: {
                    "verdict": "low-roi-hidden",
                    "recommendation": "skip overlap",
                    "second_stream_needed": False,
                    "reportable": True,
                    "exclusive_ns": 0,
                },
                NCCL: {
                    "verdict": "low-roi-hidden",
                    "recommendation": "skip overlap",
                    "second_stream_needed": False,
                    "reportable": True,
                    "exclusive_ns": 0,
                },
            },
        },
        "streams": {
            "7": {"busy_ns": 3 * 700 * US, "exclusive_ns": 3 * 300 * US},
            "8": {"busy_ns": 3 * 400 * US, "exclusive_ns": 0},
        },
    }


@situation(
    "same-stream-overlap",
    "programmatic dependent launch on one stream: each kernel starts 20 us before the previous one "
    "ends, so a stream's busy time is less than the sum of its activities; its exclusive time must "
    "not exceed its busy time",
)
def same_stream_overlap(out: Path) -> dict:
    tl = Timeline(device_name="NVIDIA B200")
    s = tl.op("ProfilerStep#0", 0, 0, cat="user_annotation")
    n, dur, lead = 10, 100 * US, 20 * US
    for i in range(n):
        tl.launch(GEMM if i % 2 == 0 else NORM, 5 * US + i * 5 * US, 100 * US + i * (dur - lead), dur)
    busy = n * dur - (n - 1) * lead
    s.end = 100 * US + busy + 20 * US
    tl.write(out / "rank-0.pt.trace.json.gz")
    return {
        "steps": 1,
        "streams": {"7": {"busy_ns": busy, "exclusive_ns": busy}},
        "sum_of_activity_exclusive_ns": n * dur,
        "idle_class_counts": {"device": {}, "stream": {}},
    }


@situation(
    "backward-thread-gap",
    "DDP-like: the main thread sits in cudaStreamSynchronize on a long all-reduce (stream 9) while the "
    "autograd thread spends 1.95 ms on the CPU before it launches the next backward kernel on stream 7: "
    "stream 7's gap is host_bound (the launching thread was busy), not sync_wait (another thread waited)",
)
def backward_thread_gap(out: Path) -> dict:
    tl = Timeline()
    bwd = 4243
    step = tl.op("ProfilerStep#0", 0, 0, cat="user_annotation")
    tl.launch(GEMM, 2 * US, 10 * US, 100 * US, stream=7)  # A [10, 110) us
    tl.launch(NCCL, 6 * US, 20 * US, 3000 * US, stream=9)  # all-reduce [20, 3020) us
    tl.call(tl.calls["stream_sync"], 30 * US, 3025 * US)  # main thread waits on it
    work_start, work_end = 150 * US, 2100 * US
    tl.op("autograd::engine::evaluate_function: MmBackward0", work_start, work_end + 10 * US, tid=bwd)
    b_launch = work_end + 2 * US
    b_start = b_launch + 8 * US
    tl.launch(GEMM, b_launch, b_start, 200 * US, stream=7, tid=bwd)  # B [2110, 2310) us
    step.end = 3100 * US
    tl.write(out / "rank-0.pt.trace.json.gz")
    gap = _gap(
        "stream",
        7,
        110 * US,
        b_start,
        "host_bound",
        wait=0,
        host=b_launch - 110 * US + 4 * US,
        host_op="autograd::engine::evaluate_function: MmBackward0",
        host_op_ns=work_end + 10 * US - 150 * US,
    )
    return {
        "steps": 1,
        "idle_gaps": [gap],
        "old_rule_class": "sync_wait",
        "idle_class_counts": {"device": {}, "stream": {"host_bound": 1}},
    }


@situation(
    "pageable-h2d-copy",
    "a blocking cudaMemcpy of pageable host memory: the call stages the data for 2 ms while the GPU "
    "idles, then the copy runs; the gap is the host issuing its next activity (host_bound), not a "
    "sync_wait, although cudaMemcpy blocks",
)
def pageable_h2d_copy(out: Path) -> dict:
    tl = Timeline()
    step = tl.op("ProfilerStep#0", 0, 0, cat="user_annotation")
    tl.launch(GEMM, 2 * US, 10 * US, 100 * US)  # A [10, 110) us
    call_start, copy_start, copy_dur = 100 * US, 2100 * US, 90 * US
    tl.launch(
        "Memcpy HtoD (Pageable -> Device)",
        call_start,
        copy_start,
        copy_dur,
        kind="memcpy",
        call="cudaMemcpy",
        call_dur=copy_start + copy_dur + 5 * US - call_start,
    )
    tl.launch(ADD, 2200 * US, 2208 * US, 50 * US)  # B after the copy returned
    step.end = 2300 * US
    tl.write(out / "rank-0.pt.trace.json.gz")
    copy_gap = _gap(
        "device",
        None,
        110 * US,
        copy_start,
        "host_bound",
        wait=0,
        host=copy_start - 110 * US,
        host_op="cudaMemcpy",
        host_op_ns=copy_start - 110 * US,
    )
    # after the copy [2190, 2208) us: the host is in cudaMemcpy until 2195 (a wait here: it is not B's
    # launch call), then 5 us of host and B's 4 us call (host 9 us), 4 us of latency; nothing below the
    # step covers more than half of the 18 us
    after = _gap(
        "device",
        None,
        copy_start + copy_dur,
        2208 * US,
        "host_bound",
        wait=5 * US,
        host=9 * US,
        host_op="ProfilerStep#0",
        host_op_ns=18 * US,
    )
    return {
        "steps": 1,
        "idle_gaps": [copy_gap, after, {**copy_gap, "scope": "stream", "stream": 7}],
        "old_rule_class": "sync_wait",
        "idle_class_counts": {"device": {"host_bound": 2}, "stream": {"host_bound": 2}},
    }

"""Critical-path situations: a host blocked on the GPU is waiting for the GPU, a thread waiting for
another thread waits for what that thread waits for, and GPU work queued before the window is not host
time. Every figure of `expect` is exact (ns), derived by hand from the placed events (see each docstring).

expect keys read by tests/test_cp_situations.py:
  steps                       number of steps
  critical_path[step]         {"span_ns", "kinds_ns": {kind: ns}, "critical_stream", "critical_stream_ns"}
  step_breakdown[step]        {"host_setup_ns", "gpu_queued_ns"}
  step_queueing[step]         {"first_delay_ns", "gpu_queued", "queue_cause"}
  gpu_busy_share_min          lower bound of GPU busy / step wall (the situation's premise)
"""

from __future__ import annotations

from pathlib import Path

from . import situation
from .timeline import Timeline

US = 1_000
MS = 1_000_000
AUTOGRAD_TID = 4243


def _decode_steps_with_blocking_copy(tl: Timeline, copy_name: str, copy_call: str, steps: int = 3) -> dict:
    """Each step: 40 kernels launched 5 us apart (3 us calls), run back to back (50 us each) from 8 us
    after the first call's start; the copy of the sampled tokens is issued right away, its call returns
    when the copy is done; the copy starts 2 us after the last kernel (DMA latency).
    Path per step (s0 = step start): cpu [s0, s0+13 us] (step start, first launch call), launch_delay 5 us,
    40 x 50 us of kernels, kernel_gap 2 us, the copy 6 us (the step's last GPU activity ends the path).
    The copy's call began long before the copy: its launch must not beat the stream order.
    """
    t = 0
    cp, sb, sq = {}, {}, {}
    for step in range(steps):
        s0 = t
        op = tl.op(f"ProfilerStep#{step}", s0, 0, cat="user_annotation")
        host = s0 + 10 * US
        gpu = host + 8 * US
        for i in range(40):
            tl.launch(
                "void gemm_kernel<128>()" if i % 2 == 0 else "void rmsnorm_kernel<bf16>()",
                host,
                gpu,
                50 * US,
                stream=7,
                call_dur=3 * US,
            )
            host += 5 * US
            gpu += 50 * US
        copy_start = gpu + 2 * US
        c = tl.op("aten::copy_", host, copy_start + 6 * US + 3 * US)
        tl.launch(
            copy_name,
            host + 1 * US,
            copy_start,
            6 * US,
            stream=7,
            kind="memcpy",
            call=copy_call,
            call_dur=copy_start + 6 * US + 2 * US - (host + 1 * US),
        )
        end = c.end + 20 * US
        op.end = end
        cp[str(step)] = {
            "span_ns": 2026 * US,
            "kinds_ns": {"cpu": 13 * US, "launch_delay": 5 * US, "gpu": 2006 * US, "kernel_gap": 2 * US},
            "critical_stream": 7,
            "critical_stream_ns": 2006 * US,
        }
        sb[str(step)] = {"host_setup_ns": 13 * US, "gpu_queued_ns": 5 * US}
        sq[str(step)] = {"first_delay_ns": 5 * US, "gpu_queued": False, "queue_cause": None}
        t = end + 30 * US
    return {
        "steps": steps,
        "critical_path": cp,
        "step_breakdown": sb,
        "step_queueing": sq,
        "gpu_busy_share_min": 0.97,
    }


@situation(
    "blocking-d2h-copy",
    "decode steps whose GPU is ~99 % busy, each ending in a device-to-pageable cudaMemcpyAsync that "
    "blocks the host until the copy is done (the sampled token ids)",
)
def blocking_d2h_copy(out: Path) -> dict:
    tl = Timeline()
    expect = _decode_steps_with_blocking_copy(tl, "Memcpy DtoH (Device -> Pageable)", "cudaMemcpyAsync")
    tl.write(out / "rank-0.pt.trace.json.gz")
    return expect


@situation(
    "blocking-d2h-copy-amd",
    "the same decode steps on ROCm: the sampled tokens come back with hipMemcpyWithStream, a "
    "synchronous copy whose activity is named Device -> Host (no Pageable in its name)",
)
def blocking_d2h_copy_amd(out: Path) -> dict:
    tl = Timeline("amd")
    expect = _decode_steps_with_blocking_copy(tl, "Memcpy DtoH (Device -> Host)", "hipMemcpyWithStream")
    tl.write(out / "rank-0.pt.trace.json.gz")
    return expect


@situation(
    "gpu-queued-at-window-start",
    "the profiler window opens while the GPU is still busy with work launched before it: the first "
    "step's kernels start 30 ms after their launch with nothing visible on the GPU before them",
)
def gpu_queued_at_window_start(out: Path) -> dict:
    """Step 0 [0, ...]: 20 launches at 100 us + 5 us*i (3 us calls); kernel i runs at 30 ms + 100 us*i for
    100 us; a cudaStreamSynchronize from 210 us returns 10 us after the last kernel (32.01 ms).
    Path: cpu [0, 103 us] (step start + first launch call), gpu_queued [103 us, 30 ms], gpu 2 ms.
    Step 1 (s1 = step 0's end + 30 us): 10 launches at s1 + 10 us + 5 us*i, kernels at s1 + 18 us + 50 us*i,
    50 us each, then a sync: cpu 13 us, launch_delay 5 us, gpu 500 us.
    """
    tl = Timeline()
    q = 30 * MS
    p0 = tl.op("ProfilerStep#0", 0, 0, cat="user_annotation")
    for i in range(20):
        tl.launch(
            "void gemm_kernel<128>()",
            100 * US + 5 * US * i,
            q + 100 * US * i,
            100 * US,
            stream=7,
            call_dur=3 * US,
        )
    last_end = q + 2 * MS
    tl.stream_sync(210 * US, last_end + 10 * US, 7)
    p0.end = last_end + 30 * US
    s1 = p0.end + 30 * US
    p1 = tl.op("ProfilerStep#1", s1, 0, cat="user_annotation")
    for i in range(10):
        tl.launch(
            "void gemm_kernel<128>()",
            s1 + 10 * US + 5 * US * i,
            s1 + 18 * US + 50 * US * i,
            50 * US,
            stream=7,
            call_dur=3 * US,
        )
    tl.stream_sync(s1 + 70 * US, s1 + 518 * US + 10 * US, 7)
    p1.end = s1 + 560 * US
    tl.write(out / "rank-0.pt.trace.json.gz")
    return {
        "steps": 2,
        "critical_path": {
            "0": {
                "span_ns": q + 2 * MS,
                "kinds_ns": {"cpu": 103 * US, "gpu_queued": q - 103 * US, "gpu": 2 * MS},
                "critical_stream": 7,
                "critical_stream_ns": 2 * MS,
            },
            "1": {
                "span_ns": 518 * US,
                "kinds_ns": {"cpu": 13 * US, "launch_delay": 5 * US, "gpu": 500 * US},
                "critical_stream": 7,
                "critical_stream_ns": 500 * US,
            },
        },
        "step_breakdown": {
            "0": {"host_setup_ns": 103 * US, "gpu_queued_ns": q - 103 * US},
            "1": {"host_setup_ns": 13 * US, "gpu_queued_ns": 5 * US},
        },
        "step_queueing": {
            "0": {
                "first_delay_ns": q - 103 * US,
                "gpu_queued": True,
                "queue_cause": "unseen_work_or_clock_offset",
            },
            "1": {"first_delay_ns": 5 * US, "gpu_queued": False, "queue_cause": None},
        },
        "gpu_busy_share_min": 0.0,
    }


@situation(
    "ddp-backward-thread",
    "a DDP training step: the main thread launches the forward, then waits inside backward() while "
    "the autograd thread launches the backward kernels, an NCCL all-reduce on a second stream (event "
    "waits both ways) and a blocking grad-norm .item() copy; then the main thread runs the optimizer",
)
def ddp_backward_thread(out: Path) -> dict:
    """Main thread (tid 4242): 10 forward launches at 10 us + 5 us*i (4 us calls), kernels on stream 7 at
    20 us + 100 us*i (100 us); the loss-grad fill launched at 70 us runs 1020..1030 us; `## backward ##`
    from 80 us to 3360 us without a CUDA call. Autograd thread (tid 4243): 10 backward launches at
    100 us + 10 us*i, kernels at 1030 us + 150 us*i (150 us, queued behind the forward); record on 7 at
    200 us, wait on 13 at 204 us, ncclDevKernel_AllReduce launched at 208 us, running 2535..3335 us;
    record on 13 at 220 us, wait on 7 at 224 us; a D2H copy to pageable memory called at 230 us, running
    3340..3344 us, its call returning at 3350 us. Main thread: 5 optimizer launches at 3370 us + 5 us*i,
    kernels at 3380 us + 50 us*j (50 us).
    Path: cpu [0, 14] (step start + first launch), launch_delay [14, 20], forward + fill + backward on 7
    [20, 2530], sync_wait [2530, 2535] (event), all-reduce on 13 [2535, 3335], sync_wait [3335, 3340]
    (event), the copy [3340, 3344], sync_wait [3344, 3350] (the blocked call), cpu [3350, 3374] (hand-off
    to the main thread + its launch call), launch_delay [3374, 3380], optimizer [3380, 3630].
    Program order on the main thread across its 3.3 ms wait would instead make that time `cpu`.
    """
    tl = Timeline()
    tl.op("ProfilerStep#0", 0, 3700 * US, cat="user_annotation")
    tl.op("## forward ##", 5 * US, 76 * US, cat="user_annotation")
    for i in range(10):
        tl.launch(
            "void cutlass_gemm_fwd<128>()", 10 * US + 5 * US * i, 20 * US + 100 * US * i, 100 * US, stream=7
        )
    tl.launch("void at::native::fill_kernel<float>()", 70 * US, 1020 * US, 10 * US, stream=7)
    tl.op("## backward ##", 80 * US, 3360 * US, cat="user_annotation")
    a = AUTOGRAD_TID
    tl.op("autograd::engine::evaluate_function: MmBackward0", 95 * US, 3355 * US, tid=a)
    for i in range(10):
        tl.launch(
            "void cutlass_gemm_bwd<128>()",
            100 * US + 10 * US * i,
            1030 * US + 150 * US * i,
            150 * US,
            stream=7,
            tid=a,
        )
    tl.record_and_wait(200 * US, 204 * US, 7, 13, tid=a)
    tl.launch(
        "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevComm*, unsigned long, ncclWork*)",
        208 * US,
        2535 * US,
        800 * US,
        stream=13,
        tid=a,
    )
    tl.record_and_wait(220 * US, 224 * US, 13, 7, tid=a)
    tl.launch(
        "Memcpy DtoH (Device -> Pageable)",
        230 * US,
        3340 * US,
        4 * US,
        stream=7,
        kind="memcpy",
        call_dur=3120 * US,
        tid=a,
    )
    tl.op("Optimizer.step#SGD.step", 3365 * US, 3400 * US, cat="user_annotation")
    for j in range(5):
        tl.launch(
            "void at::native::multi_tensor_apply_kernel<sgd>()",
            3370 * US + 5 * US * j,
            3380 * US + 50 * US * j,
            50 * US,
            stream=7,
        )
    tl.write(out / "rank-0.pt.trace.json.gz")
    gpu = (250 + 4 + 800 + 1500 + 10 + 1000) * US
    return {
        "steps": 1,
        "critical_path": {
            "0": {
                "span_ns": 3630 * US,
                "kinds_ns": {"cpu": 38 * US, "launch_delay": 12 * US, "sync_wait": 16 * US, "gpu": gpu},
                "critical_stream": 7,
                "critical_stream_ns": gpu - 800 * US,
            }
        },
        "step_breakdown": {"0": {"host_setup_ns": 14 * US, "gpu_queued_ns": 6 * US}},
        "step_queueing": {"0": {"first_delay_ns": 6 * US, "gpu_queued": False, "queue_cause": None}},
        "gpu_busy_share_min": 0.95,
    }


@situation(
    "host-runs-ahead",
    "two training steps without a sync between them: the host launches step 1 while the GPU still "
    "runs step 0, so step 1's first kernel waits 3.8 ms on the GPU behind step 0's work",
)
def host_runs_ahead(out: Path) -> dict:
    """Step 0 (host 0..200 us): 20 launches at 10 us + 5 us*i (3 us calls), kernels back to back from 18 us,
    200 us each (to 4018 us). Step 1 (host 200 us..8040 us): 20 launches at 210 us + 5 us*i, kernels back
    to back from 4018 us (to 8018 us); a cudaDeviceSynchronize from 400 us returns at 8030 us.
    Step 1's first kernel, launched at 213 us, starts at 4018 us: 3805 us queued behind step 0's kernels,
    visible in the trace. Its path starts at that kernel (its dependency, step 0's last kernel, is outside
    the step): 4000 us of GPU work.
    """
    tl = Timeline()
    tl.op("ProfilerStep#0", 0, 200 * US, cat="user_annotation")
    for i in range(20):
        tl.launch(
            "void cutlass_gemm<128>()",
            10 * US + 5 * US * i,
            18 * US + 200 * US * i,
            200 * US,
            stream=7,
            call_dur=3 * US,
        )
    tl.op("ProfilerStep#1", 200 * US, 8040 * US, cat="user_annotation")
    for i in range(20):
        tl.launch(
            "void cutlass_gemm<128>()",
            210 * US + 5 * US * i,
            4018 * US + 200 * US * i,
            200 * US,
            stream=7,
            call_dur=3 * US,
        )
    tl.call(tl.calls["device_sync"], 400 * US, 8030 * US)
    tl.write(out / "rank-0.pt.trace.json.gz")
    return {
        "steps": 2,
        "critical_path": {
            "0": {
                "span_ns": 4018 * US,
                "kinds_ns": {"cpu": 13 * US, "launch_delay": 5 * US, "gpu": 4 * MS},
                "critical_stream": 7,
                "critical_stream_ns": 4 * MS,
            },
            "1": {
                "span_ns": 4 * MS,
                "kinds_ns": {"gpu": 4 * MS},
                "critical_stream": 7,
                "critical_stream_ns": 4 * MS,
            },
        },
        "step_breakdown": {
            "0": {"host_setup_ns": 13 * US, "gpu_queued_ns": 5 * US},
            "1": {"host_setup_ns": 13 * US, "gpu_queued_ns": 3805 * US},
        },
        "step_queueing": {
            "0": {"first_delay_ns": 5 * US, "gpu_queued": False, "queue_cause": None},
            "1": {"first_delay_ns": 3805 * US, "gpu_queued": True, "queue_cause": "earlier_gpu_work"},
        },
        "gpu_busy_share_min": 0.5,
    }

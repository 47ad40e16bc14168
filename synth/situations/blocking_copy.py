"""Critical-path situations: a host blocked on the GPU is waiting for the GPU."""
from __future__ import annotations

from pathlib import Path

from . import situation
from .timeline import Timeline

US = 1_000
MS = 1_000_000


@situation("blocking-d2h-copy",
           "decode steps whose GPU is ~99 % busy, each ending in a device-to-pageable cudaMemcpyAsync that "
           "blocks the host until the copy is done (the sampled token ids)")
def blocking_d2h_copy(out: Path) -> dict:
    tl = Timeline()
    t = 0
    steps = 3
    gpu_busy = 0
    span_total = 0
    for step in range(steps):
        s0 = t
        op = tl.op(f"ProfilerStep#{step}", s0, 0, cat="user_annotation")
        # the host launches 40 kernels quickly (2 us apart); the GPU runs them back to back, 50 us each
        host = s0 + 10 * US
        gpu = host + 8 * US
        first_gpu = gpu
        for i in range(40):
            tl.launch("void gemm_kernel<128>()" if i % 2 == 0 else "void rmsnorm_kernel<bf16>()",
                      host, gpu, 50 * US, stream=7, call_dur=3 * US)
            host += 5 * US
            gpu += 50 * US
        # the copy of the sampled tokens: issued right away, runs after the last kernel, the call returns
        # when it is done
        copy_start = gpu
        cp = tl.op("aten::copy_", host, copy_start + 6 * US + 3 * US)
        tl.launch("Memcpy DtoH (Device -> Pageable)", host + 1 * US, copy_start, 6 * US, stream=7, kind="memcpy",
                  call_dur=copy_start + 6 * US + 2 * US - (host + 1 * US))
        end = cp.end + 20 * US
        op.end = end
        gpu_busy += copy_start + 6 * US - first_gpu
        span_total += copy_start + 6 * US - first_gpu
        t = end + 30 * US
    tl.write(out / "rank-0.pt.trace.json.gz")
    return {"steps": steps,
            "critical_path": {"min_gpu_share": 0.9, "critical_stream": 7},
            "gpu_busy_share_min": 0.99}

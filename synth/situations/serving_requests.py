"""Serving situations: what each request cost, where the trace (or a requests file) names the requests.

A serving engineer asks what one request cost the GPUs: its prefill (the TTFT side) and its decode tokens.
A step's GPU time is shared by the requests batched in it, so a correct answer splits it (by tokens, and
attention by tokens x kv) instead of charging each request the whole step. These situations write SGLang
step annotations with the requests of each step, either as request[...] annotations in the trace or as a
requests file beside it, and the split a correct analysis gives, computed here from the same numbers
(the largest-remainder rule of sql/request_step_cost, in whole ns).
"""

from __future__ import annotations

import csv
from fractions import Fraction
from pathlib import Path

from . import situation
from .serving_batches import ALLREDUCE, FLASH, GEMM
from .timeline import Timeline

US = 1_000
ADD = (
    "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>, "
    "at::detail::Array<char*, 3> >(int, at::native::CUDAFunctor_add<c10::BFloat16>, at::detail::Array<char*, 3>)"
)

# (step annotation, [(request, tokens, kv, stated phase)], [(kernel, category, GPU ns)]); durations are odd
# on purpose: the splits leave remainders, so the rule for the ns left over is tested too
STEPS = [
    (
        "step[EXTEND bs=2]",
        [("ra", 100, 100, None), ("rb", 60, 60, None)],
        [(GEMM, "gemm", 200_007), (FLASH, "attention", 50_003), (ADD, "elementwise", 10_001)],
    ),
    (
        "step[DECODE bs=3]",
        [("ra", 1, 101, None), ("rb", 1, 61, None), ("rc", 1, 900, None)],
        [(GEMM, "gemm", 100_001), (FLASH, "attention", 30_002), (ALLREDUCE, "communication", 7_777)],
    ),
    # chunked prefill beside a decode: the step is mixed, each request's phase comes from its tokens
    (
        "step[MIXED bs=2]",
        [("rd", 200, 200, None), ("ra", 1, 102, None)],
        [(GEMM, "gemm", 150_001), (FLASH, "attention", 40_005)],
    ),
    # a speculative-decoding step: 4 draft tokens are decode because the request says so
    (
        "step[MIXED bs=2]",
        [("rd", 4, 204, "decode"), ("rb", 1, 62, None)],
        [(GEMM, "gemm", 80_003), (FLASH, "attention", 20_001)],
    ),
    # requests named without their tokens: the step is split equally
    ("step[DECODE bs=2]", [("ra", None, None, None), ("rd", None, None, None)], [(GEMM, "gemm", 90_001)]),
]


def _apportion(total: int, weights: list[int], names: list[str]) -> list[int]:
    """Whole-ns shares of total in proportion to weights: floors, then the ns left over one each to the
    largest remainders (ties by name)."""
    exact = [Fraction(total * w, sum(weights)) for w in weights]
    shares = [int(e) for e in exact]
    order = sorted(range(len(weights)), key=lambda i: (-(exact[i] - shares[i]), names[i]))
    for i in order[: total - sum(shares)]:
        shares[i] += 1
    return shares


def _phase(step_name: str, tokens: int | None, stated: str | None) -> str:
    if stated:
        return stated
    if "EXTEND" in step_name:
        return "prefill"
    if "DECODE" in step_name:
        return "decode"
    return "decode" if tokens == 1 else "prefill" if tokens and tokens > 1 else "unknown"


def _truth() -> dict:
    rows, per_request = [], {}
    for step, (name, requests, kernels) in enumerate(STEPS):
        names = [r[0] for r in requests]
        attn = sum(d for _, cat, d in kernels if cat == "attention")
        other = sum(d for _, cat, d in kernels if cat != "attention")
        by_tokens = all(r[1] is not None for r in requests)
        by_q_kv = by_tokens and all(r[2] is not None for r in requests)
        w_other = [r[1] if by_tokens else 1 for r in requests]
        w_attn = [r[1] * r[2] for r in requests] if by_q_kv else w_other
        attn_shares = _apportion(attn, w_attn, names)
        other_shares = _apportion(other, w_other, names)
        for (rid, tokens, kv, stated), a, o in zip(requests, attn_shares, other_shares):
            phase = _phase(name, tokens, stated)
            rows.append(
                {
                    "step": step,
                    "request_id": rid,
                    "phase": phase,
                    "tokens": tokens,
                    "kv_tokens": kv,
                    "attention_ns": a,
                    "other_ns": o,
                    "gpu_ns": a + o,
                    "step_gpu_ns": attn + other,
                    "requests_in_step": len(requests),
                    "attention_split": "tokens_x_kv" if by_q_kv else "tokens" if by_tokens else "equal",
                    "other_split": "tokens" if by_tokens else "equal",
                }
            )
            r = per_request.setdefault(
                rid,
                {
                    "request_id": rid,
                    "steps": 0,
                    "prefill_steps": 0,
                    "decode_steps": 0,
                    "first_step": step,
                    "last_step": step,
                    "prefill_tokens": 0,
                    "decode_tokens": 0,
                    "max_kv_tokens": None,
                    "prefill_gpu_ns": 0,
                    "decode_gpu_ns": 0,
                    "unknown_gpu_ns": 0,
                    "gpu_ns": 0,
                    "attention_gpu_ns": 0,
                },
            )
            r["steps"] += 1
            r["last_step"] = step
            if phase in ("prefill", "decode"):
                r[f"{phase}_steps"] += 1
                r[f"{phase}_tokens"] += tokens or 0
            r[f"{phase}_gpu_ns"] += a + o
            r["gpu_ns"] += a + o
            r["attention_gpu_ns"] += a
            if kv is not None:
                r["max_kv_tokens"] = max(kv, r["max_kv_tokens"] or 0)
    for r in per_request.values():
        r["decode_gpu_ns_per_token"] = (
            (r["decode_gpu_ns"] / r["decode_tokens"]) if r["decode_tokens"] else None
        )
    return {
        "request_step_cost": rows,
        "request_cost": sorted(per_request.values(), key=lambda r: r["request_id"]),
    }


def _field(name: str, value) -> str:
    return "" if value is None else f" {name}={value}"


def _write(out: Path, annotate: bool) -> Timeline:
    tl = Timeline(device_name="NVIDIA H100 80GB HBM3")
    for step, (name, requests, kernels) in enumerate(STEPS):
        t0 = step * 1_000 * US
        tl.op(name, t0, t0 + 900 * US, cat="user_annotation")
        if annotate:
            for i, (rid, tokens, kv, stated) in enumerate(requests):
                text = (
                    f"request[id={rid}{_field('tokens', tokens)}{_field('kv', kv)}{_field('phase', stated)}]"
                )
                tl.op(text, t0 + (1 + 2 * i) * US, t0 + (2 + 2 * i) * US, cat="user_annotation")
            if step == 4:  # the same request annotated twice in one step counts once
                tl.op("request[id=ra]", t0 + 20 * US, t0 + 21 * US, cat="user_annotation")
        gpu = t0 + 50 * US
        for j, (kernel, _, dur) in enumerate(kernels):
            stream = 20 if kernel == ALLREDUCE else 7
            tl.launch(kernel, t0 + (30 + 5 * j) * US, gpu, dur, stream=stream)
            gpu += dur + 1_000
    tl.write(out / "sglang-TP-0-requests.trace.json.gz")
    return tl


@situation(
    "serving-requests",
    "SGLang on an H100: five steps (EXTEND, DECODE, chunked-prefill MIXED, speculative decode, a step "
    "without token counts) whose requests are named by request[id=.. tokens=.. kv=..] annotations; "
    "each request's share of the GPU time, split by tokens (attention by tokens x kv)",
)
def serving_requests(out: Path) -> dict:
    _write(out, annotate=True)
    return {**_truth(), "source": "annotation"}


REQUESTS_FILE = "requests.csv"


@situation(
    "serving-requests-file",
    "The same five steps without request annotations; their requests are in requests.csv beside the "
    "trace, for `tracehouse ingest DIR --requests DIR/requests.csv` (without it, no request is known)",
)
def serving_requests_file(out: Path) -> dict:
    _write(out, annotate=False)
    sub = out / "requests"
    sub.mkdir(exist_ok=True)
    with open(sub / REQUESTS_FILE, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["step", "request_id", "tokens", "kv_tokens", "phase", "rank"])
        for step, (_, requests, _) in enumerate(STEPS):
            for rid, tokens, kv, stated in requests:
                writer.writerow(
                    [step, rid, "" if tokens is None else tokens, "" if kv is None else kv, stated or "", ""]
                )
    return {**_truth(), "source": "file", "requests_file": f"requests/{REQUESTS_FILE}"}

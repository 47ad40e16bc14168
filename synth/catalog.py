"""Kernel catalogue of the synthetic workloads.

Each logical operation of the synthetic models maps, per vendor, to one real-looking kernel: its name,
the category we *intend* it to have (the vocabulary of docs/words.md; recorded in ground_truth.json as
`kernel_categories`, so a mismatch with tracehouse's rule table shows up as a test failure, not as a
silent drift), a base duration in integer nanoseconds, launch geometry, the Python site that launches
it and the launch API. Names are modelled on what SGLang / PyTorch / TRT-LLM / aiter kernels are called
in real profiles; durations are plausible for a DeepSeek-style MoE layer slice at TP=EP=ranks.
"""

from __future__ import annotations

from .kernel import Kernel
from .serving_kernels import AMD_SERVING, NV_SERVING
from .training_kernels import AMD_TRAIN, NV_TRAIN

_NV = "nvidia"
_AMD = "amd"


def serving_kernels(vendor: str) -> dict[str, Kernel]:
    return AMD_SERVING if vendor == _AMD else NV_SERVING


def training_kernels(vendor: str) -> dict[str, Kernel]:
    return AMD_TRAIN if vendor == _AMD else NV_TRAIN


# ---- device properties, copied in shape from real traces ----------------------------------------
def device_properties(vendor: str, n: int) -> list[dict]:
    if vendor == _AMD:
        base = {
            "name": "AMD Instinct MI300X",
            "totalGlobalMem": 206141652992,
            "computeMajor": 9,
            "computeMinor": 4,
            "maxThreadsPerBlock": 1024,
            "maxThreadsPerMultiprocessor": 2048,
            "regsPerBlock": 65536,
            "warpSize": 64,
            "sharedMemPerBlock": 65536,
            "numSms": 304,
            "maxSharedMemoryPerMultiProcessor": 65536,
        }
    else:
        base = {
            "name": "NVIDIA H200",
            "totalGlobalMem": 150109782016,
            "computeMajor": 9,
            "computeMinor": 0,
            "maxThreadsPerBlock": 1024,
            "maxThreadsPerMultiprocessor": 2048,
            "regsPerBlock": 65536,
            "warpSize": 32,
            "sharedMemPerBlock": 49152,
            "numSms": 132,
            "regsPerMultiprocessor": 65536,
            "sharedMemPerBlockOptin": 232448,
            "sharedMemPerMultiprocessor": 233472,
        }
    return [{"id": i, **base} for i in range(max(n, 1))]

"""The runtime API calls a simulated rank makes, by vendor (CUDA, HIP), and their callback ids as traces
record them."""

from __future__ import annotations

NV = {
    "launch": "cudaLaunchKernel",
    "launch_drv": "cuLaunchKernelEx",
    "graph": "cudaGraphLaunch",
    "memcpy": "cudaMemcpyAsync",
    "memset": "cudaMemsetAsync",
    "sync": "cudaStreamSynchronize",
    "record": "cudaEventRecord",
    "wait": "cudaStreamWaitEvent",
    "begin": "cudaStreamBeginCapture",
    "end": "cudaStreamEndCapture",
    "inst": "cudaGraphInstantiateWithFlags",
}
AMD = {
    "launch": "hipLaunchKernel",
    "launch_drv": "hipExtModuleLaunchKernel",
    "graph": "hipGraphLaunch",
    "memcpy": "hipMemcpyAsync",
    "memset": "hipMemsetAsync",
    "sync": "hipStreamSynchronize",
    "record": "hipEventRecord",
    "wait": "hipStreamWaitEvent",
    "begin": "hipStreamBeginCapture",
    "end": "hipStreamEndCapture",
    "inst": "hipGraphInstantiateWithFlags",
}
# CUPTI callback ids (NVIDIA `cbid`) and roctracer ids (AMD `cid`), as seen in real traces where known.
CBID = {
    "cudaLaunchKernel": 211,
    "cuLaunchKernelEx": 652,
    "cudaGraphLaunch": 311,
    "cudaMemcpyAsync": 41,
    "cudaMemsetAsync": 51,
    "cudaStreamSynchronize": 131,
    "cudaEventRecord": 135,
    "cudaStreamWaitEvent": 147,
    "cudaStreamBeginCapture": 305,
    "cudaStreamEndCapture": 306,
    "cudaGraphInstantiateWithFlags": 404,
}
CID = {
    "hipLaunchKernel": 107,
    "hipExtModuleLaunchKernel": 65,
    "hipGraphLaunch": 215,
    "hipMemcpyAsync": 134,
    "hipMemsetAsync": 136,
    "hipStreamSynchronize": 207,
    "hipEventRecord": 52,
    "hipStreamWaitEvent": 200,
    "hipStreamBeginCapture": 219,
    "hipStreamEndCapture": 220,
    "hipGraphInstantiateWithFlags": 231,
}

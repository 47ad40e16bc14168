"""Launch-site and layer situations: the site is the model/framework line, the layer is the layer.

- graph-replay-plumbing-sites: a CUDA-graph replay whose capture stacks run through launcher plumbing
  (Triton driver, Inductor's generated `call`/`partition_0`, torch/_ops.py, AITER's jit wrapper,
  functools) down from a framework file; one launch has only plumbing frames.
- eager-module-sites: an eager run with nn.Module frames: sites in the model file, module paths.
- no-python-stacks: the same eager work recorded without with_stack: no site, no module path.
- forward-per-image: a 4-layer model whose forward runs once per image (3 images): the layer is the
  pattern (4 × 3 layers), not the forward pass; layer 0 starts with a norm kernel that differs from the
  other layers' (so the repetition starts one kernel into the layer).
"""

from __future__ import annotations

from pathlib import Path

from . import situation
from .timeline import Timeline

US = 1_000

# (kernel, [(file, line, function) outermost first ...], [modules outermost first])
FUSED_MOE = "vllm/model_executor/layers/fused_moe/fused_moe.py"
INDUCTOR = "/tmp/torchinductor_root/ab/cabcdef0123456789abcdef0123456789abcdef0123456789ab.py"
CAPTURE_LAUNCHES = [
    (
        "triton_poi_fused_moe_0",
        [
            (FUSED_MOE, 1200, "fused_experts"),
            ("torch/_ops.py", 840, "__call__"),
            (INDUCTOR, 88, "partition_0"),
            (INDUCTOR, 120, "call"),
            ("torch/_inductor/runtime/triton_heuristics.py", 1245, "run"),
            ("<string>", 1, "launcher"),
            ("triton/backends/nvidia/driver.py", 634, "__call__"),
        ],
        ["Qwen3ForCausalLM_0", "Qwen3Model_0", "Qwen3DecoderLayer_0", "FusedMoE_0"],
    ),
    (
        "_ZN5aiter24add_rmsnorm_quant_kernel",
        [
            ("sglang/srt/layers/layernorm.py", 281, "forward_aiter"),
            ("/usr/lib/python3.12/functools.py", 41, "wrapper"),
            ("aiter/jit/core.py", 1396, "wrapper"),
        ],
        ["Qwen3ForCausalLM_0", "Qwen3Model_0", "Qwen3DecoderLayer_0", "RMSNorm_0"],
    ),
    (
        "Cijk_Alik_Bljk_BBS_BH_gemm",
        [
            ("sglang/srt/layers/linear.py", 461, "forward"),
            ("torch/utils/_device.py", 99, "__torch_function__"),
            ("torch/_ops.py", 1244, "__call__"),
        ],
        ["Qwen3ForCausalLM_0", "Qwen3Model_0", "Qwen3DecoderLayer_0", "QKVParallelLinear_0"],
    ),
    ("void at::native::vectorized_elementwise_kernel<4>", [("torch/_ops.py", 840, "__call__")], []),
]  # the last one: only plumbing frames and no module (site_class 'plumbing')


def _stacked(
    tl: Timeline, frames: list[tuple[str, int, str]], modules: list[str], start: int, end: int
) -> None:
    """Frames (outermost first) nested inside the modules, all around [start, end]."""
    depth = 0
    for m in modules:
        tl.module(
            m,
            start - 100 * (len(modules) + len(frames) - depth),
            end + 100 * (len(modules) + len(frames) - depth),
        )
        depth += 1
    for f, line, fn in frames:
        pad = 100 * (len(modules) + len(frames) - depth)
        tl.frame(f, line, fn, start - pad, end + pad)
        depth += 1


def _site(frames_and_rule: tuple[str, int, str]) -> str:
    f, line, fn = frames_and_rule
    return f"{f}({line}): {fn}"


@situation(
    "graph-replay-plumbing-sites",
    "two CUDA-graph replays of 4 kernels whose capture stacks go through Triton's driver, Inductor's "
    "generated call/partition_0, torch/_ops.py, aiter/jit and functools from framework files",
)
def graph_replay_plumbing_sites(out: Path) -> dict:
    # the capture trace: one capture window, each launch inside its stack
    cap = Timeline()
    t = 10 * US
    cap.call("cudaStreamBeginCapture", t, t + 2 * US)
    t += 5 * US
    for _, frames, modules in CAPTURE_LAUNCHES:
        _stacked(cap, frames, modules, t, t + 4 * US)
        cap.op("aten::op", t + 500, t + 3_500)
        cap.call(cap.calls["kernel"], t + 1_000, t + 3_000)
        t += 20 * US
    cap.call("cudaStreamEndCapture", t, t + 2 * US)
    cap.write(out / "capture_traces" / "capture_bs_8.pt.trace.json.gz")
    # the replay trace: two steps, each one graph launch under the framework's replay frames
    tl = Timeline()
    t = 0
    expected = []
    for step in range(2):
        op = tl.op(f"ProfilerStep#{step}", t, t + 400 * US, cat="user_annotation")
        host = t + 10 * US
        tl.frame(
            "sglang/srt/model_executor/cuda_graph_runner.py", 1333, "replay", host - 2 * US, host + 20 * US
        )
        tl.frame("torch/cuda/graphs.py", 139, "replay", host - 1 * US, host + 15 * US)
        gpu = host + 20 * US
        kernels = []
        for name, _, _ in CAPTURE_LAUNCHES:
            kernels.append((name, 7, gpu, 30 * US))
            gpu += 32 * US
        tl.graph(host, kernels)
        t = op.end + 10 * US
    for name, frames, modules in CAPTURE_LAUNCHES:
        plumbing_only = not modules
        expected.append(
            {
                "name": name,
                "site": _site(frames[-1] if plumbing_only else frames[0]),
                "site_class": "plumbing" if plumbing_only else "code",
                "inner_site": _site(frames[-1]),
                "plumbing_frames": 0 if plumbing_only else len(frames) - 1,
                "module_path": ".".join(modules) or None,
                "module": modules[-1] if modules else None,
            }
        )
    tl.write(out / "rank-0.pt.trace.json.gz")
    return {"launch_sites": expected, "replays": 2, "site_source": "capture"}


EAGER_LAYER = [  # (kernel, category, model line, torch frames under it, innermost module)
    ("void rmsnorm_kernel<bf16>", "norm", 60, [("torch/nn/functional.py", 2889, "rms_norm")], "Qwen2RMSNorm"),
    ("nvjet_qkv_gemm", "gemm", 218, [("torch/nn/modules/linear.py", 124, "forward")], "Linear"),
    (
        "flash_fwd_kernel",
        "attention",
        230,
        [("torch/nn/functional.py", 5600, "scaled_dot_product_attention")],
        None,
    ),
    ("nvjet_o_gemm", "gemm", 240, [("torch/nn/modules/linear.py", 124, "forward")], "Linear"),
]
MODEL_FILE = "transformers/models/qwen2/modeling_qwen2.py"


def _eager(tl: Timeline, layers: int) -> list[dict]:
    expected = []
    t = 10 * US
    op = tl.op("ProfilerStep#0", 0, 0, cat="user_annotation")
    gpu = 20 * US
    mod_counter: dict[str, int] = {}
    for layer in range(layers):
        for name, _, line, inner, module in EAGER_LAYER:
            modules = ["Qwen2ForCausalLM_0", "Qwen2Model_0", f"Qwen2DecoderLayer_{layer}"]
            if module:
                n = mod_counter.get(module, 0)
                mod_counter[module] = n + 1
                modules.append(f"{module}_{n}")
            frames = [
                (MODEL_FILE, line, "forward"),
                ("torch/nn/modules/module.py", 1779, "_call_impl"),
            ] + inner
            _stacked(tl, frames, modules, t, t + 6 * US)
            tl.op("aten::op", t + 1_000, t + 5_000)
            tl.launch(name, t + 2_000, gpu, 20 * US, call_dur=2 * US)
            expected.append(
                {
                    "name": name,
                    "site": f"{MODEL_FILE}({line}): forward",
                    "inner_site": "{}({}): {}".format(*inner[-1]),
                    "module_path": ".".join(modules),
                    "module": modules[-1],
                }
            )
            t += 30 * US
            gpu = max(gpu + 22 * US, t + 10 * US)
    op.end = gpu + 50 * US
    return expected


@situation(
    "eager-module-sites",
    "an eager 3-layer decoder with Python stacks and nn.Module frames: each kernel's site is the model "
    "file's line under torch/nn (Linear.forward, functional), with its module path",
)
def eager_module_sites(out: Path) -> dict:
    tl = Timeline()
    expected = _eager(tl, 3)
    tl.write(out / "rank-0.pt.trace.json.gz")
    return {
        "launch_sites": expected,
        "site_source": "trace",
        "layers": 3,
        "layer_period": len(EAGER_LAYER),
        "layer_start": "module",
    }


@situation(
    "no-python-stacks",
    "the eager 3-layer decoder recorded without with_stack: no Python frames, so no launch site and no "
    "module path (an absence, not a plumbing site)",
)
def no_python_stacks(out: Path) -> dict:
    tl = Timeline(with_stack=False)
    expected = _eager(tl, 3)
    tl.write(out / "rank-0.pt.trace.json.gz")
    return {"activities": len(expected), "site": None, "layers": 3, "layer_period": len(EAGER_LAYER)}


VIT_LAYER = [
    ("void layer_norm_kernel<bf16>", "norm"),
    ("cutlass_qkv_gemm", "gemm"),
    ("void softmax_warp_forward<bf16>", "activation"),
    ("cutlass_pv_gemm", "gemm"),
    ("cutlass_proj_gemm", "gemm"),
    ("void layer_norm_kernel<bf16>", "norm"),
    ("cutlass_fc1_gemm", "gemm"),
    ("void gelu_kernel<bf16>", "activation"),
    ("cutlass_fc2_gemm", "gemm"),
]


@situation(
    "forward-per-image",
    "a 4-layer ViT whose forward runs once per image for 3 images in one step: the repeating pattern "
    "is the 9-kernel layer (4 × 3 layers), not the 31-kernel forward pass",
)
def forward_per_image(out: Path) -> dict:
    images, layers = 3, 4
    tl = Timeline(with_stack=False)
    op = tl.op("ProfilerStep#0", 0, 0, cat="user_annotation")
    host, gpu = 10 * US, 20 * US
    spans = []

    def k(name: str, dur: int) -> None:
        nonlocal host, gpu
        tl.launch(name, host, gpu, dur, call_dur=2 * US)
        host += 5 * US
        gpu += dur + 1 * US

    head = [
        "void resize_bilinear<u8>",
        "void normalize_image<f32>",
        "void to_dtype_bf16",
        "void permute_nchw",
        "void conv2d_patch_embed<bf16>",
        "void add_pos_embed<bf16>",
    ]
    for _ in range(images):
        for name in head:  # preprocessing and the patch embedding
            k(name, 6 * US)
        for layer in range(layers):
            first = gpu
            for j, (name, _) in enumerate(VIT_LAYER):
                # layer 0's first norm has no residual to add: another kernel than the other layers'
                k("void layer_norm_kernel_noresidual<bf16>" if (layer, j) == (0, 0) else name, (10 + j) * US)
            spans.append(gpu - 1 * US - first)
        k("void layer_norm_final<bf16>", 8 * US)
        k("cutlass_classifier_gemm", 12 * US)
    op.end = gpu + 50 * US
    tl.write(out / "rank-0.pt.trace.json.gz")
    forward = len(head) + layers * len(VIT_LAYER) + 2
    return {
        "period": len(VIT_LAYER),
        "repeats": layers,
        "blocks": images,
        "total_layers": images * layers,
        "forward_kernels": forward,
        "activities": images * forward,
        "start_ordinal": len(head),
        "first_kernel": VIT_LAYER[0][0],
        "layer_span_ns": sorted(spans)[len(spans) // 2],
        "layer_start": "norm",
    }

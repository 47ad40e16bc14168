"""The run page's header facts that a reader takes in first: which ranks of which world the run holds and how
that world is split (tensor, pipeline, data, expert parallel), and the versions the trace names.

Parallelism is read from two places, never guessed: the process groups of the Kineto `distributedInfo`
(`pg_config`: a group whose description names one dimension, e.g. Megatron's
`TENSOR_MODEL_PARALLEL_GROUP`, gives that dimension's size) and the ranks' file names (`TP-<i>-PP-<j>`,
as ingest read them into runs.tp .. ep). The names give a size only when every rank of the world is in the run (the largest index
plus one); one `TP-0-PP-0` file of a world of 8 says where that rank sits, not how big TP is, and the header
says so rather than claim `TP 1`.
"""

from __future__ import annotations

import json
import re

DIMS = ("tp", "pp", "dp", "ep")
# the words of a process group's description (pg_desc) that name one dimension
_DIM_WORDS = {
    "tp": {"TENSOR", "TP"},
    "pp": {"PIPELINE", "PP"},
    "dp": {"DATA", "DP"},
    "ep": {"EXPERT", "EP", "MOE"},
}
# a framework's own version, as a key anywhere in a file's metadata (e.g. torch_env_info.torch_version)
_FRAMEWORK_VERSION = re.compile(r"^(torch|pytorch|vllm|sglang|tensorrt_llm)_version$")


def _metadata(run: dict) -> dict[str, dict]:
    """runs.metadata: per file name, that file's top-level metadata (a JSON text)."""
    raw = run.get("metadata")
    try:
        data = json.loads(raw) if isinstance(raw, str) else (raw or {})
    except ValueError:
        return {}
    return {k: v for k, v in data.items() if isinstance(v, dict)} if isinstance(data, dict) else {}


def _group_sizes(metas: list[dict]) -> dict[str, int]:
    """Dimension sizes from the process groups whose description names exactly one dimension."""
    sizes: dict[str, int] = {}
    for meta in metas:
        info = meta.get("distributedInfo")
        groups = info.get("pg_config") if isinstance(info, dict) else None
        for g in groups if isinstance(groups, list) else []:
            if not isinstance(g, dict) or not isinstance(g.get("pg_size"), int):
                continue
            words = set(re.split(r"[^A-Z0-9]+", str(g.get("pg_desc") or "").upper()))
            named = [d for d, w in _DIM_WORDS.items() if words & w]
            if len(named) == 1:
                sizes.setdefault(named[0], g["pg_size"])
    return sizes


def _name_sizes(run: dict, n_ranks: int, world: int | None) -> dict[str, int]:
    """Dimension sizes from the file names (runs.tp .. ep: the largest index the names give, plus one), only
    when every rank of the world is in the run: a part of the world says where its ranks sit, not the sizes."""
    if world is not None and n_ranks < world:
        return {}
    return {d: run[d] for d in DIMS if isinstance(run.get(d), int)}


def parallelism(run: dict) -> str:
    """'rank 0 of 8: TP 4 × PP 2', '8 ranks of 8: TP 4 × PP 2', 'rank 0 of 8 (how the world is split is
    not in the trace)', or '1 rank' (runs row: files, metadata, world_size, n_ranks)."""
    files = sorted(run.get("files") or [], key=lambda f: (f.get("rank") is None, f.get("rank") or 0))
    n = run.get("n_ranks") or len(files) or 1
    world = run.get("world_size") if isinstance(run.get("world_size"), int) else None
    metas = list(_metadata(run).values())
    sizes = {**_name_sizes(run, n, world), **_group_sizes(metas)}
    sizes = {d: v for d, v in sizes.items() if v > 1 or (world or n) == 1}
    of = f" of {world}" if world else ""
    who = f"rank {files[0]['rank']}{of}" if n == 1 and files else f"{n} ranks{of}"
    split = " × ".join(f"{d.upper()} {sizes[d]}" for d in DIMS if d in sizes)
    if split:
        return f"{who}: {split}"
    if (world or n) <= 1:
        return "1 rank"
    return f"{who} (how the world is split is not in the trace)"


def _runtime(meta: dict) -> list[str]:
    out = []
    cuda = meta.get("cuda_runtime_version")
    if isinstance(cuda, int) and cuda > 0:
        out.append(f"CUDA {cuda // 1000}.{cuda % 1000 // 10}")
    hip = meta.get("hip_runtime_version")
    if isinstance(hip, int) and hip > 0:
        out.append(f"HIP {hip // 10_000_000}.{hip // 100_000 % 100}")
    info = meta.get("distributedInfo")
    nccl = info.get("nccl_version") if isinstance(info, dict) else None
    if isinstance(nccl, str) and nccl:
        out.append(f"{'RCCL' if hip else 'NCCL'} {nccl}")
    return out


def _find_version(value, depth: int = 0) -> str | None:
    """The first `<framework>_version` key's value in a (nested) metadata object, a few levels deep."""
    if depth > 4 or not isinstance(value, dict):
        return None
    for k, v in value.items():
        if _FRAMEWORK_VERSION.match(str(k)) and isinstance(v, str | int | float):
            return f"{str(k).removesuffix('_version')} {v}"
    for v in value.values():
        found = _find_version(v, depth + 1)
        if found:
            return found
    return None


def versions(run: dict) -> str | None:
    """The framework's version where a file's metadata has it (e.g. `torch 2.6.0+cu124`), then the
    runtime's and the collective library's (`CUDA 12.9`, `NCCL 2.27.5`); None when the trace names none."""
    metas = list(_metadata(run).values())
    if not metas:
        return None
    found = next((v for v in (_find_version(m) for m in metas) if v), None)
    parts = ([found] if found else []) + _runtime(metas[0])
    return ", ".join(parts) or None

"""What a trace file's name says: rank, TP/PP/DP/EP indices and the serving stage.

SGLang: `<id>-TP-<t>[-DP-<d>][-PP-<p>][-EP-<e>][-EXTEND|-DECODE].trace.json.gz`; vLLM / TRT-LLM:
`...rank-N...` or `..._rank_N...`; training: `rank-N.<host>_<pid>.<ts>.pt.trace.json.gz`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_INDEX = {
    dim: re.compile(rf"(?:^|[-_.]){dim}[-_]?(\d+)(?=$|[-_.])", re.IGNORECASE)
    for dim in ("TP", "PP", "DP", "EP")
}
_RANK = re.compile(r"(?:^|[-_.])rank[-_]?(\d+)(?=$|[-_.])", re.IGNORECASE)
_STAGE = re.compile(r"(?:^|[-_.])(EXTEND|PREFILL|DECODE|MIXED)(?=$|[-_.])")
_STAGE_PHASE = {"EXTEND": "prefill", "PREFILL": "prefill", "DECODE": "decode", "MIXED": "mixed"}


@dataclass(frozen=True)
class NameInfo:
    rank: int | None = None
    tp: int | None = None
    pp: int | None = None
    dp: int | None = None
    ep: int | None = None
    stage: str | None = None  # as written in the name, e.g. DECODE

    @property
    def phase(self) -> str | None:
        return _STAGE_PHASE.get(self.stage) if self.stage else None


def parse_trace_name(filename: str) -> NameInfo:
    """Parse one file name (not a path). Unknown parts are None."""
    found = {dim.lower(): int(m.group(1)) for dim, rx in _INDEX.items() if (m := rx.search(filename))}
    rank_match = _RANK.search(filename)
    stage_match = _STAGE.search(filename)
    return NameInfo(
        rank=int(rank_match.group(1)) if rank_match else None,
        stage=stage_match.group(1) if stage_match else None,
        **found,
    )

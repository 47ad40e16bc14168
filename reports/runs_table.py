"""The `tracehouse runs` listing: what a person scans for, one run a line, under 120 columns.

Figures come from run_metrics (stored per run by warehouse.metrics, computed once the first time a
listing or trend needs them), aggregated over ranks (rank NULL), for the phase with the most steps:
  steps      steps of that phase (per rank: the max over ranks)
  step_ms    median step time (run_metrics step_time_median_ns), ms (shown to the µs; exact in json)
  busy_%     GPU busy % of the step span (gpu_busy_pct: 0-100)
  top        the category with the most GPU time per step, and its % of the GPU time of all categories
  warn       number of kinds of warnings at ingest (what was skipped or repaired: `runs.warnings`)
The run id is cut to a prefix that is unique in the listing (12 characters, more when needed): every
command takes a unique prefix. A phase column says which phase the figures are of when the run has several. `--wide` adds every
`runs` column; `--format json` gives the whole rows.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

import pyarrow as pa

NARROW = ["run", "ingested", "what", "ranks", "phase", "steps", "step_ms", "busy_%", "top category", "warn"]
WHAT_WIDTH = 22
ID_WIDTH = 12  # a unique prefix of the run id names it everywhere (report --run, diff, label)


@dataclass
class Headline:
    phase: str | None = None
    steps: int | None = None
    step_ms: float | None = None
    busy_pct: float | None = None
    top: str | None = None


def headlines(metrics: pa.Table | None) -> dict[str, Headline]:
    """{run_id: Headline} from run_metrics rows (any ranks; rank NULL rows are used)."""
    out: dict[str, Headline] = {}
    if metrics is None:
        return out
    per: dict[tuple[str, str], dict[str, float]] = {}
    for r in metrics.to_pylist():
        if r["rank"] is None:
            per.setdefault((r["run_id"], r["phase"]), {})[r["metric"]] = r["value"]
    best: dict[str, tuple[str, dict[str, float]]] = {}
    for (run_id, phase), values in sorted(per.items()):
        if run_id not in best or values.get("steps", 0) > best[run_id][1].get("steps", 0):
            best[run_id] = (phase, values)
    for run_id, (phase, values) in best.items():
        cats = {
            k[len("category.") : -len("_ns_per_step")]: v
            for k, v in values.items()
            if k.startswith("category.") and k.endswith("_ns_per_step")
        }
        total = sum(cats.values())
        top = None
        if total > 0:
            name, value = max(cats.items(), key=lambda kv: (kv[1], kv[0]))
            top = f"{name} {100 * value / total:.0f}%"
        step = values.get("step_time_median_ns")
        out[run_id] = Headline(
            phase,
            int(values["steps"]) if values.get("steps") is not None else None,
            step / 1e6 if step is not None else None,
            round(values["gpu_busy_pct"], 1) if values.get("gpu_busy_pct") is not None else None,
            top,
        )
    return out


def what(framework: str | None, model: str | None, hardware: str | None, width: int = WHAT_WIDTH) -> str:
    """`sglang · Qwen3-8B · MI300X`: the parts known, the GPU model without vendor, memory or form factor."""
    hw = hardware
    for prefix in ("NVIDIA ", "AMD Instinct ", "AMD Radeon ", "AMD ", "Tesla "):
        if hw and hw.startswith(prefix):
            hw = hw[len(prefix) :]
    if hw:  # the GPU's model, without memory size and form factor (H100 80GB HBM3, A100-SXM4-80GB: --wide)
        hw = hw.replace("-", " ").split()[0]
    text = " · ".join(p for p in (framework, model, hw) if p)
    return text if len(text) <= width else text[: width - 1] + "…"


def narrow_rows(runs: list[dict], figures: dict[str, Headline]) -> tuple[list[str], list[tuple]]:
    rows = []
    multi_phase = False
    width = short_id_width([r["run_id"] for r in runs])
    for r in runs:
        h = figures.get(r["run_id"], Headline())
        multi_phase |= bool(h.phase and h.phase != "unknown")
        when = r["ingested_at"].strftime("%Y-%m-%d %H:%M") if r["ingested_at"] else None
        rows.append(
            (
                r["run_id"][:width],
                when,
                what(r["framework"], r["model"], r["hardware"]),
                r["n_ranks"],
                h.phase,
                h.steps,
                _fixed(h.step_ms, 3),
                _fixed(h.busy_pct, 1),
                h.top,
                len(r["warnings"] or {}),
            )
        )
    if not multi_phase:  # every run's steps are of unknown phase: the column says nothing
        i = NARROW.index("phase")
        return NARROW[:i] + NARROW[i + 1 :], [row[:i] + row[i + 1 :] for row in rows]
    return list(NARROW), rows


def _fixed(value: float | None, places: int) -> Decimal | None:
    """A figure with a fixed number of decimals (a Decimal: the table right-aligns it and prints it as is),
    so that a column's decimal points line up: 12920.212 over 5.980, 100.0 over 89.4 (a float would print
    as 12920.2 and 5.98, 100 and 89.4)."""
    return None if value is None else Decimal(f"{value:.{places}f}")


def short_id_width(run_ids: list[str], width: int = ID_WIDTH) -> int:
    """The shortest prefix length >= width under which the ids stay distinct."""
    longest = max((len(r) for r in run_ids), default=width)
    while width < longest and len({r[:width] for r in run_ids}) < len(set(run_ids)):
        width += 1
    return width

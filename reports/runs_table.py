"""The `tracehouse runs` listing: what a person scans for, one run a line, under 120 columns.

Figures come from run_metrics (stored per run by warehouse.metrics, computed once the first time a
listing or trend needs them), aggregated over ranks (rank NULL), for the phase with the most steps:
  steps      steps of that phase (per rank: the max over ranks)
  step_ms    median step time (run_metrics step_time_median_ns), ms (shown to the µs; exact in json)
  busy_%     GPU busy % of the step span (gpu_busy_pct: 0-100)
  top        the category with the most GPU time per step, and its % of the GPU time of all categories
  warn       number of kinds of warnings at ingest (what was skipped or repaired: `runs.warnings`)
The time of ingest is to the minute, without the year when every listed run is of this year.
Beside them, what tells runs apart: what ran (model · framework · phase · GPU), ranks, the commit, the
labels (those that differ between the listed runs first) and the files (the first one's name, `+N more`).
The run id is cut to a prefix that is unique in the listing (12 characters, more when needed): every
command takes a unique prefix; the commit likewise (8 characters, more when needed). A column that says
nothing of any listed run is left out: phase (which phase the figures are of) where each run's is its own
(in what), warn where no run has a warning, commit and labels where no run has one. The table fits its
width by cutting what, labels, files and top at their end, widest first, and each only as far as its
values stay apart while it can; `--wide` adds every `runs` column and cuts nothing; `--format json`,
`ndjson` and `csv` give the whole rows.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

import pyarrow as pa

NARROW = [
    "run",
    "ingested",
    "what",
    "ranks",
    "commit",
    "labels",
    "files",
    "phase",
    "steps",
    "step_ms",
    "busy_%",
    "top",
    "warn",
]
# cut, widest first, until a line fits the terminal (120 columns when not a terminal); the others stay whole
FLEXIBLE = ("what", "labels", "files", "top")
ID_WIDTH = 12  # a unique prefix of the run id names it everywhere (report RUN, diff, label)
COMMIT_WIDTH = 8  # a commit is shown by its first 8 characters, more where two listed commits share them
LABELS_IN_COLUMNS = ("commit", "commit_time")  # labels the commit column stands for
WHAT = ("framework", "model", "hardware", "phase")  # the `runs` columns `what` shows


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


def what(framework: str | None, model: str | None, hardware: str | None, phase: str | None = None) -> str:
    """`Qwen3-8B · sglang · decode · MI300X`: the parts known, the model first (what tells runs apart, kept
    when the column is cut at its end), the GPU model without vendor, memory or form factor."""
    hw = hardware
    for prefix in ("NVIDIA ", "AMD Instinct ", "AMD Radeon ", "AMD ", "Tesla "):
        if hw and hw.startswith(prefix):
            hw = hw[len(prefix) :]
    if hw:  # the GPU's model, without memory size and form factor (H100 80GB HBM3, A100-SXM4-80GB: --wide)
        hw = hw.replace("-", " ").split()[0]
    return " · ".join(p for p in (model, framework, phase if phase != "unknown" else None, hw) if p)


def labels_cell(run: dict, varying: set[str]) -> str:
    """`series=b config=tp2`: the run's labels less those its other columns show (the commit's, and one
    whose value is the run's own column of that name: model=X shown in what), those that differ between
    the listed runs first (they tell runs apart and survive a cut at the end), then the rest, by key."""
    labels = run["labels"] or {}
    keys = [k for k in labels if k not in LABELS_IN_COLUMNS and not (k in WHAT and labels[k] == run[k])]
    return " ".join(f"{k}={labels[k]}" for k in sorted(keys, key=lambda k: (k not in varying, k)))


def files_cell(files: list[dict] | None) -> str:
    """The first file's name (the lowest rank), and `+N more` for the others."""
    if not files:
        return ""
    first = min(files, key=lambda f: (f.get("rank") is None, f.get("rank") or 0, f["name"]))["name"]
    return first + (f" +{len(files) - 1} more" if len(files) > 1 else "")


def narrow_rows(runs: list[dict], figures: dict[str, Headline]) -> tuple[list[str], list[tuple]]:
    """The default listing: one tuple a run in NARROW's order, less `phase` when no run's figures are of a
    known phase and `warn` when no run has a warning."""
    rows = []
    width = short_id_width([r["run_id"] for r in runs])
    commit_width = short_id_width([r["commit"] or "" for r in runs], COMMIT_WIDTH)
    labels = [dict(r["labels"] or {}) for r in runs]
    varying = {k for k in set().union(*labels) if len({str(m.get(k)) for m in labels}) > 1}
    years = {r["ingested_at"].year for r in runs if r["ingested_at"]}
    when_format = (
        "%m-%d %H:%M" if years == {datetime.now().year} else "%Y-%m-%d %H:%M"
    )  # this year's: no year
    for r in runs:
        h = figures.get(r["run_id"], Headline())
        when = r["ingested_at"].strftime(when_format) if r["ingested_at"] else None
        rows.append(
            (
                r["run_id"][:width],
                when,
                what(*(r[k] for k in WHAT)),
                r["n_ranks"],
                (r["commit"] or "")[:commit_width] or None,
                labels_cell(r, varying),
                files_cell(r["files"]),
                h.phase,
                h.steps,
                _fixed(h.step_ms, 3),
                _fixed(h.busy_pct, 1),
                h.top,
                len(r["warnings"] or {}),
            )
        )
    phases = [(h.phase, r["phase"]) for r in runs for h in [figures.get(r["run_id"], Headline())]]
    says_nothing = {  # a column that says nothing new of any listed run is left out
        "phase": all(shown in (None, "unknown", run_phase) for shown, run_phase in phases),
        "warn": all(row[NARROW.index("warn")] == 0 for row in rows),
        "commit": all(not row[NARROW.index("commit")] for row in rows),
        "labels": all(not row[NARROW.index("labels")] for row in rows),
    }
    keep = [i for i, name in enumerate(NARROW) if not says_nothing.get(name)]
    return [NARROW[i] for i in keep], [tuple(row[i] for i in keep) for row in rows]


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

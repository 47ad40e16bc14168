"""The diff report: what changed between two runs, per category and per kernel, time per step.

Figures: GPU time (sum of durations, all ranks) of the activities inside steps, divided by the run's
rank-steps (rows of `steps`), i.e. the mean time per step of one rank, as run_metrics' rank-NULL rows:
sql/step_kernel_time (per activity name) and sql/run_step_time (per run) define them; this module
matches and adds them up.
Kernels are matched in three passes:
  1. exact name                                             match = exact
  2. normalized name (kernel_name_normalized), names grouped  match = normalized  (changed tile config...)
  3. what is left of a category on both sides, as one pair   match = category    (another library or
     vendor: flash_fwd_kernel ↔ attn_fwd, sm90_xmma_gemm ↔ Cijk_...)
Anything else is added (only in TARGET) or removed (only in BASE).

Before any figure, the verdict (reports.diff_verdict): whether the runs compare step for step. When a run has
no step markers (its one step is the whole trace window) the unit of every figure is the rank's window, not a
step, and the headline is per launch.
Each kernel row splits its change into a change of time per launch and a change of launch count (the two
add up to the row's delta exactly; n launches per unit and p ns per launch on each side):
  per_launch_effect_ns = (p_target - p_base) × (n_base + n_target) / 2
  count_effect_ns      = (n_target - n_base) × (p_base + p_target) / 2
A row with launches on one side only is all count effect. The per-launch headline is the ratio of the matched
rows' time per launch weighted by their mean launches: Σ w p_target / Σ w p_base, w = (n_base + n_target) / 2.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from tracehouse.reports.diff_verdict import Verdict, verdict
from tracehouse.reports.render import render
from tracehouse.warehouse.diff_facts import run_facts
from tracehouse.warehouse.engine import Connection, focused
from tracehouse.warehouse.runs import resolve_run


@dataclass
class RunInfo:
    run_id: str
    label: str  # what the user typed
    hardware: str | None
    framework: str | None
    model: str | None
    commit: str | None
    rank_steps: int  # rows of `steps`: the divisor of every per-step figure
    ranks: int
    gpu_ns_per_step: float  # all activities inside steps
    outside_steps_ns: int  # GPU time of activities in no step (not in any figure)


@dataclass
class CategoryRow:
    category: str
    base_ns: float
    target_ns: float
    delta_ns: float
    ratio: float | None  # target / base
    per_launch_effect_ns: float = 0.0  # its kernels' per_launch_effect_ns summed
    count_effect_ns: float = 0.0


@dataclass
class KernelRow:
    match: str  # exact, normalized, category, added, removed
    category: str
    label: str  # the name shown: the exact name, the normalized name, or the category
    base_names: list[str]
    target_names: list[str]
    base_ns: float
    target_ns: float
    delta_ns: float
    ratio: float | None
    base_launches: float  # per step
    target_launches: float
    changed: bool  # names differ (normalized / category matches)
    base_ns_per_launch: float | None = None  # None: no launch on that side
    target_ns_per_launch: float | None = None
    per_launch_ratio: float | None = None  # target / base time per launch (None: a side has no launch)
    per_launch_effect_ns: float = 0.0  # the part of delta_ns from the change of time per launch (module doc)
    count_effect_ns: float = 0.0  # the part from the change of launch count


@dataclass
class CriticalPathRow:
    part: str  # gpu category or non-gpu kind
    base_share: float
    target_share: float
    delta: float  # target - base, share points (0..1)


@dataclass
class DiffReport:
    base: RunInfo
    target: RunInfo
    total_base_ns: float
    total_target_ns: float
    total_delta_ns: float
    total_ratio: float | None
    categories: list[CategoryRow]
    kernels: list[KernelRow]
    top_movers: list[KernelRow]
    appeared: list[str]  # names in TARGET whose normalized name is not in BASE
    vanished: list[str]
    counts: dict[str, int]
    critical_path: list[CriticalPathRow] = field(default_factory=list)
    critical_path_available: bool = False
    notes: list[str] = field(default_factory=list)
    # step time by (phase, batch size) on both sides (sql/step_latency): only batch sizes both runs have
    batch_latency: list[dict] = field(default_factory=list)
    # per-request cost on both sides (sql/request_cost), when both runs name their requests
    request_cost: list[dict] = field(default_factory=list)
    # whether the runs compare step for step, and on what basis (reports.diff_verdict); None: not built
    verdict: Verdict | None = None
    unit: str = "step"  # what every figure is per: `step`, or `rank window` (basis per_launch)
    # the per-launch headline (module doc): matched rows' weighted time per launch, its ratio, and the
    # time their per-launch change and the launch-count change make of the total delta
    base_ns_per_launch: float | None = None
    target_ns_per_launch: float | None = None
    per_launch_ratio: float | None = None
    per_launch_effect_ns: float = 0.0
    count_effect_ns: float = 0.0


def _ratio(base: float, target: float) -> float | None:
    return target / base if base else None


def _run_info(con, facts: dict, label: str) -> tuple[RunInfo, dict[str, dict]]:
    """The run's header and its kernels by name, every figure per step as sql/step_kernel_time and
    sql/run_step_time define it."""
    run_id = facts["run_id"]
    row = con.execute(
        "SELECT hardware, framework, model, commit FROM runs WHERE run_id = ?", [run_id]
    ).fetchone()
    kernels = {}
    for name, kind, category, norm, ns, launches, _per_launch in facts["kernels"]:
        kernels[name] = {
            "name": name,
            "kind": kind,
            "category": category,
            "norm": norm,
            "ns": ns,
            "launches": launches,
        }
    info = RunInfo(
        run_id,
        label,
        row[0],
        row[1],
        row[2],
        row[3],
        facts["rank_steps"],
        facts["ranks"],
        facts["gpu_ns_per_step"],
        facts["outside_steps_ns"],
    )
    return info, kernels


def _row(match: str, category: str, label: str, base: list[dict], target: list[dict]) -> KernelRow:
    b = sum(k["ns"] for k in base)
    t = sum(k["ns"] for k in target)
    bn = [k["name"] for k in sorted(base, key=lambda k: -k["ns"])]
    tn = [k["name"] for k in sorted(target, key=lambda k: -k["ns"])]
    nb, nt = sum(k["launches"] for k in base), sum(k["launches"] for k in target)
    pb, pt = (b / nb if nb else None), (t / nt if nt else None)
    if pb is not None and pt is not None:
        per_launch, count = (pt - pb) * (nb + nt) / 2, (nt - nb) * (pb + pt) / 2
    else:
        per_launch, count = 0.0, t - b
    return KernelRow(
        match,
        category,
        label,
        bn,
        tn,
        b,
        t,
        t - b,
        _ratio(b, t),
        nb,
        nt,
        match in ("normalized", "category") and set(bn) != set(tn),
        pb,
        pt,
        _ratio(pb, pt) if pb is not None and pt is not None else None,
        per_launch,
        count,
    )


def per_launch_headline(rows: list[KernelRow]) -> tuple[float | None, float | None]:
    """(base, target) time per launch of the rows with launches on both sides, each weighted by the row's
    mean launches (module doc); None when no row has."""
    both = [r for r in rows if r.base_ns_per_launch is not None and r.target_ns_per_launch is not None]
    weight = sum((r.base_launches + r.target_launches) / 2 for r in both)
    if not weight:
        return None, None
    b = sum((r.base_launches + r.target_launches) / 2 * r.base_ns_per_launch for r in both) / weight
    t = sum((r.base_launches + r.target_launches) / 2 * r.target_ns_per_launch for r in both) / weight
    return b, t


def movers(rows: list[KernelRow], basis: str, top: int) -> list[KernelRow]:
    """The rows that moved most: per step, by the change of their time per step; per launch (a run has no
    steps, its window's launch count is no change of the program), by the time their change per launch
    makes, then by the whole change."""
    if basis == "per_launch":
        return sorted(rows, key=lambda r: (-abs(r.per_launch_effect_ns), -abs(r.delta_ns), r.label))[:top]
    return sorted(rows, key=lambda r: -abs(r.delta_ns))[:top]  # stable: ties keep the table's order


def match_kernels(base: dict[str, dict], target: dict[str, dict]) -> list[KernelRow]:
    rows: list[KernelRow] = []
    for name in sorted(set(base) & set(target)):
        rows.append(_row("exact", base[name]["category"], name, [base[name]], [target[name]]))
    left_b = {n: k for n, k in base.items() if n not in target}
    left_t = {n: k for n, k in target.items() if n not in base}

    def by(key, items):
        groups: dict[str, list[dict]] = {}
        for k in items.values():
            groups.setdefault(k[key], []).append(k)
        return groups

    gb, gt = by("norm", left_b), by("norm", left_t)
    for norm in sorted(set(gb) & set(gt)):
        rows.append(_row("normalized", gb[norm][0]["category"], norm, gb[norm], gt[norm]))
        for k in gb[norm]:
            left_b.pop(k["name"])
        for k in gt[norm]:
            left_t.pop(k["name"])
    cb, ct = by("category", left_b), by("category", left_t)
    for cat in sorted(set(cb) & set(ct)):
        rows.append(_row("category", cat, cat, cb[cat], ct[cat]))
        for k in cb[cat]:
            left_b.pop(k["name"])
        for k in ct[cat]:
            left_t.pop(k["name"])
    for k in left_b.values():
        rows.append(_row("removed", k["category"], k["name"], [k], []))
    for k in left_t.values():
        rows.append(_row("added", k["category"], k["name"], [], [k]))
    rows.sort(key=lambda r: (-max(r.base_ns, r.target_ns), r.label))
    return rows


def _critical_path(base: dict, target: dict) -> tuple[bool, list[CriticalPathRow]]:
    if base["critical_path"] is None or target["critical_path"] is None:
        return False, []  # hook: critical_path_summary is not in sql/ yet
    shares: dict[str, dict[str, float]] = {}
    for side, facts in (("base", base), ("target", target)):
        rows = facts["critical_path"]
        total = sum(r[1] for r in rows) or 0
        shares[side] = {r[0]: r[1] / total for r in rows} if total else {}
    parts = sorted(set(shares["base"]) | set(shares["target"]))
    out = [
        CriticalPathRow(
            p,
            shares["base"].get(p, 0.0),
            shares["target"].get(p, 0.0),
            shares["target"].get(p, 0.0) - shares["base"].get(p, 0.0),
        )
        for p in parts
    ]
    out.sort(key=lambda r: -abs(r.delta))
    return bool(shares["base"] or shares["target"]), out


def build_diff(
    con: Connection,
    base: str,
    target: str,
    *,
    top: int = 10,
    critical_path: bool = True,
    before_reading: Callable[[list[str]], None] | None = None,
) -> DiffReport:
    """The diff of two runs, on a connection of warehouse.engine.open that sees both: each run's facts
    (warehouse.diff_facts.run_facts) on `con` focused on the two runs, read from their kept rows where the
    runs are derived (warehouse.derived), computed otherwise. before_reading(run ids) is called once the
    runs are resolved (the CLI derives them there, as a report does: reports.write.derive_first)."""
    base_id, target_id = resolve_run(con, base), resolve_run(con, target)
    if before_reading is not None:
        before_reading([base_id, target_id])
    with focused(con, [base_id, target_id], compute_once=True) as on:
        bf, tf = run_facts(on, base_id), run_facts(on, target_id)
    binfo, bk = _run_info(con, bf, base)
    tinfo, tk = _run_info(con, tf, target)
    kernels = match_kernels(bk, tk)
    cats = sorted({k["category"] for k in bk.values()} | {k["category"] for k in tk.values()})
    categories = []
    for c in cats:
        b = sum(k["ns"] for k in bk.values() if k["category"] == c)
        t = sum(k["ns"] for k in tk.values() if k["category"] == c)
        rows = [r for r in kernels if r.category == c]
        categories.append(
            CategoryRow(
                c,
                b,
                t,
                t - b,
                _ratio(b, t),
                sum(r.per_launch_effect_ns for r in rows),
                sum(r.count_effect_ns for r in rows),
            )
        )
    categories.sort(key=lambda r: -abs(r.delta_ns))
    judged = verdict(bf, tf)
    top_movers = movers(kernels, judged.basis, top)
    base_norms = {k["norm"] for k in bk.values()}
    target_norms = {k["norm"] for k in tk.values()}
    appeared = sorted(
        (k["name"] for k in tk.values() if k["norm"] not in base_norms), key=lambda n: -tk[n]["ns"]
    )
    vanished = sorted(
        (k["name"] for k in bk.values() if k["norm"] not in target_norms), key=lambda n: -bk[n]["ns"]
    )
    counts = {
        "names_added_exact": len(set(tk) - set(bk)),
        "names_removed_exact": len(set(bk) - set(tk)),
        "names_appeared": len(appeared),
        "names_vanished": len(vanished),
        "rows_exact": sum(r.match == "exact" for r in kernels),
        "rows_normalized": sum(r.match == "normalized" for r in kernels),
        "rows_category": sum(r.match == "category" for r in kernels),
        "rows_added": sum(r.match == "added" for r in kernels),
        "rows_removed": sum(r.match == "removed" for r in kernels),
    }
    available, cp = _critical_path(bf, tf) if critical_path else (False, [])
    notes = []
    for info in (binfo, tinfo):
        if info.outside_steps_ns:
            notes.append(
                f"run {info.run_id}: {info.outside_steps_ns / 1e6:.3f} ms of GPU time lies outside any "
                "step and is not in the per-step figures"
            )
    if binfo.rank_steps == 0 or tinfo.rank_steps == 0:
        notes.append("a run has no steps: its per-step figures are zero")
    tb, tt = binfo.gpu_ns_per_step, tinfo.gpu_ns_per_step
    pb, pt = per_launch_headline(kernels)
    return DiffReport(
        binfo,
        tinfo,
        tb,
        tt,
        tt - tb,
        _ratio(tb, tt),
        categories,
        kernels,
        top_movers,
        appeared,
        vanished,
        counts,
        cp,
        available,
        notes,
        _batch_latency(bf, tf),
        _request_cost(bf, tf),
        judged,
        "step" if judged.basis == "per_step" else "rank window",
        pb,
        pt,
        _ratio(pb, pt) if pb is not None and pt is not None else None,
        sum(r.per_launch_effect_ns for r in kernels),
        sum(r.count_effect_ns for r in kernels),
    )


def _batch_latency(base: dict, target: dict) -> list[dict]:
    """Median step time per (phase, batch size) that both runs ran (sql/step_latency)."""
    if base["step_latency"] is None or target["step_latency"] is None:
        return []
    theirs = {(phase, bs): (steps, ns) for phase, bs, steps, ns in target["step_latency"]}
    out = []
    for phase, bs, bsteps, bns in base["step_latency"]:  # ordered by phase, batch size
        if (phase, bs) not in theirs:
            continue
        tsteps, tns = theirs[(phase, bs)]
        out.append(
            {
                "phase": phase,
                "batch_size": bs,
                "base_steps": bsteps,
                "target_steps": tsteps,
                "base_median_ns": bns,
                "target_median_ns": tns,
                "delta_ns": tns - bns,
                "ratio": _ratio(bns, tns),
            }
        )
    return out


REQUEST_FIGURES = (
    ("requests", "requests named"),
    ("median_prefill_gpu_ns", "median prefill GPU time per request (TTFT side)"),
    ("median_decode_gpu_ns_per_token", "median decode GPU time per generated token"),
)


def _request_cost(base: dict, target: dict) -> list[dict]:
    """Per-request figures of both runs (sql/request_cost), when both name their requests: the requests
    differ between runs, so the comparison is of medians, not request by request."""
    if not base.get("request_cost") or not target.get("request_cost"):
        return []
    out = []
    for i, (key, label) in enumerate(REQUEST_FIGURES):
        b, t = base["request_cost"][i], target["request_cost"][i]
        out.append(
            {
                "figure": key,
                "label": label,
                "base": b,
                "target": t,
                "delta": None if b is None or t is None else t - b,
                "ratio": None if b is None or t is None else _ratio(b, t),
            }
        )
    return out


@dataclass(frozen=True)
class DiffParams:
    """What `tracehouse diff` asks for: BASE and TARGET as typed (ids, prefixes, latest~N), how many top
    movers, whether to compare critical paths."""

    base: str
    target: str
    top: int = 10
    critical_path: bool = True
    before_reading: Callable[[list[str]], None] | None = None  # the resolved run ids, before any figure


def build(con, params: DiffParams) -> DiffReport:
    """The diff's context (reports.render: every report is build(connection, params) -> context)."""
    return build_diff(
        con,
        params.base,
        params.target,
        top=params.top,
        critical_path=params.critical_path,
        before_reading=params.before_reading,
    )


def render_diff(report: DiffReport, fmt: str, template_dir: str | Path | None = None) -> str:
    """The diff in `fmt`; every format says the verdict first (JSON: its first key)."""
    data = None
    if fmt == "json":
        fields = asdict(report)
        data = {"verdict": fields.pop("verdict"), **fields}
    return render("diff", report, fmt, template_dir, data)

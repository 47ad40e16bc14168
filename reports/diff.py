"""The diff report: what changed between two runs, per category and per kernel, time per step.

Figures: GPU time (sum of durations, all ranks) of the activities inside steps, divided by the run's
rank-steps (rows of `steps`), i.e. the mean time per step of one rank, as run_metrics' rank-NULL rows.
Kernels are matched in three passes:
  1. exact name                                             match = exact
  2. normalized name (kernel_name_normalized), names grouped  match = normalized  (changed tile config...)
  3. what is left of a category on both sides, as one pair   match = category    (another library or
     vendor: flash_fwd_kernel ↔ attn_fwd, sm90_xmma_gemm ↔ Cijk_...)
Anything else is added (only in TARGET) or removed (only in BASE).
"""

from __future__ import annotations

import decimal
import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

import duckdb

from warehouse.catalog import views_fingerprint
from warehouse.runs import resolve_run

FACT_VIEWS = ["steps", "kernels", "kernel_name_normalized", "critical_path_summary", "step_latency"]


@dataclass
class RunInfo:
    run_id: str
    label: str                # what the user typed
    hardware: str | None
    framework: str | None
    model: str | None
    commit: str | None
    rank_steps: int           # rows of `steps`: the divisor of every per-step figure
    ranks: int
    gpu_ns_per_step: float    # all activities inside steps
    outside_steps_ns: int     # GPU time of activities in no step (not in any figure)


@dataclass
class CategoryRow:
    category: str
    base_ns: float
    target_ns: float
    delta_ns: float
    ratio: float | None       # target / base


@dataclass
class KernelRow:
    match: str                # exact, normalized, category, added, removed
    category: str
    label: str                # the name shown: the exact name, the normalized name, or the category
    base_names: list[str]
    target_names: list[str]
    base_ns: float
    target_ns: float
    delta_ns: float
    ratio: float | None
    base_launches: float      # per step
    target_launches: float
    changed: bool             # names differ (normalized / category matches)


@dataclass
class CriticalPathRow:
    part: str                 # gpu category or non-gpu kind
    base_share: float
    target_share: float
    delta: float              # target - base, share points (0..1)


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
    appeared: list[str]       # names in TARGET whose normalized name is not in BASE
    vanished: list[str]
    counts: dict[str, int]
    critical_path: list[CriticalPathRow] = field(default_factory=list)
    critical_path_available: bool = False
    notes: list[str] = field(default_factory=list)
    # step time by (phase, batch size) on both sides (sql/step_latency): only batch sizes both runs have
    batch_latency: list[dict] = field(default_factory=list)


_KERNELS_SQL = """
WITH st AS (SELECT rank, step FROM steps WHERE run_id = $run)
SELECT k.name, k.kind, coalesce(n.category, 'other') AS category, coalesce(n.normalized_name, k.name) AS norm,
       sum(k.dur_ns) AS ns, count(*) AS launches
FROM kernels AS k
JOIN st ON st.rank = k.rank AND st.step = k.step
LEFT JOIN kernel_name_normalized AS n ON n.name = k.name AND n.kind = k.kind
WHERE k.run_id = $run
GROUP BY k.name, k.kind, n.category, n.normalized_name
"""


def _ratio(base: float, target: float) -> float | None:
    return target / base if base else None


def run_facts(con, run_id: str) -> dict:
    """Everything a diff reads of one run, from the views (one query each): the in-step kernels grouped by
    name (in a fixed order), the run's rank-steps and ranks, its GPU time in and out of steps, the critical
    path's time per part summed over its steps (None: no critical_path_summary view), and its step_latency
    rows (None: no step_latency view). Plain ints, floats and strings: `stored_facts` keeps it as JSON."""
    rank_steps, ranks = con.execute(
        "SELECT count(*), count(DISTINCT rank) FROM steps WHERE run_id = ?", [run_id]).fetchone()
    kernels = [list(r) for r in con.execute(_KERNELS_SQL + " ORDER BY k.name, k.kind", {"run": run_id}).fetchall()]
    total_all = con.execute("SELECT coalesce(sum(dur_ns), 0) FROM kernels WHERE run_id = ?", [run_id]).fetchone()[0]
    facts = {"run_id": run_id, "rank_steps": rank_steps, "ranks": ranks, "kernels": kernels,
             "total_ns": int(total_all), "critical_path": None, "step_latency": None}
    if con.execute("SELECT count(*) FROM duckdb_views() WHERE view_name = 'critical_path_summary'").fetchone()[0]:
        facts["critical_path"] = [list(r) for r in con.execute(
            "SELECT CASE WHEN kind = 'gpu' THEN coalesce(category, 'other') ELSE kind END AS part, sum(time_ns) "
            "FROM critical_path_summary WHERE run_id = ? GROUP BY 1 ORDER BY 1", [run_id]).fetchall()]
    try:
        facts["step_latency"] = [list(r) for r in con.execute(
            "SELECT phase, batch_size, steps, median_step_ns FROM step_latency "
            "WHERE run_id = ? AND batch_size IS NOT NULL ORDER BY phase, batch_size", [run_id]).fetchall()]
    except duckdb.Error:  # a catalogue without step_latency
        pass
    return facts


def _run_info(con, facts: dict, label: str) -> tuple[RunInfo, dict[str, dict]]:
    run_id = facts["run_id"]
    row = con.execute("SELECT hardware, framework, model, commit FROM runs WHERE run_id = ?", [run_id]).fetchone()
    rank_steps, ranks = facts["rank_steps"], facts["ranks"]
    divisor = max(1, rank_steps)
    kernels = {}
    for name, kind, category, norm, ns, launches in facts["kernels"]:
        kernels[name] = {"name": name, "kind": kind, "category": category, "norm": norm,
                         "ns": ns / divisor, "launches": launches / divisor}
    in_steps = sum(k["ns"] for k in kernels.values()) * divisor
    info = RunInfo(run_id, label, row[0], row[1], row[2], row[3], rank_steps, ranks,
                   sum(k["ns"] for k in kernels.values()), round(facts["total_ns"] - in_steps))
    return info, kernels


def facts_dir(warehouse) -> Path:
    return warehouse.root / "cache" / f"diff_facts-{views_fingerprint(FACT_VIEWS)}"


def stored_facts(warehouse, run_id: str, memory_limit: str | None = None) -> dict:
    """run_facts of a run, computed once (on a connection focused on that run) and kept in
    <warehouse>/cache/diff_facts-<fingerprint>/<run_id>.json, as the run metrics are: a diff of two runs whose
    facts are stored is two small reads. The fingerprint covers the SQL of the views read and the rule files,
    so a changed definition is computed anew. A warehouse this user cannot write: computed, not kept.
    Ingest stores them with the report's analyses (warehouse.load), so a diff of two ingested runs reads.
    memory_limit: DuckDB's (ingest passes its own)."""
    path = facts_dir(warehouse) / f"{run_id}.json"
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        pass
    from warehouse.catalog import connect, materialize

    con = connect(warehouse, runs=[run_id], settings={"memory_limit": memory_limit} if memory_limit else None)
    try:
        materialize(con, ["steps"])  # four of the five queries read steps: computed once (half the time)
        facts = run_facts(con, run_id)
    finally:
        con.close()
    facts = json.loads(json.dumps(facts, default=_plain))  # the very values a stored read gives back
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        _remove_abandoned(path.parent)
        partial = path.with_name(f".{run_id}.{os.getpid()}.tmp")
        partial.write_text(json.dumps(facts))
        os.replace(partial, path)  # a reader sees no file or the whole file
    except OSError:
        pass
    return facts


def _remove_abandoned(folder: Path) -> None:
    """Partial files (.<run>.<pid>.tmp) of writers whose process is gone (killed mid-write)."""
    from warehouse.store import process_alive

    for partial in folder.glob(".*.*.tmp"):
        pid = partial.name.split(".")[-2]
        if pid.isdigit() and not process_alive(int(pid)):
            partial.unlink(missing_ok=True)


def _plain(value):
    if isinstance(value, decimal.Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    raise TypeError(f"{type(value).__name__} is not stored in diff facts")


def _row(match: str, category: str, label: str, base: list[dict], target: list[dict]) -> KernelRow:
    b = sum(k["ns"] for k in base)
    t = sum(k["ns"] for k in target)
    bn = [k["name"] for k in sorted(base, key=lambda k: -k["ns"])]
    tn = [k["name"] for k in sorted(target, key=lambda k: -k["ns"])]
    return KernelRow(match, category, label, bn, tn, b, t, t - b, _ratio(b, t),
                     sum(k["launches"] for k in base), sum(k["launches"] for k in target),
                     match in ("normalized", "category") and set(bn) != set(tn))


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
    out = [CriticalPathRow(p, shares["base"].get(p, 0.0), shares["target"].get(p, 0.0),
                           shares["target"].get(p, 0.0) - shares["base"].get(p, 0.0)) for p in parts]
    out.sort(key=lambda r: -abs(r.delta))
    return bool(shares["base"] or shares["target"]), out


def diff_connection(warehouse, base: str, target: str, engine: str = "duckdb", master: str | None = None):
    """The connection build_diff reads: DuckDB over the warehouse, or ("spark") a Spark connection focused on
    the two runs (warehouse.spark_connection: each view computed once, for these two runs only)."""
    if engine == "spark":
        from warehouse.spark_connection import focused_spark_connection

        return focused_spark_connection(warehouse, [base, target], master=master)[0]
    from warehouse.catalog import connect

    return connect(warehouse)


def build_diff(con: duckdb.DuckDBPyConnection, base: str, target: str, *, top: int = 10,
               critical_path: bool = True, warehouse=None) -> DiffReport:
    """The diff of two runs. warehouse: read each run's facts from the diff store (`stored_facts`,
    computed once per run); None: compute them on `con` (the Spark engine, tests of one connection)."""
    base_id, target_id = resolve_run(con, base), resolve_run(con, target)
    if warehouse is not None:
        bf, tf = stored_facts(warehouse, base_id), stored_facts(warehouse, target_id)
    else:
        bf, tf = run_facts(con, base_id), run_facts(con, target_id)
    binfo, bk = _run_info(con, bf, base)
    tinfo, tk = _run_info(con, tf, target)
    kernels = match_kernels(bk, tk)
    cats = sorted({k["category"] for k in bk.values()} | {k["category"] for k in tk.values()})
    categories = []
    for c in cats:
        b = sum(k["ns"] for k in bk.values() if k["category"] == c)
        t = sum(k["ns"] for k in tk.values() if k["category"] == c)
        categories.append(CategoryRow(c, b, t, t - b, _ratio(b, t)))
    categories.sort(key=lambda r: -abs(r.delta_ns))
    movers = sorted(kernels, key=lambda r: -abs(r.delta_ns))[:top]
    base_norms = {k["norm"] for k in bk.values()}
    target_norms = {k["norm"] for k in tk.values()}
    appeared = sorted((k["name"] for k in tk.values() if k["norm"] not in base_norms), key=lambda n: -tk[n]["ns"])
    vanished = sorted((k["name"] for k in bk.values() if k["norm"] not in target_norms), key=lambda n: -bk[n]["ns"])
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
            notes.append(f"run {info.run_id}: {info.outside_steps_ns / 1e6:.3f} ms of GPU time lies outside any "
                         "step and is not in the per-step figures")
    if binfo.rank_steps == 0 or tinfo.rank_steps == 0:
        notes.append("a run has no steps: its per-step figures are zero")
    tb, tt = binfo.gpu_ns_per_step, tinfo.gpu_ns_per_step
    return DiffReport(binfo, tinfo, tb, tt, tt - tb, _ratio(tb, tt), categories, kernels, movers, appeared, vanished,
                      counts, cp, available, notes, _batch_latency(bf, tf))


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
        out.append({"phase": phase, "batch_size": bs, "base_steps": bsteps, "target_steps": tsteps,
                    "base_median_ns": bns, "target_median_ns": tns, "delta_ns": tns - bns,
                    "ratio": _ratio(bns, tns)})
    return out


def render_diff(report: DiffReport, fmt: str) -> str:
    if fmt == "json":
        return json.dumps(asdict(report), indent=1, default=str) + "\n"
    from reports.charts import render

    return render(f"diff.{fmt}.j2", report, html=(fmt == "html"))

"""What a diff reads of one run (`run_facts`), and the diff store that keeps it per run (`stored_facts`):
<warehouse>/cache/diff_facts-<fingerprint>/<run_id>.json, written at ingest (ingest.load) or by the first
diff that needs it, read by reports.diff. In the warehouse layer because ingest writes it and reports read it.
"""

from __future__ import annotations

import decimal
import json
import os
from pathlib import Path

from warehouse.catalog import connect, materialize, views_fingerprint
from warehouse.store import process_alive

FACT_VIEWS = [
    "run_step_time",
    "step_kernel_time",
    "steps",
    "kernels",
    "kernel_name_normalized",
    "critical_path_summary",
    "step_latency",
    "request_cost",
]


def run_facts(con, run_id: str) -> dict:
    """Everything a diff reads of one run, from the views (one query each): the in-step kernels per name
    and their time per step (step_kernel_time, in a fixed order), the run's rank-steps, ranks, GPU time in
    and out of steps and per step (run_step_time), the critical path's time per part summed over its steps,
    its step_latency rows, and its per-request medians (None: no request named). Plain ints, floats and
    strings: `stored_facts` keeps it as JSON. Every view read exists on every engine (warehouse.engine):
    none is asked for first."""
    rank_steps, ranks, total_all, outside, per_step = con.execute(
        "SELECT rank_steps, ranks, gpu_time_ns, outside_steps_ns, gpu_ns_per_step FROM run_step_time WHERE run_id = ?",
        [run_id],
    ).fetchone()
    kernels = [
        list(r)
        for r in con.execute(
            "SELECT name, kind, category, normalized_name, ns_per_step, launches_per_step FROM step_kernel_time "
            "WHERE run_id = ? ORDER BY name, kind",
            [run_id],
        ).fetchall()
    ]
    facts = {
        "run_id": run_id,
        "rank_steps": rank_steps,
        "ranks": ranks,
        "kernels": kernels,
        "total_ns": int(total_all),
        "outside_steps_ns": int(outside),
        "gpu_ns_per_step": per_step,
    }
    facts["critical_path"] = [
        list(r)
        for r in con.execute(
            "SELECT CASE WHEN kind = 'gpu' THEN coalesce(category, 'other') ELSE kind END AS part, sum(time_ns) "
            "FROM critical_path_summary WHERE run_id = ? GROUP BY 1 ORDER BY 1",
            [run_id],
        ).fetchall()
    ]
    facts["step_latency"] = [
        list(r)
        for r in con.execute(
            "SELECT phase, batch_size, steps, median_step_ns FROM step_latency "
            "WHERE run_id = ? AND batch_size IS NOT NULL ORDER BY phase, batch_size",
            [run_id],
        ).fetchall()
    ]
    # requests named, median prefill GPU time per request, median decode GPU time per token
    row = con.execute(
        """
        SELECT count(*), quantile_disc(prefill_gpu_ns, 0.5) FILTER (WHERE prefill_steps > 0),
               quantile_disc(decode_gpu_ns_per_token, 0.5)
        FROM request_cost WHERE run_id = ?""",
        [run_id],
    ).fetchone()
    facts["request_cost"] = list(row) if row[0] else None
    return facts


def facts_dir(warehouse) -> Path:
    return warehouse.root / "cache" / f"diff_facts-{views_fingerprint(FACT_VIEWS)}"


def stored_facts(warehouse, run_id: str, memory_limit: str | None = None) -> dict:
    """run_facts of a run, computed once (on a connection focused on that run) and kept in
    <warehouse>/cache/diff_facts-<fingerprint>/<run_id>.json, as the run metrics are: a diff of two runs whose
    facts are stored is two small reads. The fingerprint covers the SQL of the views read and the rule files,
    so a changed definition is computed anew. A warehouse this user cannot write: computed, not kept.
    Ingest stores them with the report's analyses (ingest.load), so a diff of two ingested runs reads.
    memory_limit: DuckDB's (ingest passes its own)."""
    path = facts_dir(warehouse) / f"{run_id}.json"
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        pass
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
    for partial in folder.glob(".*.*.tmp"):
        pid = partial.name.split(".")[-2]
        if pid.isdigit() and not process_alive(int(pid)):
            partial.unlink(missing_ok=True)


def _plain(value):
    if isinstance(value, decimal.Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    raise TypeError(f"{type(value).__name__} is not stored in diff facts")

"""What a diff reads of one run (`run_facts`): a few small queries of views that are kept per run
(run_step_time, step_kernel_time, run_comparability, critical_path_summary, step_latency, request_cost:
`materialized: per_run`, warehouse.derived), so that a diff of two derived runs reads a few small files; and
its data-quality flags (data_quality, computed: a few rows per run).
"""

from __future__ import annotations

# the views run_facts reads: each kept per run (`materialized: per_run`; tests/test_diff_store.py)
FACT_VIEWS = [
    "run_step_time",
    "step_kernel_time",
    "run_comparability",
    "critical_path_summary",
    "step_latency",
    "request_cost",
]
# the columns of run_comparability it reads, in this order
COMPARABILITY_COLUMNS = ["framework", "model", "hardware", "step_basis", "steps", "phases", "batch_sizes"]


def run_facts(con, run_id: str) -> dict:
    """Everything a diff reads of one run, from the views (one query each): the in-step kernels per name
    and their time per step (step_kernel_time, in a fixed order), the run's rank-steps, ranks, GPU time in
    and out of steps and per step (run_step_time), the critical path's time per part summed over its steps,
    its step_latency rows, its per-request medians (None: no request named), what decides whether it
    compares step for step (run_comparability) and its data-quality flags, each once (data_quality). Plain ints, floats and
    strings. Every view read exists on every engine (warehouse.engine):
    none is asked for first."""
    rank_steps, ranks, total_all, outside, per_step, launches, per_launch = con.execute(
        "SELECT rank_steps, ranks, gpu_time_ns, outside_steps_ns, gpu_ns_per_step, launches, ns_per_launch "
        "FROM run_step_time WHERE run_id = ?",
        [run_id],
    ).fetchone()
    kernels = [
        list(r)
        for r in con.execute(
            "SELECT name, kind, category, normalized_name, ns_per_step, launches_per_step, ns_per_launch "
            "FROM step_kernel_time "
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
        "launches": int(launches),
        "ns_per_launch": per_launch,
    }
    row = con.execute(
        f"SELECT {', '.join(COMPARABILITY_COLUMNS)} FROM run_comparability WHERE run_id = ?", [run_id]
    ).fetchone()
    facts["comparability"] = dict(zip(COMPARABILITY_COLUMNS, row))
    # each flag once: its severity, the ranks and steps it was raised on, one message of it
    facts["flags"] = [
        list(r)
        for r in con.execute(
            """
            SELECT flag, severity, count(*) AS n, min(message) AS message
            FROM data_quality WHERE run_id = ?
            GROUP BY flag, severity
            ORDER BY CASE severity WHEN 'error' THEN 0 WHEN 'warning' THEN 1 ELSE 2 END, flag""",
            [run_id],
        ).fetchall()
    ]
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

-- run_metrics: one row per (run_id, rank, phase, metric): the per-run figures that `trend`, `regression`
-- and `tracehouse diff` compare, normalized per step so that runs with different step counts compare.
-- Long format: one metric per row. Rows with rank NULL aggregate the run's ranks (see `value`).
-- Only activities inside a step (steps view) count; a trace without step markers is one step per rank.
-- Metrics (X_ns_per_step = the mean over the rank's steps of the step's X, i.e. sum over steps / steps):
--   steps                        number of steps of the rank in the phase
--   step_time_median_ns          median over steps of the step time: gpu_span_ns (first GPU start → last
--   step_time_p90_ns             GPU end of the step's activities), else wall_ns when the step has none;
--                                p90: continuous 0.9 quantile
--   wall_time_median_ns          median over steps of the host window of the step (steps.wall_ns)
--   gpu_busy_ns_per_step         union of the step's GPU activities (steps.gpu_busy_ns)
--   exposed_comm_ns_per_step     communication not under compute (steps.exposed_comm_ns)
--   idle_pct                     mean over steps of 100 - steps.gpu_busy_pct
--   gpu_busy_pct                 mean over steps of steps.gpu_busy_pct (utilisation: the device's busy time
--                                in the step's GPU window / the window; steps.sql states the window)
--   activities_per_step          GPU activities per step
--   category.<category>_ns_per_step        GPU time (sum of durations) of the category per step
--   kernel.<normalized name>_ns_per_step   GPU time per step of the 10 normalized kernel names
--                                (kernel_name_normalized) with the most GPU time in the (run, phase)
--   mfu_pct, mbu_pct             mean over the steps with known work of step_roofline's MFU / MBU (lower
--                                bounds: kernels whose op has no FLOP/byte formula add nothing)
--   step_time_bs.<N>_median_ns   median step time (as step_time_median_ns) over the steps of batch size N
--                                (steps.batch_size), for the 3 batch sizes with the most steps in the
--                                (run, phase): the step time at a fixed batch size, comparable across runs
--   critical_path.<category>_share, critical_path.<kind>_share   share of the critical path
--                                (critical_path_summary: gpu time by category; launch_delay, kernel_gap,
--                                cpu, sync_wait by kind), summed over the steps' paths
-- Columns:
--   run_id      VARCHAR  the run
--   rank        INTEGER  the rank; NULL: aggregated over the run's ranks that have steps in the phase:
--                        step_time_* and wall_time_* are taken over the steps of all ranks pooled (a
--                        median of ranks × steps values: one rank's collective waits on two of three
--                        steps do not move it, as a max over ranks would), every other metric is the
--                        mean over ranks (a rank without the metric counts as 0)
--   phase       VARCHAR  the steps' phase (prefill, decode, mixed, unknown)
--   metric      VARCHAR  the metric name (above)
--   value       DOUBLE  its value (ns, %, count or share, as the name says)
--   better      VARCHAR  which way is better: `lower` (times, idle, activities), `higher` (gpu_busy_pct,
--                        mfu_pct, mbu_pct),
--                        `none` (steps and critical-path shares: composition, never flagged)
--   spread      DOUBLE  step-to-step noise of the value: 1.4826 × MAD over the steps of the per-step value, /
--                        sqrt(steps) (the standard error of a per-step mean; step_time_p90_ns: not divided
--                        and at least p90 - median, since a tail quantile of a few steps moves like one
--                        step); rank NULL: sqrt(Σ spread²) / ranks for means, the pooled figure for step and
--                        wall times; NULL for critical-path shares
--   n_steps     BIGINT  steps behind the value (rank NULL: rank-steps for step_time_* and wall_time_*, else
--                        the max over ranks)
-- materialized: per_run   rows kept per run (warehouse/derived.py: `tracehouse derive`): the trend and the runs table (warehouse/metrics.py)
CREATE OR REPLACE VIEW run_metrics AS
-- each view it reads is read once (a CTE): DuckDB binds a view again at every reference
WITH all_step_roofline AS (SELECT * FROM step_roofline),
all_critical_path_summary AS (SELECT * FROM critical_path_summary),
step_rows AS (
    SELECT run_id, rank, step, coalesce(phase, 'unknown') AS phase, batch_size,
           CAST(coalesce(gpu_span_ns, wall_ns) AS DOUBLE) AS step_time_ns, CAST(wall_ns AS DOUBLE) AS wall_ns,
           gpu_span_ns, gpu_busy_ns, exposed_comm_ns, idle_ns, activities, gpu_busy_pct
    FROM steps
),
step_counts AS (
    SELECT run_id, rank, phase, count(*) AS n_steps FROM step_rows GROUP BY run_id, rank, phase
    UNION ALL
    SELECT run_id, -1, phase, count(*) FROM step_rows GROUP BY run_id, phase
),
rank_counts AS (
    SELECT run_id, phase, count(*) AS n_ranks FROM step_counts WHERE rank >= 0 GROUP BY run_id, phase
),
facts AS (
    SELECT f.run_id, f.rank, s.phase, f.step, f.category, n.normalized_name, f.dur_ns
    FROM _kernel_facts AS f
    JOIN step_rows AS s ON s.run_id = f.run_id AND s.rank = f.rank AND s.step = f.step
    LEFT JOIN kernel_name_normalized AS n ON n.name = f.name AND n.kind = f.kind
),
top_kernels AS (
    SELECT run_id, phase, normalized_name
    FROM (
        SELECT run_id, phase, normalized_name,
               row_number() OVER (PARTITION BY run_id, phase ORDER BY sum(dur_ns) DESC, normalized_name) AS rn
        FROM facts
        GROUP BY run_id, phase, normalized_name
    ) AS ranked
    WHERE rn <= 10
),
top_batches AS (
    -- the 3 batch sizes with the most steps per (run, phase)
    SELECT run_id, phase, batch_size FROM (
        SELECT run_id, phase, batch_size,
               row_number() OVER (PARTITION BY run_id, phase ORDER BY count(*) DESC, batch_size) AS rn
        FROM step_rows WHERE batch_size IS NOT NULL
        GROUP BY run_id, phase, batch_size
    ) AS ranked
    WHERE rn <= 3
),
batch_steps AS (
    SELECT s.* FROM step_rows AS s
    JOIN top_batches AS b ON b.run_id = s.run_id AND b.phase = s.phase AND b.batch_size = s.batch_size
),
per_step AS (
    -- one value per (run, rank, phase, step, metric); `agg` says how the steps combine
    SELECT run_id, rank, phase, step, 'step_time' AS metric, step_time_ns AS v FROM step_rows
    UNION ALL
    SELECT run_id, rank, phase, step, 'wall_time', wall_ns FROM step_rows
    UNION ALL
    -- rank -1: the steps of all ranks pooled (rank NULL of step_time_* and wall_time_*)
    SELECT run_id, -1, phase, step, 'step_time', step_time_ns FROM step_rows
    UNION ALL
    SELECT run_id, -1, phase, step, 'wall_time', wall_ns FROM step_rows
    UNION ALL
    SELECT run_id, rank, phase, step, 'step_time_bs.' || batch_size, step_time_ns FROM batch_steps
    UNION ALL
    SELECT run_id, -1, phase, step, 'step_time_bs.' || batch_size, step_time_ns FROM batch_steps
    UNION ALL
    SELECT u.run_id, u.rank, s.phase, u.step, 'mfu_pct', u.mfu_pct
    FROM all_step_roofline AS u JOIN step_rows AS s ON s.run_id = u.run_id AND s.rank = u.rank AND s.step = u.step
    WHERE u.mfu_pct IS NOT NULL
    UNION ALL
    SELECT u.run_id, u.rank, s.phase, u.step, 'mbu_pct', u.mbu_pct
    FROM all_step_roofline AS u JOIN step_rows AS s ON s.run_id = u.run_id AND s.rank = u.rank AND s.step = u.step
    WHERE u.mbu_pct IS NOT NULL
    UNION ALL
    SELECT run_id, rank, phase, step, 'gpu_busy_ns_per_step', CAST(gpu_busy_ns AS DOUBLE) FROM step_rows
    UNION ALL
    SELECT run_id, rank, phase, step, 'exposed_comm_ns_per_step', CAST(exposed_comm_ns AS DOUBLE) FROM step_rows
    UNION ALL
    SELECT run_id, rank, phase, step, 'activities_per_step', CAST(activities AS DOUBLE) FROM step_rows
    UNION ALL
    SELECT run_id, rank, phase, step, 'idle_pct', 100.0 - gpu_busy_pct FROM step_rows WHERE gpu_busy_pct IS NOT NULL
    UNION ALL
    SELECT run_id, rank, phase, step, 'gpu_busy_pct', gpu_busy_pct FROM step_rows WHERE gpu_busy_pct IS NOT NULL
    UNION ALL
    SELECT run_id, rank, phase, step, 'category.' || category || '_ns_per_step', CAST(sum(dur_ns) AS DOUBLE)
    FROM facts
    GROUP BY run_id, rank, phase, step, category
    UNION ALL
    SELECT f.run_id, f.rank, f.phase, f.step, 'kernel.' || f.normalized_name || '_ns_per_step',
           CAST(sum(f.dur_ns) AS DOUBLE)
    FROM facts AS f
    JOIN top_kernels AS t ON t.run_id = f.run_id AND t.phase = f.phase AND t.normalized_name = f.normalized_name
    GROUP BY f.run_id, f.rank, f.phase, f.step, f.normalized_name
),
centre AS (
    SELECT run_id, rank, phase, metric, sum(v) AS total, count(*) AS present, median(v) AS med,
           quantile_cont(v, 0.9) AS p90
    FROM per_step
    GROUP BY run_id, rank, phase, metric
),
spread AS (
    SELECT p.run_id, p.rank, p.phase, p.metric, 1.4826 * median(abs(p.v - c.med)) AS step_sd
    FROM per_step AS p
    JOIN centre AS c ON c.run_id = p.run_id AND c.rank = p.rank AND c.phase = p.phase AND c.metric = p.metric
    GROUP BY p.run_id, p.rank, p.phase, p.metric
),
per_rank AS (
    SELECT c.run_id, c.rank, c.phase, n.n_steps, s.step_sd / sqrt(n.n_steps) AS spread,
           CASE WHEN c.metric = 'step_time' THEN 'step_time_median_ns'
                WHEN c.metric = 'wall_time' THEN 'wall_time_median_ns'
                WHEN c.metric LIKE 'step\_time\_bs.%' ESCAPE '\' THEN c.metric || '_median_ns'
                ELSE c.metric END AS metric,
           CASE WHEN c.metric IN ('step_time', 'wall_time') OR c.metric LIKE 'step\_time\_bs.%' ESCAPE '\' THEN c.med
                WHEN c.metric IN ('idle_pct', 'gpu_busy_pct', 'mfu_pct', 'mbu_pct') THEN c.total / c.present
                ELSE c.total / n.n_steps END AS value
    FROM centre AS c
    JOIN spread AS s ON s.run_id = c.run_id AND s.rank = c.rank AND s.phase = c.phase AND s.metric = c.metric
    JOIN step_counts AS n ON n.run_id = c.run_id AND n.rank = c.rank AND n.phase = c.phase
    UNION ALL
    SELECT c.run_id, c.rank, c.phase, n.n_steps, greatest(s.step_sd, c.p90 - c.med), 'step_time_p90_ns', c.p90
    FROM centre AS c
    JOIN spread AS s ON s.run_id = c.run_id AND s.rank = c.rank AND s.phase = c.phase AND s.metric = c.metric
    JOIN step_counts AS n ON n.run_id = c.run_id AND n.rank = c.rank AND n.phase = c.phase
    WHERE c.metric = 'step_time'
    UNION ALL
    SELECT run_id, rank, phase, n_steps, CAST(NULL AS DOUBLE), 'steps', CAST(n_steps AS DOUBLE) FROM step_counts
    WHERE rank >= 0
    UNION ALL
    SELECT cp.run_id, cp.rank, sr.phase, max(n.n_steps), CAST(NULL AS DOUBLE),
           'critical_path.' || CASE WHEN cp.kind = 'gpu' THEN coalesce(cp.category, 'other') ELSE cp.kind END
               || '_share',
           CAST(sum(cp.time_ns) AS DOUBLE) / max(tot.path_ns)
    FROM all_critical_path_summary AS cp
    JOIN step_rows AS sr ON sr.run_id = cp.run_id AND sr.rank = cp.rank AND sr.step = cp.step
    JOIN step_counts AS n ON n.run_id = sr.run_id AND n.rank = sr.rank AND n.phase = sr.phase
    JOIN (
        SELECT c2.run_id, c2.rank, s2.phase, sum(c2.time_ns) AS path_ns
        FROM all_critical_path_summary AS c2
        JOIN step_rows AS s2 ON s2.run_id = c2.run_id AND s2.rank = c2.rank AND s2.step = c2.step
        GROUP BY c2.run_id, c2.rank, s2.phase
    ) AS tot ON tot.run_id = sr.run_id AND tot.rank = sr.rank AND tot.phase = sr.phase
    WHERE tot.path_ns > 0
    GROUP BY cp.run_id, cp.rank, sr.phase,
             'critical_path.' || CASE WHEN cp.kind = 'gpu' THEN coalesce(cp.category, 'other') ELSE cp.kind END
                 || '_share'
),
all_ranks AS (
    SELECT r.run_id, CAST(NULL AS INTEGER) AS rank, r.phase, r.metric, sum(r.value) / max(k.n_ranks) AS value,
           sqrt(sum(r.spread * r.spread)) / max(k.n_ranks) AS spread, max(r.n_steps) AS n_steps
    FROM per_rank AS r
    JOIN rank_counts AS k ON k.run_id = r.run_id AND k.phase = r.phase
    WHERE r.rank >= 0 AND r.metric NOT LIKE 'step\_time\_%' ESCAPE '\' AND r.metric NOT LIKE 'wall\_time\_%' ESCAPE '\'
    GROUP BY r.run_id, r.phase, r.metric
    UNION ALL
    SELECT run_id, CAST(NULL AS INTEGER), phase, metric, value, spread, n_steps FROM per_rank WHERE rank = -1
),
unioned AS (
    SELECT run_id, CAST(rank AS INTEGER) AS rank, phase, metric, value, spread, n_steps FROM per_rank
    WHERE rank >= 0
    UNION ALL
    SELECT run_id, rank, phase, metric, value, spread, n_steps FROM all_ranks
)
SELECT run_id, rank, phase, metric, CAST(value AS DOUBLE) AS value,
       CASE WHEN metric = 'steps' OR metric LIKE 'critical\_path.%' ESCAPE '\' THEN 'none'
            WHEN metric IN ('gpu_busy_pct', 'mfu_pct', 'mbu_pct') THEN 'higher'
            ELSE 'lower' END AS better,
       CAST(spread AS DOUBLE) AS spread, CAST(n_steps AS BIGINT) AS n_steps
FROM unioned;

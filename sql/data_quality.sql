-- data_quality: one row per (run_id, rank, step, flag): a reason why some figures of a run cannot be
-- trusted as they stand, with the figures it affects, its evidence and what to do. rank NULL: the whole
-- run; step NULL: the whole run or rank. Reports show each flag beside the figures it names in
-- `affects` and draw no takeaway from a flagged figure (reports/takeaways.py).
-- A flag is one UNION ALL branch below, headed by a comment line `-- flag NAME (severity): when`; add
-- one by adding a branch with the same eight columns. Figure names (what `affects` lists) are the
-- report's: gpu_time, kernel_summary, kernel_summary.python_site, category_summary, launch_sites,
-- overlap_opportunity, fusion_match, step_breakdown, step_breakdown.host_setup, step_breakdown.median,
-- step_breakdown.gpu_utilization, step_breakdown.gpu_idle, run_metrics, stream_summary,
-- critical_path, idle_gaps, layer_pattern, rank_skew. A flag on `x` covers `x.anything` too.
-- Severity: `error`  a figure is missing or wrong as shown (GPU time 0 ns where the device worked);
--           `warning` a figure is incomplete or may point the wrong way (no launch sites, a host call
--                    that dominates the critical path, a step that is not a median);
--           `info`    how to read a figure (several ranks, one step for the whole trace).
-- Columns:
--   run_id    the run
--   rank      the rank the flag is about; NULL for the whole run
--   step      the step (step_spans.step) the flag is about; NULL for the whole run or rank
--   flag      the flag's name (below)
--   severity  error / warning / info
--   affects   the report figures the flag concerns (names above)
--   evidence  the numbers the flag rests on (name -> value; durations in ns, shares as fractions of 1;
--             a time in the step as an offset from its path's start: a DOUBLE holds it exactly)
--   message   one line: what is wrong and what to do about it
-- The flags that read the tables only are the rows of _data_quality_tables (sql/_data_quality_tables.sql);
-- the two below read per-step analyses.
CREATE OR REPLACE VIEW data_quality AS
-- each view it reads is read once (a CTE): DuckDB binds a view again at every reference
WITH all_critical_path AS (SELECT * FROM critical_path),
path_span AS (
    SELECT run_id, rank, step, sum(dur_ns) AS path_ns, min(start_ns) AS path_start_ns
    FROM all_critical_path GROUP BY run_id, rank, step
),
path_top AS (
    -- each step's longest host segment on the critical path: a host call (edge NULL) or host time
    -- between two calls of a thread (edge program_order, named for the op around it)
    SELECT c.run_id, c.rank, c.step, c.op_id, c.name, c.edge, c.start_ns, c.dur_ns, p.path_ns, p.path_start_ns
    FROM all_critical_path c JOIN path_span p USING (run_id, rank, step)
    WHERE c.kind = 'cpu'
    QUALIFY row_number() OVER (PARTITION BY c.run_id, c.rank, c.step ORDER BY c.dur_ns DESC, c.start_ns) = 1
)
SELECT * FROM _data_quality_tables
UNION ALL
-- flag critical_path_one_host_call (warning): one host segment (a call, or host time between two calls)
-- is more than half of a step's critical path: the walk likely followed a call that was waiting on the
-- GPU (a blocking copy, a sync) or on another thread
SELECT run_id, rank, step, 'critical_path_one_host_call', 'warning',
       ['critical_path', 'stream_summary.critical'],
       map(['op_id', 'segment_ns', 'path_ns', 'share', 'segment_offset_ns', 'path_start_ns'],
           [CAST(op_id AS DOUBLE), CAST(dur_ns AS DOUBLE), CAST(path_ns AS DOUBLE), CAST(dur_ns / path_ns AS DOUBLE), CAST(start_ns - path_start_ns AS DOUBLE), CAST(path_start_ns AS DOUBLE)]),
       CASE WHEN edge IS NULL THEN 'One host call (' || coalesce(name, '?') || ')'
            WHEN edge = 'step_start' THEN 'Host time from the step''s start to its first call on the path'
            ELSE 'Host time between two calls' || coalesce(' inside ' || name, '') END
           || ' is ' || round(100 * dur_ns / path_ns, 1) || ' % of the critical path: if the host was waiting '
           || 'for the GPU or another thread there, the work it waited on is the path; read the per-stream '
           || 'figures rather than the path''s cpu share'
FROM path_top
WHERE path_ns > 0 AND dur_ns > 0.5 * path_ns
UNION ALL
-- flag gpu_queueing (warning): the step's first GPU activity started 1 ms or more after its launch call
-- returned (step_queueing.gpu_queued): the GPU was busy with earlier work (of an earlier step, or from
-- before the profiled window) or host and GPU clocks are offset. A launch call that is itself long (module
-- loading or lazy initialization inside it) is launch delay on the host, never this flag. That wait is `gpu_queued_ns` in the step breakdown
-- and `gpu_queued` on the critical path, not host setup; the step's wall and its GPU utilization include
-- it, and an idle gap across it was not the host's doing.
SELECT run_id, rank, step, 'gpu_queueing', 'warning',
       ['step_breakdown.gpu_queued', 'step_breakdown.gpu_utilization', 'idle_gaps'],
       map(['queued_ns', 'first_delay_ns', 'visible_busy_ns'],
           [CAST(queued_ns AS DOUBLE), CAST(first_delay_ns AS DOUBLE), CAST(visible_busy_ns AS DOUBLE)]),
       'The step''s first GPU activity waited ' || round(first_delay_ns / 1e6, 3) || ' ms after its launch call returned, '
           || CASE WHEN queue_cause = 'earlier_gpu_work'
                   THEN 'queued behind earlier GPU work shown in the trace'
                   ELSE 'with the GPU idle in the trace: queued behind work from before the profiled window, or '
                        || 'host and GPU clocks are offset' END
           || '; that time is GPU queueing, not host setup: profile a window that starts after a '
           || 'synchronize (or warm-up steps) to see the step as it runs'
FROM step_queueing
WHERE gpu_queued

-- stream_summary: one row per (run_id, rank, device, stream, step), plus one per stream with step NULL
-- for the whole rank.
-- Columns:
--   run_id, rank, device, stream, step   VARCHAR, INTEGER, INTEGER, BIGINT, BIGINT
--                            the stream in the step (step NULL: whole rank)
--   stream_name               VARCHAR  the stream's name from the trace (`stream 7`, ...)
--   activities                BIGINT  GPU activities on the stream
--   busy_ns                   HUGEINT  union of its activities (sum of durations when they do not overlap)
--   share_of_span             DOUBLE  busy_ns / the span of the device's GPU work in the step (gpu_timeline
--                            exact)
--   exclusive_ns              HUGEINT  time while this stream was busy and no other stream of the device was:
--                             the sum of kernel_overlap.stream_exclusive_ns (each activity's exclusive time
--                             in its own piece, the part no earlier activity of the stream covered), so time
--                             when two activities of the stream overlap (programmatic dependent launch)
--                             counts once. Invariant: exclusive_ns <= busy_ns on every row (a sum of the
--                             activities' exclusive_ns would count that time twice: b200_eager's stream 7 had
--                             exclusive 11.666 ms > busy 11.596 ms that way)
--   gpu_time_ns               HUGEINT  sum of its activities' durations
--   is_critical               BOOLEAN  the stream with the most gpu time on the step's critical path
--                             (critical_stream); NULL on whole-rank rows and steps without a path
-- materialized: per_run   rows kept per run (warehouse/derived.py: `tracehouse derive`): the report's step section
CREATE OR REPLACE VIEW stream_summary AS
-- each view it reads is read once (a CTE): DuckDB binds a view again at every reference
WITH all_kernel_overlap AS (SELECT * FROM kernel_overlap),
per_step AS (
    SELECT run_id, rank, device, stream, step, count(*) AS activities, sum(dur_ns) AS gpu_time_ns,
           sum(stream_exclusive_ns) AS exclusive_ns
    FROM all_kernel_overlap WHERE step IS NOT NULL
    GROUP BY run_id, rank, device, stream, step
    UNION ALL
    SELECT run_id, rank, device, stream, NULL, count(*), sum(dur_ns), sum(stream_exclusive_ns)
    FROM all_kernel_overlap
    GROUP BY run_id, rank, device, stream
),
busy AS (
    -- union of the stream's activities per step (and for the whole rank): the length of its busy islands
    SELECT run_id, rank, device, stream, step, sum(island_ns) AS busy_ns
    FROM _busy_islands
    WHERE scope IN ('stream', 'stream_step')
    GROUP BY run_id, rank, device, stream, step
),
names AS (
    SELECT run_id, rank, device, stream, name AS stream_name FROM streams
)
SELECT p.run_id, p.rank, p.device, p.stream, p.step, n.stream_name, p.activities, b.busy_ns,
       CASE WHEN t.span_ns > 0 THEN b.busy_ns / t.span_ns END AS share_of_span,
       p.exclusive_ns, p.gpu_time_ns,
       CASE WHEN p.step IS NOT NULL AND c.critical_stream IS NOT NULL THEN c.critical_stream = p.stream END AS is_critical
FROM per_step AS p
JOIN busy AS b ON b.run_id = p.run_id AND b.rank = p.rank AND b.device = p.device AND b.stream = p.stream
              AND b.step IS NOT DISTINCT FROM p.step
LEFT JOIN gpu_timeline AS t ON t.run_id = p.run_id AND t.rank = p.rank AND t.device = p.device
              AND t.step IS NOT DISTINCT FROM p.step AND t.variant = 'exact'
LEFT JOIN names AS n ON n.run_id = p.run_id AND n.rank = p.rank AND n.device = p.device AND n.stream = p.stream
LEFT JOIN critical_stream AS c ON c.run_id = p.run_id AND c.rank = p.rank AND c.step = p.step;

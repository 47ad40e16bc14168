-- stream_summary: one row per (run_id, rank, device, stream, step), plus one per stream with step NULL
-- for the whole rank.
-- Columns:
--   run_id, rank, device, stream, step   the stream in the step (step NULL: whole rank)
--   stream_name               the stream's name from the trace (`stream 7`, ...)
--   activities                GPU activities on the stream
--   busy_ns                   union of its activities (sum of durations when they do not overlap)
--   share_of_span             busy_ns / the span of the device's GPU work in the step (gpu_timeline exact)
--   exclusive_ns              time while no other stream of the device was busy (kernel_overlap)
--   gpu_time_ns               sum of its activities' durations
--   is_critical               the stream with the most gpu time on the step's critical path
--                             (critical_stream); NULL on whole-rank rows and steps without a path
CREATE OR REPLACE VIEW stream_summary AS
WITH per_step AS (
    SELECT run_id, rank, device, stream, step, count(*) AS activities, sum(dur_ns) AS gpu_time_ns,
           sum(exclusive_ns) AS exclusive_ns
    FROM kernel_overlap WHERE step IS NOT NULL
    GROUP BY run_id, rank, device, stream, step
    UNION ALL
    SELECT run_id, rank, device, stream, NULL, count(*), sum(dur_ns), sum(exclusive_ns)
    FROM kernel_overlap
    GROUP BY run_id, rank, device, stream
),
busy AS (
    -- union per stream and step, by islands (as in kernel_overlap)
    SELECT run_id, rank, device, stream, step, sum(e - s) AS busy_ns
    FROM (
        SELECT run_id, rank, device, stream, step, island, min(start_ns) AS s, max(end_ns) AS e
        FROM (
            SELECT *, sum(CASE WHEN prev_end IS NULL OR start_ns > prev_end THEN 1 ELSE 0 END)
                          OVER (PARTITION BY run_id, rank, device, stream, step_key ORDER BY start_ns, end_ns
                                ROWS UNBOUNDED PRECEDING) AS island
            FROM (
                SELECT run_id, rank, device, stream, step, coalesce(step, -1) AS step_key, start_ns, end_ns,
                       max(end_ns) OVER (PARTITION BY run_id, rank, device, stream, coalesce(step, -1)
                                         ORDER BY start_ns, end_ns
                                         ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_end
                FROM (SELECT run_id, rank, device, stream, step, start_ns, end_ns FROM kernels WHERE step IS NOT NULL
                      UNION ALL
                      SELECT run_id, rank, device, stream, NULL, start_ns, end_ns FROM kernels)
            )
        )
        GROUP BY run_id, rank, device, stream, step, island
    )
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

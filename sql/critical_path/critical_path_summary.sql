-- critical_path_summary: one row per (run_id, rank, step, kind, category) of a critical path: how much
-- of the path that kind of segment takes (category only for kind `gpu`; NULL for the others).
-- Columns:
--   run_id, rank, step  VARCHAR, INTEGER, BIGINT  the step
--   kind                VARCHAR  gpu / launch_delay / gpu_queued / kernel_gap / cpu / sync_wait (see
--                            critical_path)
--   category            VARCHAR  kernel category of the gpu time; NULL for the other kinds
--   time_ns             HUGEINT  sum of the segments' dur_ns
--   share               DOUBLE  time_ns / the path's span (the shares of a step sum to 1)
--   segments            HUGEINT  number of segments
--   critical_stream     BIGINT  the step's critical stream: the stream with the most gpu time on the path
-- materialized: per_run   rows kept per run (warehouse/derived.py: `tracehouse derive`): the diff's critical path (warehouse/diff_facts.py), run_metrics
--                       (ties: the lower id), repeated on every row of the step (as in the critical_stream
--                       view)
CREATE OR REPLACE VIEW critical_path_summary AS
WITH agg AS (
    SELECT run_id, rank, step, kind, category, stream, SUM(dur_ns) AS time_ns, COUNT(*) AS segments,
           MIN(start_ns) AS first_ns, MAX(start_ns + dur_ns) AS last_ns
    FROM critical_path
    GROUP BY run_id, rank, step, kind, category, stream
),
per_step AS (
    SELECT a.*,
           MAX(last_ns) OVER (PARTITION BY run_id, rank, step)
               - MIN(first_ns) OVER (PARTITION BY run_id, rank, step) AS span_ns,
           SUM(CASE WHEN kind = 'gpu' THEN time_ns ELSE 0 END)
               OVER (PARTITION BY run_id, rank, step, CASE WHEN kind = 'gpu' THEN stream END) AS stream_gpu_ns
    FROM agg a
),
crit AS (
    SELECT p.*,
           FIRST_VALUE(CASE WHEN kind = 'gpu' THEN stream END) OVER (
               PARTITION BY run_id, rank, step
               ORDER BY CASE WHEN kind = 'gpu' THEN 0 ELSE 1 END, stream_gpu_ns DESC, stream
               ROWS BETWEEN UNBOUNDED PRECEDING AND UNBOUNDED FOLLOWING) AS critical_stream
    FROM per_step p
)
SELECT run_id, rank, step, kind, category, SUM(time_ns) AS time_ns,
       CASE WHEN MAX(span_ns) > 0 THEN CAST(SUM(time_ns) AS DOUBLE) / MAX(span_ns) END AS share,
       SUM(segments) AS segments, MAX(critical_stream) AS critical_stream
FROM crit
GROUP BY run_id, rank, step, kind, category

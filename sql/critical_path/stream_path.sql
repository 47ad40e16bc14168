-- stream_path: one row per (run_id, rank, step, device, stream) with GPU activities of the step: whether
-- the stream is the step's critical stream or runs in parallel with it, and how much of its GPU time the
-- critical path runs through. The critical stream is critical_stream's (the stream with the most gpu time
-- on the path); every other stream with work in the step is `parallel`: its work ran beside the critical
-- stream's, on the path only where path_ns says so. Read from the path as critical_path draws it.
-- Columns:
--   run_id, rank, step   VARCHAR, INTEGER, BIGINT  the step
--   device, stream       INTEGER, BIGINT  the stream
--   role                 VARCHAR  'critical' (critical_stream.critical_stream) or 'parallel'; NULL when the
--                        step has no critical path or its path holds no GPU time
--   activities           BIGINT  GPU activities of the step on the stream
--   gpu_ns               BIGINT  sum of their durations
--   path_ns              BIGINT  the stream's gpu time on the critical path (sum of its `gpu` segments;
--                        NULL: the step has no path)
--   hidden_ns            BIGINT  gpu_ns − path_ns: its time beside the path (NULL: no path)
--   path_share           DOUBLE  path_ns / the path's span (NULL when the span is 0 or there is no path)
-- materialized: per_run   rows kept per run (warehouse/derived.py: `tracehouse derive`): the report's step section (reports/step_path.py)
CREATE OR REPLACE VIEW stream_path AS
WITH work AS (
    SELECT run_id, rank, step, device, stream, count(*) AS activities, sum(dur_ns) AS gpu_ns
    FROM _kernel_facts
    WHERE step IS NOT NULL
    GROUP BY run_id, rank, step, device, stream
),
on_path AS (
    SELECT run_id, rank, step, stream, sum(dur_ns) AS path_ns
    FROM critical_path
    WHERE kind = 'gpu'
    GROUP BY run_id, rank, step, stream
)
SELECT w.run_id, w.rank, w.step, w.device, w.stream,
       CASE WHEN cs.critical_stream IS NULL THEN NULL
            WHEN w.stream = cs.critical_stream THEN 'critical' ELSE 'parallel' END AS role,
       CAST(w.activities AS BIGINT) AS activities, CAST(w.gpu_ns AS BIGINT) AS gpu_ns,
       CASE WHEN cs.step IS NOT NULL THEN CAST(coalesce(p.path_ns, 0) AS BIGINT) END AS path_ns,
       CASE WHEN cs.step IS NOT NULL THEN CAST(w.gpu_ns - coalesce(p.path_ns, 0) AS BIGINT) END AS hidden_ns,
       CASE WHEN cs.span_ns > 0 THEN coalesce(p.path_ns, 0) / CAST(cs.span_ns AS DOUBLE) END AS path_share
FROM work AS w
LEFT JOIN on_path AS p
  ON p.run_id = w.run_id AND p.rank = w.rank AND p.step = w.step AND p.stream IS NOT DISTINCT FROM w.stream
LEFT JOIN critical_stream AS cs ON cs.run_id = w.run_id AND cs.rank = w.rank AND cs.step = w.step

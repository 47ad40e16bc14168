-- component_path: one row per (run_id, rank, step, component) of step_components: the component's GPU time
-- in the step split into the time it is on the step's critical path and the time it is hidden beside the
-- path (it ran, but the step's end did not wait for it), and the stream where most of the hidden part ran:
-- "moe: 51.1 µs on the path, 253.7 µs hidden, 253.7 µs of it on stream 24".
-- The components are step_components' (attention, moe, gemm, communication, norm, other, and one
-- `rest (...)` row for every other category). On the path: the sum of dur_ns of the critical_path
-- segments of kind `gpu` whose category is one of the component's (a segment is the part of an activity
-- the path runs through: the activity, clamped where a later segment already starts). Hidden: the
-- component's GPU time (sum of its activities' durations, every stream of the rank) minus its time on
-- the path. The path is read as critical_path draws it, never walked again here. A step without a
-- critical path (no row in critical_stream) has NULL path and hidden times.
-- Columns:
--   run_id, rank, step   VARCHAR, INTEGER, BIGINT  the step
--   component            VARCHAR  as in step_components
--   gpu_time_ns          BIGINT  the component's GPU time in the step (step_components.gpu_time_ns)
--   share_of_wall        DOUBLE  gpu_time_ns / the step's wall (step_components.share_of_wall)
--   path_ns              BIGINT  its time on the critical path (NULL: the step has no path)
--   path_share           DOUBLE  path_ns / the path's span (critical_stream.span_ns; NULL when 0 or no path)
--   hidden_ns            BIGINT  gpu_time_ns − path_ns (NULL: no path)
--   hidden_stream        BIGINT  the stream with the most hidden time of the component (its GPU time there
--                        minus its path time there; ties: the lower id); NULL when nothing is hidden
--   hidden_stream_ns     BIGINT  the hidden time on that stream (NULL when hidden_stream is NULL)
--   streams              BIGINT  streams on which the component ran in the step
-- materialized: per_run   rows kept per run (warehouse/derived.py: `tracehouse derive`): the report's step section (reports/step_path.py)
CREATE OR REPLACE VIEW component_path AS
WITH by_stream AS (
    SELECT run_id, rank, step, category, stream, sum(dur_ns) AS gpu_ns
    FROM _kernel_facts
    WHERE step IS NOT NULL
    GROUP BY run_id, rank, step, category, stream
),
on_path AS (
    SELECT run_id, rank, step, category, stream, sum(dur_ns) AS path_ns
    FROM critical_path
    WHERE kind = 'gpu'
    GROUP BY run_id, rank, step, category, stream
),
grouped AS (
    -- step_components' grouping: the named components as such, every other category in `rest`
    SELECT b.run_id, b.rank, b.step, b.stream,
           CASE WHEN b.category IN ('attention', 'moe', 'gemm', 'communication', 'norm', 'other')
                THEN b.category ELSE 'rest' END AS part,
           b.gpu_ns, coalesce(p.path_ns, 0) AS path_ns
    FROM by_stream AS b
    LEFT JOIN on_path AS p
      ON p.run_id = b.run_id AND p.rank = b.rank AND p.step = b.step AND p.category = b.category
     AND p.stream IS NOT DISTINCT FROM b.stream
),
per_stream AS (
    SELECT run_id, rank, step, part, stream, sum(gpu_ns) AS gpu_ns, sum(path_ns) AS path_ns,
           sum(gpu_ns) - sum(path_ns) AS hidden_ns
    FROM grouped
    GROUP BY run_id, rank, step, part, stream
),
ranked AS (
    SELECT *,
           row_number() OVER (PARTITION BY run_id, rank, step, part ORDER BY hidden_ns DESC, stream) AS pick
    FROM per_stream
),
per_part AS (
    SELECT run_id, rank, step, part, sum(path_ns) AS path_ns,
           max(CASE WHEN pick = 1 AND hidden_ns > 0 THEN stream END) AS hidden_stream,
           max(CASE WHEN pick = 1 AND hidden_ns > 0 THEN hidden_ns END) AS hidden_stream_ns,
           count(*) FILTER (WHERE gpu_ns > 0) AS streams
    FROM ranked
    GROUP BY run_id, rank, step, part
)
SELECT c.run_id, c.rank, c.step, c.component, c.gpu_time_ns, c.share_of_wall,
       CASE WHEN cs.step IS NOT NULL THEN CAST(coalesce(p.path_ns, 0) AS BIGINT) END AS path_ns,
       CASE WHEN cs.span_ns > 0 THEN coalesce(p.path_ns, 0) / CAST(cs.span_ns AS DOUBLE) END AS path_share,
       CASE WHEN cs.step IS NOT NULL THEN CAST(c.gpu_time_ns - coalesce(p.path_ns, 0) AS BIGINT) END AS hidden_ns,
       CASE WHEN cs.step IS NOT NULL THEN p.hidden_stream END AS hidden_stream,
       CASE WHEN cs.step IS NOT NULL THEN CAST(p.hidden_stream_ns AS BIGINT) END AS hidden_stream_ns,
       CAST(coalesce(p.streams, 0) AS BIGINT) AS streams
FROM step_components AS c
LEFT JOIN per_part AS p
  ON p.run_id = c.run_id AND p.rank = c.rank AND p.step = c.step
 AND (p.part = c.component OR (p.part = 'rest' AND c.component LIKE 'rest (%'))
LEFT JOIN critical_stream AS cs ON cs.run_id = c.run_id AND cs.rank = c.rank AND cs.step = c.step

-- critical_path_flags: the critical path's own flag: one row per step whose path one host segment dominates
-- (critical_path_one_host_call), in data_quality's columns (data_quality is the union of the flag views;
-- its header says what a flag is and names the figures).
-- Columns:
--   run_id    VARCHAR  the run
--   rank      INTEGER  the rank the flag is about; NULL for the whole run
--   step      BIGINT  the step (step_spans.step) the flag is about; NULL for the whole run or rank
--   flag      VARCHAR  the flag's name (below)
--   severity  VARCHAR  error / warning / info
--   affects   VARCHAR[]  the report figures the flag concerns (data_quality's header names them)
--   evidence  MAP(VARCHAR, DOUBLE)  the numbers the flag rests on (name -> value; durations in ns, shares as
--             fractions of 1)
--   message   VARCHAR  one line: what is wrong and what to do about it
CREATE OR REPLACE VIEW critical_path_flags AS
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
-- flag critical_path_one_host_call (warning): one host segment (a call, or host time between two calls)
-- is more than half of a step's critical path: the walk likely followed a call that was waiting on the
-- GPU (a blocking copy, a sync) or on another thread
SELECT run_id, rank, step, 'critical_path_one_host_call' AS flag, 'warning' AS severity,
       ['critical_path', 'stream_summary.critical'] AS affects,
       map(['op_id', 'segment_ns', 'path_ns', 'share', 'segment_offset_ns', 'path_start_ns'],
           [CAST(op_id AS DOUBLE), CAST(dur_ns AS DOUBLE), CAST(path_ns AS DOUBLE), CAST(dur_ns / path_ns AS DOUBLE), CAST(start_ns - path_start_ns AS DOUBLE), CAST(path_start_ns AS DOUBLE)]) AS evidence,
       CASE WHEN edge IS NULL THEN 'One host call (' || coalesce(name, '?') || ')'
            WHEN edge = 'step_start' THEN 'Host time from the step''s start to its first call on the path'
            ELSE 'Host time between two calls' || coalesce(' inside ' || name, '') END
           || ' is ' || round(100 * dur_ns / path_ns, 1) || ' % of the critical path: if the host was waiting '
           || 'for the GPU or another thread there, the work it waited on is the path; read the per-stream '
           || 'figures rather than the path''s cpu share' AS message
FROM path_top
WHERE path_ns > 0 AND dur_ns > 0.5 * path_ns;

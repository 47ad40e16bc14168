-- step_walls: one row per (run_id, rank, step) of step_spans: the step's wall clock and GPU activity count,
-- from the tables alone (no timeline): the same values as step_breakdown's columns of those names, for the
-- views that need only these (step_warmup, step_flags' few_steps) without step_breakdown's timeline work
-- (over a whole 1 GB run, step_breakdown's islands cost what an export's memory limit cannot hold).
-- Columns:
--   run_id, rank, step, phase   VARCHAR, INTEGER, BIGINT, VARCHAR  the step (step_spans)
--   activities      BIGINT  GPU activities of the step (its kernels rows: kernels, copies, fills)
--   wall_start_ns   BIGINT  the earlier of the step's host start and its first GPU start
--   wall_end_ns     BIGINT  the later of the step's host end and its last GPU end
--   wall_ns         BIGINT  wall_end_ns - wall_start_ns
CREATE OR REPLACE VIEW step_walls AS
SELECT run_id, rank, step, phase, activities, wall_start_ns, wall_end_ns,
       wall_end_ns - wall_start_ns AS wall_ns
FROM (
    SELECT s.run_id, s.rank, s.step, s.phase, coalesce(k.n, 0) AS activities,
           least(s.start_ns, coalesce(k.gpu_start_ns, s.start_ns)) AS wall_start_ns,
           greatest(s.end_ns, coalesce(k.gpu_end_ns, s.end_ns)) AS wall_end_ns
    FROM step_spans AS s
    LEFT JOIN (SELECT run_id, rank, step, count(*) AS n, min(start_ns) AS gpu_start_ns,
                      max(end_ns) AS gpu_end_ns
               FROM kernels WHERE step IS NOT NULL GROUP BY run_id, rank, step) AS k
      ON k.run_id = s.run_id AND k.rank = s.rank AND k.step = s.step
);

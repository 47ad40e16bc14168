-- run_step_time: one row per run: its GPU time in and out of steps and per step, the totals of
-- `tracehouse diff` (step_kernel_time has the same figures per activity name).
-- Columns:
--   run_id                   VARCHAR  the run (runs)
--   rank_steps               BIGINT  rows of `steps` of the run (0: the run has no steps)
--   ranks                    BIGINT  distinct ranks among them
--   gpu_time_ns              BIGINT  sum of dur_ns of all the run's GPU activities
--   in_steps_ns              BIGINT  of that, the activities inside a step (all ranks)
--   outside_steps_ns         BIGINT  gpu_time_ns - in_steps_ns: in no step, so in no per-step figure
--   gpu_ns_per_step          DOUBLE  in_steps_ns / rank_steps (0 when the run has no steps)
--   launches                 BIGINT  GPU activities inside a step (all ranks): the launches of in_steps_ns
--   ns_per_launch            DOUBLE  in_steps_ns / launches: mean GPU time per launch (NULL: no launch in a
--                            step)
-- materialized: per_run   rows kept per run (warehouse/derived.py: `tracehouse derive`): the diff's totals (warehouse/diff_facts.py)
CREATE OR REPLACE VIEW run_step_time AS
WITH st AS (
    SELECT run_id, count(*) AS rank_steps, count(DISTINCT rank) AS ranks FROM steps GROUP BY run_id
),
total AS (
    SELECT run_id, sum(dur_ns) AS ns FROM kernels GROUP BY run_id
),
inside AS (
    SELECT run_id, sum(gpu_time_ns) AS ns, sum(launches) AS launches FROM step_kernel_time GROUP BY run_id
)
SELECT r.run_id, CAST(coalesce(st.rank_steps, 0) AS BIGINT) AS rank_steps, CAST(coalesce(st.ranks, 0) AS BIGINT) AS ranks,
       CAST(coalesce(t.ns, 0) AS BIGINT) AS gpu_time_ns, CAST(coalesce(i.ns, 0) AS BIGINT) AS in_steps_ns,
       CAST(coalesce(t.ns, 0) - coalesce(i.ns, 0) AS BIGINT) AS outside_steps_ns,
       CASE WHEN coalesce(st.rank_steps, 0) > 0 THEN coalesce(i.ns, 0) / st.rank_steps ELSE 0.0 END AS gpu_ns_per_step,
       CAST(coalesce(i.launches, 0) AS BIGINT) AS launches,
       CASE WHEN i.launches > 0 THEN i.ns / i.launches END AS ns_per_launch
FROM runs AS r
LEFT JOIN st ON st.run_id = r.run_id
LEFT JOIN total AS t ON t.run_id = r.run_id
LEFT JOIN inside AS i ON i.run_id = r.run_id;

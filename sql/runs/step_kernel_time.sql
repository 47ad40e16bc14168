-- step_kernel_time: one row per (run_id, name, kind) of GPU activity that ran inside a step: its GPU time
-- per step, the unit of `tracehouse diff`. Per step means the mean over the run's rank-steps (rows of
-- `steps`): the GPU time of the activities inside steps, summed over every rank, divided by how many
-- (rank, step)s the run has, i.e. the mean time per step of one rank (run_metrics' rank-NULL rows).
-- Activities in no step are in no row (run_step_time.outside_steps_ns says how much time that is).
-- Columns:
--   run_id, name, kind       VARCHAR  the run and the activity (kernels)
--   category                 VARCHAR  the name's category (kernel_name_normalized / kernel_category; `other`
--                            when unknown)
--   normalized_name          VARCHAR  kernel_name_normalized.normalized_name (the exact name when none)
--   gpu_time_ns              BIGINT  sum of dur_ns of its activities inside steps, all ranks
--   launches                 BIGINT  how many of them
--   rank_steps               BIGINT  rows of `steps` of the run: the divisor
--   ns_per_step              DOUBLE  gpu_time_ns / rank_steps
--   launches_per_step        DOUBLE  launches / rank_steps
--   ns_per_launch            DOUBLE  gpu_time_ns / launches: its mean time per launch, whatever the number of
--                            steps or launches (how `diff` tells a kernel that got slower from one that ran
--                            more often)
-- materialized: per_run   rows kept per run (warehouse/derived.py: `tracehouse derive`): the diff's kernels (warehouse/diff_facts.py)
CREATE OR REPLACE VIEW step_kernel_time AS
WITH st AS (
    SELECT run_id, rank, step, count(*) OVER (PARTITION BY run_id) AS rank_steps FROM steps
),
per_name AS (
    SELECT k.run_id, k.name, k.kind, any_value(st.rank_steps) AS rank_steps,
           sum(k.dur_ns) AS gpu_time_ns, count(*) AS launches
    FROM kernels AS k
    JOIN st ON st.run_id = k.run_id AND st.rank = k.rank AND st.step = k.step
    GROUP BY k.run_id, k.name, k.kind
)
SELECT p.run_id, p.name, p.kind, coalesce(n.category, 'other') AS category,
       coalesce(n.normalized_name, p.name) AS normalized_name,
       CAST(p.gpu_time_ns AS BIGINT) AS gpu_time_ns, CAST(p.launches AS BIGINT) AS launches,
       CAST(p.rank_steps AS BIGINT) AS rank_steps,
       p.gpu_time_ns / p.rank_steps AS ns_per_step, p.launches / p.rank_steps AS launches_per_step,
       p.gpu_time_ns / p.launches AS ns_per_launch
FROM per_name AS p
LEFT JOIN kernel_name_normalized AS n ON n.name = p.name AND n.kind = p.kind;

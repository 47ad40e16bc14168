-- category_summary: one row per (run_id, phase, category): the GPU time of the category's activities
-- (sum of durations over all ranks and streams) and its share of the phase's GPU time.
-- Columns:
--   run_id, phase   VARCHAR  the run and the phase (`prefill`, `decode`, `mixed`, `unknown`)
--   category        VARCHAR  the category (kernel_category)
--   gpu_time_ns     HUGEINT  sum of dur_ns of the category's activities
--   activities      BIGINT  how many activities
--   share           DOUBLE  gpu_time_ns / the phase's total GPU time (shares of a phase sum to 1)
-- materialized: per_run   rows kept per run (warehouse/derived.py: `tracehouse derive`)
CREATE OR REPLACE VIEW category_summary AS
WITH per_category AS (
    SELECT run_id, phase_key AS phase, category, sum(dur_ns) AS gpu_time_ns, count(*) AS activities
    FROM _kernel_facts
    GROUP BY run_id, phase_key, category
)
SELECT run_id, phase, category, gpu_time_ns, activities,
       CASE WHEN sum(gpu_time_ns) OVER (PARTITION BY run_id, phase) > 0
            THEN gpu_time_ns / sum(gpu_time_ns) OVER (PARTITION BY run_id, phase) END AS share
FROM per_category;

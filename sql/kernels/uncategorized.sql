-- uncategorized: one row per (run_id, phase): the phase's GPU time in activities no category rule
-- knows, the report's "uncategorized (`other`)" figure. `other` is also a category a rule can give on
-- purpose (torch.cuda._sleep's spin kernel is no work): such activities are known, not uncategorized.
-- A run's share over several phases is sum(uncategorized_ns) / sum(gpu_time_ns) of their rows.
-- Columns:
--   run_id, phase         VARCHAR  the run and phase (category_summary)
--   gpu_time_ns           BIGINT  sum of dur_ns of the phase's activities (all categories, ranks, streams)
--   other_ns              BIGINT  of that, in category `other` (0 when none)
--   known_other_ns        BIGINT  of other_ns, the activities a rule files as `other` (kernel_category
--                         rule_name is not 'unmatched')
--   uncategorized_ns      BIGINT  other_ns - known_other_ns: the activities no rule matched
--   uncategorized_share   DOUBLE  uncategorized_ns / gpu_time_ns (NULL when the phase has no GPU time)
CREATE OR REPLACE VIEW uncategorized AS
WITH phase_total AS (
    SELECT run_id, phase, sum(gpu_time_ns) AS gpu_time_ns,
           coalesce(sum(gpu_time_ns) FILTER (WHERE category = 'other'), 0) AS other_ns
    FROM category_summary
    GROUP BY run_id, phase
),
known AS (
    SELECT k.run_id, k.phase, sum(k.gpu_time_ns) AS ns
    FROM kernel_summary AS k
    WHERE k.category = 'other'
      AND k.name IN (SELECT name FROM kernel_category WHERE category = 'other' AND rule_name <> 'unmatched')
    GROUP BY k.run_id, k.phase
)
SELECT t.run_id, t.phase, CAST(t.gpu_time_ns AS BIGINT) AS gpu_time_ns, CAST(t.other_ns AS BIGINT) AS other_ns,
       CAST(coalesce(k.ns, 0) AS BIGINT) AS known_other_ns,
       CAST(t.other_ns - coalesce(k.ns, 0) AS BIGINT) AS uncategorized_ns,
       CASE WHEN t.gpu_time_ns > 0 THEN (t.other_ns - coalesce(k.ns, 0)) / t.gpu_time_ns END AS uncategorized_share
FROM phase_total AS t
LEFT JOIN known AS k ON k.run_id = t.run_id AND k.phase = t.phase;

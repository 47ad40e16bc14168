-- step_components: one row per (run_id, rank, step, component): the step's GPU time in one component of
-- the report's step summary (sum of its activities' durations, every stream of the rank) and its share
-- of the step's wall. The components: attention, moe, gemm, communication and norm, each as such;
-- `other` as such (never merged: mostly what no category rule knows, see uncategorized); and one row
-- `rest (c1, c2, ...)` summing every other category the step has (named largest first, ties by name).
-- A component without GPU time in the step (no activity, or only zero-duration ones) has no row. Shares
-- add to more than 1 when streams overlap.
-- Columns:
--   run_id, rank, step   VARCHAR, INTEGER, BIGINT  the step (steps; step_breakdown gives its wall)
--   component            VARCHAR  attention, moe, gemm, communication, norm, other, or 'rest (...)'
--   categories           VARCHAR[]  the categories the row sums (one for a named component), largest first
--   gpu_time_ns          BIGINT  sum of dur_ns of the step's activities in those categories
--   share_of_wall        DOUBLE  gpu_time_ns / step_breakdown.wall_ns (NULL when the wall is 0)
-- materialized: per_run   rows kept per run (warehouse/derived.py: `tracehouse derive`): the report's step section
CREATE OR REPLACE VIEW step_components AS
WITH named AS (
    SELECT * FROM (VALUES ('attention'), ('moe'), ('gemm'), ('communication'), ('norm'), ('other')) AS v(component)
),
by_category AS (
    SELECT run_id, rank, step, category, sum(dur_ns) AS ns
    FROM _kernel_facts
    WHERE step IS NOT NULL
    GROUP BY run_id, rank, step, category
    -- a category whose activities took no time (zero durations) has no GPU time in the step: no row of
    -- its own, not one of the rest's names
    HAVING sum(dur_ns) > 0
),
ranked AS (
    -- the categories of each row, largest first, as an ordered window (an ordered list() aggregate has no
    -- Spark form: collect_list drops the order)
    SELECT c.run_id, c.rank, c.step, n.component IS NULL AS is_rest,  -- NULL: a category of the rest
           ROW_NUMBER() OVER (PARTITION BY c.run_id, c.rank, c.step, n.component
                              ORDER BY c.ns DESC, c.category) AS rn,
           list(c.category) OVER (PARTITION BY c.run_id, c.rank, c.step, n.component
                                  ORDER BY c.ns DESC, c.category
                                  ROWS BETWEEN UNBOUNDED PRECEDING AND UNBOUNDED FOLLOWING) AS categories,
           sum(c.ns) OVER (PARTITION BY c.run_id, c.rank, c.step, n.component) AS group_ns
    FROM by_category AS c
    LEFT JOIN named AS n ON n.component = c.category
),
grouped AS (
    SELECT run_id, rank, step, is_rest, categories, CAST(group_ns AS BIGINT) AS gpu_time_ns
    FROM ranked
    WHERE rn = 1
)
SELECT g.run_id, g.rank, g.step,
       CASE WHEN g.is_rest THEN 'rest (' || array_to_string(g.categories, ', ') || ')'
            ELSE g.categories[1] END AS component,
       g.categories, g.gpu_time_ns,
       g.gpu_time_ns / nullif(b.wall_ns, 0) AS share_of_wall
FROM grouped AS g
LEFT JOIN step_breakdown AS b ON b.run_id = g.run_id AND b.rank = g.rank AND b.step = g.step;

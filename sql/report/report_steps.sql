-- report_steps: one row per (run_id, pick) for which a step can be shown: the step a run report shows,
-- for the whole run (pick 'all', `tracehouse report RUN`) and for each phase (`--phase decode`, ...).
-- The rule: among the steps with GPU work (step_breakdown.activities > 0) of the run's lowest rank
-- (step_spans), leaving out the rank's warm-up step (step_warmup.is_warmup: its first iteration, markedly
-- longer than the others of its phase and holding one-time setup, which always has other steps of its
-- phase to show instead), and of the pick's phase (pick 'all': the phase of the first step in the order
-- decode, prefill, then any other phase, then by wall_ns and step), the step with the median wall time:
-- the (n // 2 + 1)-th of the n steps of that phase ordered by wall_ns, then step (the upper median of an
-- even count). A pick with no such step has no row.
-- Columns:
--   run_id         VARCHAR  the run
--   pick           VARCHAR  'all' (no --phase), or the --phase asked: decode, prefill, mixed, unknown
--   rank           INTEGER  the step's rank (the run's lowest)
--   step           BIGINT   the step shown (step_breakdown's row)
--   phase          VARCHAR  its phase (NULL: a step of no phase, pick 'all' only)
--   steps_in_run   BIGINT   n: the steps the median is taken over (of that rank and phase, warm-up left out)
-- materialized: per_run   rows kept per run (warehouse/derived.py: `tracehouse derive`)
CREATE OR REPLACE VIEW report_steps AS
WITH first_rank AS (
    SELECT run_id, min(rank) AS rank FROM step_spans GROUP BY run_id
),
candidates AS (
    SELECT b.run_id, b.rank, b.step, b.phase, b.wall_ns
    FROM step_breakdown AS b
    JOIN first_rank AS f ON b.run_id = f.run_id AND b.rank = f.rank
    WHERE b.activities > 0
      AND NOT EXISTS (
          SELECT 1 FROM step_warmup AS w
          WHERE w.run_id = b.run_id AND w.rank = b.rank AND w.step = b.step AND w.is_warmup
      )
),
picks AS (
    SELECT * FROM (VALUES ('all'), ('decode'), ('prefill'), ('mixed'), ('unknown')) AS p (pick)
),
eligible AS (
    SELECT p.pick, c.* FROM picks AS p JOIN candidates AS c ON p.pick = 'all' OR c.phase = p.pick
),
first_of_pick AS (
    SELECT run_id, pick, phase,
           row_number() OVER (
               PARTITION BY run_id, pick
               ORDER BY CASE phase WHEN 'decode' THEN 0 WHEN 'prefill' THEN 1 ELSE 2 END, wall_ns NULLS LAST, step
           ) AS nth
    FROM eligible
),
same_phase AS (
    SELECT e.run_id, e.pick, e.rank, e.step, e.phase,
           row_number() OVER (PARTITION BY e.run_id, e.pick ORDER BY e.wall_ns NULLS LAST, e.step) AS nth,
           count(*) OVER (PARTITION BY e.run_id, e.pick) AS steps_in_run
    FROM eligible AS e
    JOIN first_of_pick AS f
      ON f.nth = 1 AND e.run_id = f.run_id AND e.pick = f.pick AND e.phase IS NOT DISTINCT FROM f.phase
)
SELECT run_id, pick, CAST(rank AS INTEGER) AS rank, CAST(step AS BIGINT) AS step, phase,
       CAST(steps_in_run AS BIGINT) AS steps_in_run
FROM same_phase
WHERE nth = CAST(floor(steps_in_run / 2) AS BIGINT) + 1;

-- report_lanes: one row per GPU activity of a report step's timeline (reports/run.py, the step section's
-- lanes): for each step a run report shows (report_steps, any pick: its run, rank and step), every
-- activity of that rank in the step, and every activity of the rank in another step or in none that runs
-- inside the step's wall (ends after step_breakdown.wall_start_ns, starts before wall_end_ns: a previous
-- step's GPU work still running is not idle time). Kept per run, so that a derived run's report reads
-- these rows instead of computing _kernel_facts over the whole run; the report reads them only where the
-- connection holds them for the run, else the same rows of _kernel_facts.
-- Columns:
--   run_id, rank, step  VARCHAR, INTEGER, BIGINT  the report step (report_steps) whose timeline holds it
--   stream              BIGINT  the activity's stream (its lane)
--   kernel_id           BIGINT  the activity
--   name, category      VARCHAR  its name and category (_kernel_facts)
--   start_ns, end_ns    BIGINT  the activity
--   activity_step       BIGINT  the activity's own step (_kernel_facts.step): `step` for the step's own
--                       activities, another step or NULL for the others
-- materialized: per_run   rows kept per run (warehouse/derived.py: `tracehouse derive`): the report's step timeline
CREATE OR REPLACE VIEW report_lanes AS
WITH shown AS (
    SELECT DISTINCT r.run_id, r.rank, r.step, b.wall_start_ns, b.wall_end_ns
    FROM report_steps AS r
    JOIN step_breakdown AS b ON b.run_id = r.run_id AND b.rank = r.rank AND b.step = r.step
)
SELECT s.run_id, s.rank, s.step, f.stream, f.kernel_id, f.name, f.category, f.start_ns, f.end_ns,
       f.step AS activity_step
FROM shown AS s
JOIN _kernel_facts AS f ON f.run_id = s.run_id AND f.rank = s.rank
WHERE f.step = s.step
   OR (f.step IS DISTINCT FROM s.step AND f.end_ns > s.wall_start_ns AND f.start_ns < s.wall_end_ns)

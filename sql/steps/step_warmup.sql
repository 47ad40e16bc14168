-- step_warmup: one row per (run_id, rank, step) of step_walls (step_breakdown's steps), plus one row per rank with step NULL
-- when one-time work (one_time_work) lies outside every step: how much one-time setup each step holds,
-- and whether the step is the rank's warm-up step (its first iteration) rather than a steady-state one.
-- A step is the warm-up step when all of these hold:
--   - it is the rank's first step with GPU work (the earliest wall start among steps with activities);
--   - the rank has other steps with GPU work of the same phase (else there is no steady state to compare);
--   - its wall is more than 1.5 times the median wall of those other steps (WARMUP_FACTOR: a steady step
--     varies by a few per cent; one-time setup takes from milliseconds to seconds);
--   - it holds one-time work (one_time_ns > 0): a long first step without any is not called warm-up.
-- The report shows a steady-state step: report_steps leaves the warm-up step
-- out of its median pick (it has other steps of its phase, by the second condition).
-- Columns:
--   run_id, rank, step  VARCHAR, INTEGER, BIGINT  the step (step_walls); step NULL: the one-time work
--                            outside every step
--   phase               VARCHAR  the step's phase (NULL for the row outside the steps)
--   wall_ns             BIGINT  the step's wall (step_walls.wall_ns, as step_breakdown's; NULL outside the steps)
--   one_time_ns         HUGEINT  the union of the host time of the step's one-time work (events whose start
--                       lies in the step; nested or overlapping events counted once), 0 when none
--   one_time_events     HUGEINT  how many one-time events the step holds, not counting those inside another
--                            one
--   one_time_summary    VARCHAR  what they are, longest first: '<what> <time>' per event name, of the events
--                       not inside another one-time event (module loading records as `module loading`, a call
--                       holding one as `module loading in <call>`; `(N calls)` when several), the first 4 and
--                       `and N more`; times in s, ms or us; NULL when none
--   first_step          BOOLEAN  the step is the rank's first step with GPU work
--   others_median_wall_ns   DOUBLE  the median wall of the rank's other steps with GPU work of the same phase
--                       (NULL when there is none)
--   is_warmup           BOOLEAN  the step is the rank's warm-up step (the rule above)
CREATE OR REPLACE VIEW step_warmup AS
WITH work AS (SELECT * FROM one_time_work),
b AS (
    SELECT run_id, rank, step, phase, wall_start_ns, wall_ns, activities FROM step_walls
),
ordered AS (
    SELECT run_id, rank, step, start_ns, end_ns,
           max(end_ns) OVER (PARTITION BY run_id, rank, step ORDER BY start_ns, end_ns, op_id
                             ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_end
    FROM work
),
islands AS (
    SELECT run_id, rank, step, start_ns, end_ns,
           sum(CASE WHEN prev_end IS NULL OR start_ns > prev_end THEN 1 ELSE 0 END)
               OVER (PARTITION BY run_id, rank, step ORDER BY start_ns, end_ns ROWS UNBOUNDED PRECEDING) AS island
    FROM ordered
),
union_ns AS (
    SELECT run_id, rank, step, sum(hi - lo) AS one_time_ns
    FROM (SELECT run_id, rank, step, island, min(start_ns) AS lo, max(end_ns) AS hi
          FROM islands GROUP BY run_id, rank, step, island) t
    GROUP BY run_id, rank, step
),
nested AS (
    -- one-time events inside another one's interval on the rank (a module-loading record inside a slow
    -- first launch): the outer event names the time in the summary
    SELECT i.run_id, i.rank, i.op_id AS inner_id, o.op_id AS outer_id, i.kind AS inner_kind
    FROM work AS i
    JOIN work AS o
      ON o.run_id = i.run_id AND o.rank = i.rank AND o.op_id <> i.op_id
     AND o.start_ns <= i.start_ns AND o.end_ns >= i.end_ns
     AND (o.start_ns < i.start_ns OR o.end_ns > i.end_ns OR o.op_id < i.op_id)
),
by_what AS (
    SELECT w.run_id, w.rank, w.step,
           CASE WHEN w.kind = 'module_loading' AND w.cat = 'overhead' THEN 'module loading'
                WHEN l.outer_id IS NOT NULL THEN 'module loading in ' || w.name ELSE w.name END AS what,
           count(*) AS n, sum(w.dur_ns) AS ns
    FROM work AS w
    LEFT JOIN (SELECT DISTINCT run_id, rank, inner_id FROM nested) AS x
      ON x.run_id = w.run_id AND x.rank = w.rank AND x.inner_id = w.op_id
    LEFT JOIN (SELECT DISTINCT run_id, rank, outer_id FROM nested WHERE inner_kind = 'module_loading') AS l
      ON l.run_id = w.run_id AND l.rank = w.rank AND l.outer_id = w.op_id
    WHERE x.inner_id IS NULL
    GROUP BY ALL
),
ranked AS (
    SELECT *, ROW_NUMBER() OVER (PARTITION BY run_id, rank, step ORDER BY ns DESC, what) AS r,
           count(*) OVER (PARTITION BY run_id, rank, step) AS whats
    FROM by_what
),
summary AS (
    SELECT run_id, rank, step, sum(n) AS events,
           string_agg(what || ' ' || CASE WHEN ns >= 1000000000 THEN CAST(round(ns / 1e9, 2) AS VARCHAR) || ' s'
                                          WHEN ns >= 1000000 THEN CAST(round(ns / 1e6, 1) AS VARCHAR) || ' ms'
                                          ELSE CAST(round(ns / 1e3, 1) AS VARCHAR) || ' us' END
                                 || CASE WHEN n > 1 THEN ' (' || n || ' calls)' ELSE '' END, ', ' ORDER BY r)
               FILTER (WHERE r <= 4)
           || CASE WHEN max(whats) > 4 THEN ' and ' || (max(whats) - 4) || ' more' ELSE '' END AS text
    FROM ranked
    GROUP BY run_id, rank, step
),
first_steps AS (
    SELECT run_id, rank, arg_min(step, wall_start_ns) AS first_step
    FROM b WHERE activities > 0 GROUP BY run_id, rank
),
others AS (
    -- the median wall of the rank's other steps with GPU work, of the first step's phase
    SELECT f.run_id, f.rank, median(o.wall_ns) AS median_wall_ns
    FROM first_steps AS f
    JOIN b AS s ON s.run_id = f.run_id AND s.rank = f.rank AND s.step = f.first_step
    JOIN b AS o ON o.run_id = f.run_id AND o.rank = f.rank AND o.phase = s.phase AND o.step <> s.step
               AND o.activities > 0
    GROUP BY f.run_id, f.rank
),
rows_ AS (
    SELECT b.run_id, b.rank, b.step, b.phase, b.wall_ns FROM b
    UNION ALL
    SELECT DISTINCT run_id, rank, CAST(NULL AS BIGINT), CAST(NULL AS VARCHAR), CAST(NULL AS BIGINT)
    FROM work WHERE step IS NULL
)
SELECT x.run_id, x.rank, x.step, x.phase, x.wall_ns,
       coalesce(u.one_time_ns, 0) AS one_time_ns, coalesce(sm.events, 0) AS one_time_events,
       sm.text AS one_time_summary,
       coalesce(f.first_step = x.step, false) AS first_step,
       CASE WHEN f.first_step = x.step THEN o.median_wall_ns END AS others_median_wall_ns,
       coalesce(f.first_step = x.step AND o.median_wall_ns IS NOT NULL AND x.wall_ns > 1.5 * o.median_wall_ns
                AND coalesce(u.one_time_ns, 0) > 0, false) AS is_warmup
FROM rows_ AS x
LEFT JOIN union_ns AS u ON u.run_id = x.run_id AND u.rank = x.rank AND u.step IS NOT DISTINCT FROM x.step
LEFT JOIN summary AS sm ON sm.run_id = x.run_id AND sm.rank = x.rank AND sm.step IS NOT DISTINCT FROM x.step
LEFT JOIN first_steps AS f ON f.run_id = x.run_id AND f.rank = x.rank
LEFT JOIN others AS o ON o.run_id = x.run_id AND o.rank = x.rank

-- step_parts: one row per (run_id, rank, step, part) of a step whose main stream has a layer pattern
-- (layer_pattern_summary: is_main_stream with a period): the step's wall (step_breakdown) cut at the layers
-- into three parts, each with how busy the GPU was in it, so that the layers' utilization is read apart
-- from the step's setup and its tail:
--   setup    from the wall's start to the first layer's start (batch preparation, embedding, launches)
--   layers   from the first layer's start to the last layer's end: the start of the main stream's activity
--            with ordinal start_ordinal to the last end of its activities with ordinals start_ordinal ..
--            end_ordinal − 1 (the repeating block of layer_pattern_summary)
--   tail     from the last layer's end to the wall's end (final norm, lm_head, sampling, the step's last
--            collectives, the host's tail)
-- The parts tile the wall (their dur_ns sum to step_breakdown.wall_ns). Busy: the union of the step's own
-- GPU activities (every stream and device of the rank, as step_breakdown's compute), clipped to the part;
-- another step's activities inside the wall are not counted. A step without a main-stream layer pattern has
-- no rows.
-- Columns:
--   run_id, rank, step   VARCHAR, INTEGER, BIGINT  the step
--   part                 VARCHAR  setup, layers or tail
--   part_order           INTEGER  1, 2, 3 in that order
--   start_ns, end_ns     BIGINT  the part
--   dur_ns               BIGINT  end_ns − start_ns
--   busy_ns              BIGINT  GPU busy time in the part (union of the step's activities)
--   comm_ns              BIGINT  busy time of its communication activities alone (union) in the part
--   utilization          DOUBLE  busy_ns / dur_ns (NULL when dur_ns is 0)
-- materialized: per_run   rows kept per run (warehouse/derived.py: `tracehouse derive`): the report's step section (reports/step_path.py)
CREATE OR REPLACE VIEW step_parts AS
WITH all_kernel_facts AS (SELECT * FROM _kernel_facts),
main AS (
    SELECT run_id, rank, step, device, stream, start_ordinal, end_ordinal
    FROM layer_pattern_summary
    WHERE is_main_stream AND period IS NOT NULL
),
seq AS (
    SELECT run_id, rank, step, device, stream, start_ns, end_ns,
           row_number() OVER (PARTITION BY run_id, rank, step, device, stream ORDER BY start_ns, kernel_id) - 1
               AS ordinal
    FROM all_kernel_facts
    WHERE step IS NOT NULL
),
block AS (
    SELECT m.run_id, m.rank, m.step,
           min(CASE WHEN s.ordinal = m.start_ordinal THEN s.start_ns END) AS layers_start_ns,
           max(s.end_ns) AS layers_end_ns
    FROM main AS m
    JOIN seq AS s
      ON s.run_id = m.run_id AND s.rank = m.rank AND s.step = m.step AND s.device = m.device AND s.stream = m.stream
    WHERE s.ordinal >= m.start_ordinal AND s.ordinal < m.end_ordinal
    GROUP BY m.run_id, m.rank, m.step
),
parts AS (
    SELECT k.run_id, k.rank, k.step, p.part, p.part_order,
           CASE p.part WHEN 'setup' THEN b.wall_start_ns WHEN 'layers' THEN k.layers_start_ns
                       ELSE k.layers_end_ns END AS start_ns,
           CASE p.part WHEN 'setup' THEN k.layers_start_ns WHEN 'layers' THEN k.layers_end_ns
                       ELSE b.wall_end_ns END AS end_ns
    FROM block AS k
    JOIN step_breakdown AS b ON b.run_id = k.run_id AND b.rank = k.rank AND b.step = k.step
    CROSS JOIN (VALUES ('setup', 1), ('layers', 2), ('tail', 3)) AS p(part, part_order)
),
acts AS (
    SELECT f.run_id, f.rank, f.step, f.start_ns, f.end_ns, f.category = 'communication' AS is_comm
    FROM all_kernel_facts AS f
    JOIN block AS k ON k.run_id = f.run_id AND k.rank = f.rank AND k.step = f.step
),
-- the union of the step's activities (all of them; and communication alone): islands of overlapping
-- intervals, a new island where an activity starts after every earlier one has ended
flagged AS (
    SELECT 'all' AS what, run_id, rank, step, start_ns, end_ns,
           max(end_ns) OVER (PARTITION BY run_id, rank, step ORDER BY start_ns, end_ns
                             ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS reach
    FROM acts
    UNION ALL
    SELECT 'comm' AS what, run_id, rank, step, start_ns, end_ns,
           max(end_ns) OVER (PARTITION BY run_id, rank, step ORDER BY start_ns, end_ns
                             ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS reach
    FROM acts
    WHERE is_comm
),
numbered AS (
    SELECT *,
           sum(CASE WHEN reach IS NULL OR start_ns > reach THEN 1 ELSE 0 END)
               OVER (PARTITION BY what, run_id, rank, step ORDER BY start_ns, end_ns
                     ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS island
    FROM flagged
),
islands AS (
    SELECT what, run_id, rank, step, min(start_ns) AS start_ns, max(end_ns) AS end_ns
    FROM numbered
    GROUP BY what, run_id, rank, step, island
),
clipped AS (
    SELECT p.run_id, p.rank, p.step, p.part,
           sum(CASE WHEN i.what = 'all' THEN greatest(least(i.end_ns, p.end_ns) - greatest(i.start_ns, p.start_ns), 0)
                    ELSE 0 END) AS busy_ns,
           sum(CASE WHEN i.what = 'comm' THEN greatest(least(i.end_ns, p.end_ns) - greatest(i.start_ns, p.start_ns), 0)
                    ELSE 0 END) AS comm_ns
    FROM parts AS p
    JOIN islands AS i
      ON i.run_id = p.run_id AND i.rank = p.rank AND i.step = p.step
     AND i.end_ns > p.start_ns AND i.start_ns < p.end_ns
    GROUP BY p.run_id, p.rank, p.step, p.part
)
SELECT p.run_id, p.rank, p.step, p.part, CAST(p.part_order AS INTEGER) AS part_order, p.start_ns, p.end_ns,
       p.end_ns - p.start_ns AS dur_ns,
       CAST(coalesce(c.busy_ns, 0) AS BIGINT) AS busy_ns, CAST(coalesce(c.comm_ns, 0) AS BIGINT) AS comm_ns,
       CASE WHEN p.end_ns > p.start_ns THEN coalesce(c.busy_ns, 0) / CAST(p.end_ns - p.start_ns AS DOUBLE) END
           AS utilization
FROM parts AS p
LEFT JOIN clipped AS c ON c.run_id = p.run_id AND c.rank = p.rank AND c.step = p.step AND c.part = p.part

-- Stage 3 helpers: macros the transforms share.
-- innermost_enclosing(intervals, points): for every point (a launch call's start on its thread), the
-- innermost interval (cpu_op, python frame) of the same (pid, tid) that encloses it.
-- intervals: a table with columns (id, pid, tid, start_ns, dur_ns); points: (point_id, pid, tid, t).
-- Method: one sweep per thread: +1 at each interval's start, -1 at its end (ends before starts at the
-- same instant, so adjacent intervals do not nest; a zero-length interval closes after it opens; points
-- after starts). The running sum just before an interval opens is its depth; a point at depth d is
-- enclosed by the last interval opened before it at depth d - 1 (ASOF), which, for properly nested
-- intervals, is the innermost one around it. Returns (point_id, id); id is NULL outside every interval.
CREATE OR REPLACE MACRO innermost_enclosing(intervals, points) AS TABLE
WITH spans AS (
    SELECT id, pid, tid, start_ns, dur_ns, start_ns + dur_ns AS end_ns FROM query_table(intervals)
),
marks AS (
    SELECT pid, tid, start_ns AS t, 1 AS ord, -dur_ns AS tie, id, NULL::BIGINT AS point_id, 1 AS delta FROM spans
    UNION ALL
    SELECT pid, tid, end_ns, CASE WHEN dur_ns = 0 THEN 3 ELSE 0 END, 0, NULL, NULL, -1 FROM spans
    UNION ALL
    SELECT pid, tid, t, 2, 0, NULL, point_id, 0 FROM query_table(points)
),
swept AS (
    SELECT pid, tid, t, id, point_id,
           sum(delta) OVER (PARTITION BY pid, tid ORDER BY t, ord, tie, id ROWS UNBOUNDED PRECEDING) - delta AS depth
    FROM marks
),
opened AS (SELECT pid, tid, t, id, depth FROM swept WHERE id IS NOT NULL),
pts AS (SELECT pid, tid, t, point_id, depth - 1 AS want_depth FROM swept WHERE point_id IS NOT NULL)
SELECT p.point_id, CASE WHEN p.want_depth >= 0 THEN o.id END AS id
FROM pts AS p
ASOF LEFT JOIN opened AS o ON p.pid = o.pid AND p.tid = o.tid AND p.want_depth = o.depth AND p.t >= o.t;

-- _busy_islands: the one definition of "busy" over GPU activities. One row per busy island of a lane: a
-- maximal run of a lane's activities (kernels, copies, fills) that overlap or touch, i.e. one interval of
-- the union of the lane's activities. The islands of a lane are disjoint and their lengths sum to the
-- lane's busy time exactly.
-- Method (two ordered passes per lane, no range join, no grouping): the lane's activities in order
-- (start_ns, end_ns, kernel_id); an activity opens a new island when it starts after the latest end of
-- those before it (prev_end, their running max), else it joins the island of the one before it; it closes
-- its island when the next one opens (starts after the latest end up to it, reach_ns) or it is the lane's
-- last. The second pass, over the openers and closers alone: an island's end is its closer's reach_ns, its
-- activities the places (rn) from its opener to its closer, and the busy time before it the running sum
-- of the closers' reach_ns less the openers' start_ns before it. Activities that share a start belong to
-- one island whatever their order, so the islands do not depend on the tie-break; only first_kernel_id
-- does. Each window holds one scope's lanes (a branch per scope): one window over every scope's rows at
-- once spilled at a low memory limit (a 1 GB trace at 640MB: 30.4 s, now 8.6 s).
-- Lanes (scope): `rank` every activity of the rank (all its devices), `device` one device, `stream` one
-- stream of a device; `device_step` and `stream_step` the same with only the activities of one step
-- (kernels.step; activities outside every step are in no such lane). A query names its scope: each scope
-- is its own branch, so that one scope computes only itself.
-- Columns:
--   run_id, rank          VARCHAR, INTEGER  the rank
--   scope                 VARCHAR  `rank`, `device`, `stream`, `device_step` or `stream_step` (above)
--   device                INTEGER  the device (NULL for scope `rank`)
--   stream                BIGINT  the stream (scopes `stream`, `stream_step`; else NULL)
--   step                  BIGINT  the step (scopes `device_step`, `stream_step`; else NULL)
--   island_start_ns, island_end_ns   BIGINT  the island: its first start and its last end
--   island_ns             BIGINT  island_end_ns - island_start_ns
--   activities            BIGINT  activities in the island
--   first_kernel_id       BIGINT  the island's first activity in the lane's order (the one that ends the gap
--                         before the island)
--   prev_island_end_ns    BIGINT  the end of the lane's island before this one (NULL for the first): the gap
--                         before the island runs from it to island_start_ns
--   busy_before_ns        HUGEINT  the lane's busy time before the island: the summed length of its islands
--                         before this one, so the busy time before any t in the island is
--                         busy_before_ns + t - island_start_ns
CREATE OR REPLACE VIEW _busy_islands AS
-- scope `rank`: a lane is every activity of the rank
SELECT run_id, rank, 'rank' AS scope, CAST(NULL AS INTEGER) AS device, CAST(NULL AS BIGINT) AS stream,
       CAST(NULL AS BIGINT) AS step, start_ns AS island_start_ns, island_end_ns,
       island_end_ns - start_ns AS island_ns,
       CAST(CASE WHEN closes THEN 1 ELSE next_rn - rn + 1 END AS BIGINT) AS activities,
       kernel_id AS first_kernel_id, prev_end AS prev_island_end_ns, busy_before_ns
FROM (
    SELECT *, CASE WHEN closes THEN reach_ns ELSE lead(reach_ns) OVER lane END AS island_end_ns,
           lead(rn) OVER lane AS next_rn,
           coalesce(sum(CASE WHEN closes THEN reach_ns ELSE 0 END - CASE WHEN opens THEN start_ns ELSE 0 END)
                    OVER before, 0) AS busy_before_ns
    FROM (
        SELECT *, CASE WHEN prev_end IS NULL OR end_ns > prev_end THEN end_ns ELSE prev_end END AS reach_ns,
               prev_end IS NULL OR start_ns > prev_end AS opens,
               next_start IS NULL OR (next_start > end_ns AND (prev_end IS NULL OR next_start > prev_end)) AS closes
        FROM (SELECT run_id, rank, device, stream, step, kernel_id, start_ns, end_ns,
                     max(end_ns) OVER earlier AS prev_end, row_number() OVER lane AS rn,
                     lead(start_ns) OVER lane AS next_start
              FROM kernels
              WINDOW lane AS (PARTITION BY run_id, rank ORDER BY start_ns, end_ns, kernel_id),
                     earlier AS (PARTITION BY run_id, rank ORDER BY start_ns, end_ns, kernel_id
                                 ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING)) AS passed
    ) AS flagged
    WHERE opens OR closes
    WINDOW lane AS (PARTITION BY run_id, rank ORDER BY rn),
           before AS (PARTITION BY run_id, rank ORDER BY rn
                      ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING)
) AS bounds
WHERE opens
UNION ALL
-- scope `device`: a lane is one device
SELECT run_id, rank, 'device', device, NULL, NULL, start_ns, island_end_ns, island_end_ns - start_ns,
       CAST(CASE WHEN closes THEN 1 ELSE next_rn - rn + 1 END AS BIGINT), kernel_id, prev_end, busy_before_ns
FROM (
    SELECT *, CASE WHEN closes THEN reach_ns ELSE lead(reach_ns) OVER lane END AS island_end_ns,
           lead(rn) OVER lane AS next_rn,
           coalesce(sum(CASE WHEN closes THEN reach_ns ELSE 0 END - CASE WHEN opens THEN start_ns ELSE 0 END)
                    OVER before, 0) AS busy_before_ns
    FROM (
        SELECT *, CASE WHEN prev_end IS NULL OR end_ns > prev_end THEN end_ns ELSE prev_end END AS reach_ns,
               prev_end IS NULL OR start_ns > prev_end AS opens,
               next_start IS NULL OR (next_start > end_ns AND (prev_end IS NULL OR next_start > prev_end)) AS closes
        FROM (SELECT run_id, rank, device, stream, step, kernel_id, start_ns, end_ns,
                     max(end_ns) OVER earlier AS prev_end, row_number() OVER lane AS rn,
                     lead(start_ns) OVER lane AS next_start
              FROM kernels
              WINDOW lane AS (PARTITION BY run_id, rank, device ORDER BY start_ns, end_ns, kernel_id),
                     earlier AS (PARTITION BY run_id, rank, device ORDER BY start_ns, end_ns, kernel_id
                                 ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING)) AS passed
    ) AS flagged
    WHERE opens OR closes
    WINDOW lane AS (PARTITION BY run_id, rank, device ORDER BY rn),
           before AS (PARTITION BY run_id, rank, device ORDER BY rn
                      ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING)
) AS bounds
WHERE opens
UNION ALL
-- scope `stream`: a lane is one stream of a device
SELECT run_id, rank, 'stream', device, stream, NULL, start_ns, island_end_ns, island_end_ns - start_ns,
       CAST(CASE WHEN closes THEN 1 ELSE next_rn - rn + 1 END AS BIGINT), kernel_id, prev_end, busy_before_ns
FROM (
    SELECT *, CASE WHEN closes THEN reach_ns ELSE lead(reach_ns) OVER lane END AS island_end_ns,
           lead(rn) OVER lane AS next_rn,
           coalesce(sum(CASE WHEN closes THEN reach_ns ELSE 0 END - CASE WHEN opens THEN start_ns ELSE 0 END)
                    OVER before, 0) AS busy_before_ns
    FROM (
        SELECT *, CASE WHEN prev_end IS NULL OR end_ns > prev_end THEN end_ns ELSE prev_end END AS reach_ns,
               prev_end IS NULL OR start_ns > prev_end AS opens,
               next_start IS NULL OR (next_start > end_ns AND (prev_end IS NULL OR next_start > prev_end)) AS closes
        FROM (SELECT run_id, rank, device, stream, step, kernel_id, start_ns, end_ns,
                     max(end_ns) OVER earlier AS prev_end, row_number() OVER lane AS rn,
                     lead(start_ns) OVER lane AS next_start
              FROM kernels
              WINDOW lane AS (PARTITION BY run_id, rank, device, stream ORDER BY start_ns, end_ns, kernel_id),
                     earlier AS (PARTITION BY run_id, rank, device, stream ORDER BY start_ns, end_ns, kernel_id
                                 ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING)) AS passed
    ) AS flagged
    WHERE opens OR closes
    WINDOW lane AS (PARTITION BY run_id, rank, device, stream ORDER BY rn),
           before AS (PARTITION BY run_id, rank, device, stream ORDER BY rn
                      ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING)
) AS bounds
WHERE opens
UNION ALL
-- scope `device_step`: a lane is one device's activities of one step
SELECT run_id, rank, 'device_step', device, NULL, step, start_ns, island_end_ns, island_end_ns - start_ns,
       CAST(CASE WHEN closes THEN 1 ELSE next_rn - rn + 1 END AS BIGINT), kernel_id, prev_end, busy_before_ns
FROM (
    SELECT *, CASE WHEN closes THEN reach_ns ELSE lead(reach_ns) OVER lane END AS island_end_ns,
           lead(rn) OVER lane AS next_rn,
           coalesce(sum(CASE WHEN closes THEN reach_ns ELSE 0 END - CASE WHEN opens THEN start_ns ELSE 0 END)
                    OVER before, 0) AS busy_before_ns
    FROM (
        SELECT *, CASE WHEN prev_end IS NULL OR end_ns > prev_end THEN end_ns ELSE prev_end END AS reach_ns,
               prev_end IS NULL OR start_ns > prev_end AS opens,
               next_start IS NULL OR (next_start > end_ns AND (prev_end IS NULL OR next_start > prev_end)) AS closes
        FROM (SELECT run_id, rank, device, stream, step, kernel_id, start_ns, end_ns,
                     max(end_ns) OVER earlier AS prev_end, row_number() OVER lane AS rn,
                     lead(start_ns) OVER lane AS next_start
              FROM kernels
                  WHERE step IS NOT NULL
              WINDOW lane AS (PARTITION BY run_id, rank, device, step ORDER BY start_ns, end_ns, kernel_id),
                     earlier AS (PARTITION BY run_id, rank, device, step ORDER BY start_ns, end_ns, kernel_id
                                 ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING)) AS passed
    ) AS flagged
    WHERE opens OR closes
    WINDOW lane AS (PARTITION BY run_id, rank, device, step ORDER BY rn),
           before AS (PARTITION BY run_id, rank, device, step ORDER BY rn
                      ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING)
) AS bounds
WHERE opens
UNION ALL
-- scope `stream_step`: a lane is one stream's activities of one step
SELECT run_id, rank, 'stream_step', device, stream, step, start_ns, island_end_ns, island_end_ns - start_ns,
       CAST(CASE WHEN closes THEN 1 ELSE next_rn - rn + 1 END AS BIGINT), kernel_id, prev_end, busy_before_ns
FROM (
    SELECT *, CASE WHEN closes THEN reach_ns ELSE lead(reach_ns) OVER lane END AS island_end_ns,
           lead(rn) OVER lane AS next_rn,
           coalesce(sum(CASE WHEN closes THEN reach_ns ELSE 0 END - CASE WHEN opens THEN start_ns ELSE 0 END)
                    OVER before, 0) AS busy_before_ns
    FROM (
        SELECT *, CASE WHEN prev_end IS NULL OR end_ns > prev_end THEN end_ns ELSE prev_end END AS reach_ns,
               prev_end IS NULL OR start_ns > prev_end AS opens,
               next_start IS NULL OR (next_start > end_ns AND (prev_end IS NULL OR next_start > prev_end)) AS closes
        FROM (SELECT run_id, rank, device, stream, step, kernel_id, start_ns, end_ns,
                     max(end_ns) OVER earlier AS prev_end, row_number() OVER lane AS rn,
                     lead(start_ns) OVER lane AS next_start
              FROM kernels
                  WHERE step IS NOT NULL
              WINDOW lane AS (PARTITION BY run_id, rank, device, stream, step ORDER BY start_ns, end_ns, kernel_id),
                     earlier AS (PARTITION BY run_id, rank, device, stream, step ORDER BY start_ns, end_ns, kernel_id
                                 ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING)) AS passed
    ) AS flagged
    WHERE opens OR closes
    WINDOW lane AS (PARTITION BY run_id, rank, device, stream, step ORDER BY rn),
           before AS (PARTITION BY run_id, rank, device, stream, step ORDER BY rn
                      ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING)
) AS bounds
WHERE opens;

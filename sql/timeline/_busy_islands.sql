-- _busy_islands: the one definition of "busy" over GPU activities. One row per busy island of a lane: a
-- maximal run of a lane's activities (kernels, copies, fills) that overlap or touch, i.e. one interval of
-- the union of the lane's activities. The islands of a lane are disjoint and their lengths sum to the
-- lane's busy time exactly.
-- Method (one ordered pass, no range join): the lane's activities in order (start_ns, end_ns, kernel_id);
-- an activity opens a new island when it starts after the latest end of those before it (the running max
-- of their ends), else it joins the island of the one before it. Activities that share a start belong to
-- one island whatever their order, so the islands do not depend on the tie-break; only first_kernel_id
-- does.
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
WITH ordered AS (
    -- each activity with the latest end of its lane's activities before it
    SELECT run_id, rank, 'rank' AS scope, CAST(NULL AS INTEGER) AS device, CAST(NULL AS BIGINT) AS stream,
           CAST(NULL AS BIGINT) AS step, kernel_id, start_ns, end_ns,
           max(end_ns) OVER (PARTITION BY run_id, rank ORDER BY start_ns, end_ns, kernel_id
                             ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_end
    FROM kernels
    UNION ALL
    SELECT run_id, rank, 'device', device, NULL, NULL, kernel_id, start_ns, end_ns,
           max(end_ns) OVER (PARTITION BY run_id, rank, device ORDER BY start_ns, end_ns, kernel_id
                             ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING)
    FROM kernels
    UNION ALL
    SELECT run_id, rank, 'stream', device, stream, NULL, kernel_id, start_ns, end_ns,
           max(end_ns) OVER (PARTITION BY run_id, rank, device, stream ORDER BY start_ns, end_ns, kernel_id
                             ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING)
    FROM kernels
    UNION ALL
    SELECT run_id, rank, 'device_step', device, NULL, step, kernel_id, start_ns, end_ns,
           max(end_ns) OVER (PARTITION BY run_id, rank, device, step ORDER BY start_ns, end_ns, kernel_id
                             ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING)
    FROM kernels
    WHERE step IS NOT NULL
    UNION ALL
    SELECT run_id, rank, 'stream_step', device, stream, step, kernel_id, start_ns, end_ns,
           max(end_ns) OVER (PARTITION BY run_id, rank, device, stream, step ORDER BY start_ns, end_ns, kernel_id
                             ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING)
    FROM kernels
    WHERE step IS NOT NULL
),
numbered AS (
    -- the island of each activity: how many islands opened up to it, in the lane's order
    SELECT *, sum(CASE WHEN prev_end IS NULL OR start_ns > prev_end THEN 1 ELSE 0 END)
                  OVER (PARTITION BY run_id, rank, scope, device, stream, step
                        ORDER BY start_ns, end_ns, kernel_id ROWS UNBOUNDED PRECEDING) AS island
    FROM ordered
),
islands AS (
    SELECT run_id, rank, scope, device, stream, step, min(start_ns) AS island_start_ns,
           max(end_ns) AS island_end_ns, count(*) AS activities,
           max(CASE WHEN prev_end IS NULL OR start_ns > prev_end THEN kernel_id END) AS first_kernel_id
    FROM numbered
    GROUP BY run_id, rank, scope, device, stream, step, island
)
SELECT run_id, rank, scope, device, stream, step, island_start_ns, island_end_ns,
       island_end_ns - island_start_ns AS island_ns, activities, first_kernel_id,
       lag(island_end_ns) OVER (PARTITION BY run_id, rank, scope, device, stream, step ORDER BY island_start_ns)
           AS prev_island_end_ns,
       -- the window written out, not a named window refined by a frame: Spark's SQL has no `OVER (w ROWS ...)`
       coalesce(sum(island_end_ns - island_start_ns) OVER (
           PARTITION BY run_id, rank, scope, device, stream, step ORDER BY island_start_ns
           ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0) AS busy_before_ns
FROM islands;

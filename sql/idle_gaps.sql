-- idle_gaps: one row per gap in a GPU timeline: per device (scope `device`: no stream of the device
-- busy) and per stream (scope `stream`: that stream idle, as HTA counts it).
-- A gap runs from the end of the work before it to the start of the activity that ends it (the
-- "next" activity), within one rank.
-- Columns:
--   run_id, rank, device      where
--   scope                     `device` or `stream`
--   stream                    the stream (scope `stream`); NULL for scope `device`
--   step                      the step of the next activity
--   gap_start_ns, gap_end_ns, gap_ns   the gap
--   next_kernel_id, next_name the activity that ends the gap
--   class                     `sync_wait`: the host sat in a synchronizing call (cuda*Synchronize, a
--                             blocking memcpy) or the GPU in a cuda_sync wait during the gap;
--                             `host_bound`: the next activity's launch call started after the gap began
--                             (the GPU waited for the host to launch); `other`: work was queued in time
--                             (dependencies, stream waits, unlinked activities)
--   hta_class                 HTA's class for stream gaps: `host_wait` (the next launch started after the
--                             previous activity ended), else `kernel_wait` (gap < 30 µs), else `other`
--   offset_in_step_ns         gap_start_ns - the step's first GPU start
-- Whether a wait overlaps a gap is one more ordered pass, per rank and scope: the gaps (at their end) and
-- the waits (at their start) in time order, a gap sees the latest end of the waits that began before it
-- ended, and was waited on when that is after its start (no range join, however many waits there are).
-- Each part is partitioned by rank (and scope), so that a query for one rank or scope computes only that.
CREATE OR REPLACE VIEW idle_gaps AS
WITH device_order AS (
    SELECT run_id, rank, device, kernel_id, name, step, start_ns, launch_start_ns, linked,
           max(end_ns) OVER (PARTITION BY run_id, rank, device ORDER BY start_ns, end_ns, kernel_id
                             ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_end
    FROM kernels
),
stream_order AS (
    SELECT run_id, rank, device, stream, kernel_id, name, step, start_ns, launch_start_ns, linked,
           max(end_ns) OVER (PARTITION BY run_id, rank, device, stream ORDER BY start_ns, end_ns, kernel_id
                             ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_end
    FROM kernels
),
gaps AS (
    SELECT run_id, rank, device, 'device' AS scope, NULL::BIGINT AS stream, step, prev_end AS gap_start_ns,
           start_ns AS gap_end_ns, kernel_id AS next_kernel_id, name AS next_name, launch_start_ns, linked
    FROM device_order WHERE start_ns > prev_end
    UNION ALL
    SELECT run_id, rank, device, 'stream', stream, step, prev_end, start_ns, kernel_id, name, launch_start_ns, linked
    FROM stream_order WHERE start_ns > prev_end
),
waits AS (
    -- host calls that block until the GPU is done, and the GPU-side sync records
    SELECT run_id, rank, start_ns, start_ns + dur_ns AS end_ns
    FROM cpu_ops
    WHERE cat = 'cuda_sync'
       OR (cat IN ('cuda_runtime', 'cuda_driver')
           AND (name LIKE '%Synchronize%' OR name IN ('cudaMemcpy', 'hipMemcpy', 'hipMemcpyWithStream', 'cudaMemcpy2D')))
),
events AS (
    -- the gaps at their end (kind 0) and the waits at their start (kind 1), per scope; at equal times the
    -- gap comes first, as a wait must start before the gap ends
    SELECT run_id, rank, scope, gap_end_ns AS t, 0 AS kind, CAST(NULL AS BIGINT) AS wait_end_ns,
           device, stream, step, gap_start_ns, gap_end_ns, next_kernel_id, next_name, launch_start_ns, linked
    FROM gaps
    UNION ALL
    SELECT w.run_id, w.rank, s.scope, w.start_ns, 1, w.end_ns, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL
    FROM waits AS w
    CROSS JOIN (VALUES ('device'), ('stream')) AS s(scope)
),
classified AS (
    SELECT *,
           max(wait_end_ns) OVER (PARTITION BY run_id, rank, scope ORDER BY t, kind
                                  ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS waits_end_ns
    FROM events
),
step_starts AS (
    SELECT run_id, rank, step, min(start_ns) AS step_gpu_start_ns FROM kernels WHERE step IS NOT NULL GROUP BY ALL
)
SELECT c.run_id, c.rank, c.device, c.scope, c.stream, c.step, c.gap_start_ns, c.gap_end_ns,
       c.gap_end_ns - c.gap_start_ns AS gap_ns, c.next_kernel_id, c.next_name,
       CASE WHEN c.waits_end_ns > c.gap_start_ns THEN 'sync_wait'
            WHEN c.linked AND c.launch_start_ns > c.gap_start_ns THEN 'host_bound'
            ELSE 'other' END AS class,
       CASE WHEN c.linked AND c.launch_start_ns > c.gap_start_ns THEN 'host_wait'
            WHEN c.gap_end_ns - c.gap_start_ns < 30000 THEN 'kernel_wait'
            ELSE 'other' END AS hta_class,
       c.gap_start_ns - s.step_gpu_start_ns AS offset_in_step_ns
FROM classified AS c
LEFT JOIN step_starts AS s ON s.run_id = c.run_id AND s.rank = c.rank AND s.step = c.step
WHERE c.kind = 0;

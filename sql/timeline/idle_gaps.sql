-- idle_gaps: one row per gap in a GPU timeline: per device (scope `device`: no stream of the device
-- busy) and per stream (scope `stream`: that stream idle, as HTA counts it).
-- A gap runs from the end of the work before it to the start of the activity that ends it (the
-- "next" activity), within one rank. Every gap is a row, so sum(gap_ns) per scope is the idle time
-- exactly (gpu_timeline); the class says why the GPU (or stream) sat idle.
-- Cause rule: what the host was doing for most of the gap. The gap [gap_start_ns, gap_end_ns) is cut
-- into three parts that add up to gap_ns exactly:
--   wait_ns      time covered by a blocking wait, outside the next activity's own launch call: a
--                synchronizing runtime call (name containing `Synchronize`: cuda/hip Stream, Device,
--                Event Synchronize; the blocking copies cudaMemcpy, cudaMemcpy2D, hipMemcpy,
--                hipMemcpyWithStream) on the thread that launched the next activity, or a GPU-side
--                `Stream Wait Event` record (cuda_sync) of the rank. Other cuda_sync records (Context /
--                Stream / Event Sync) mirror a host call and are not counted twice: `Event Sync` also
--                comes from the non-blocking cudaEventQuery. Waits of another thread do not count (the
--                launching thread did something else meanwhile). When the next activity is not linked
--                to a launch call, the blocking calls of every thread of the rank count. A host wait
--                counts only for a gap that began before the next activity's launch call returned:
--                once the work is issued, the host waiting is its consequence, not why the GPU idles
--                (1-2 us gaps between the kernels of one graph replay while the host sits in
--                cudaStreamSynchronize are the replay's own pace: queued_ns, class other); GPU-side
--                waits count in every gap.
--   host_ns      the host had not yet issued the next activity: the part of the gap before its launch
--                call began that no wait covers, plus the part during the launch call itself (a slow
--                launch, a graph launch, a blocking copy's own call staging its data)
--   queued_ns    the rest: after the launch call returned, no wait (launch latency, a dependency on
--                another stream, work inside a graph replay); all of the gap when the next activity
--                has no launch call in the trace
-- class: `tiny` when gap_ns < 1000 (below 1 µs: back-to-back activities separated by the GPU's own
-- scheduling, e.g. 1-ns gaps between kernels; counted apart so that they do not inflate the counts of
-- the real causes, their time stays in the identity); else the largest part names it: `sync_wait`
-- (wait_ns), `host_bound` (host_ns: the GPU waited for the host to launch), `other` (queued_ns); ties go
-- to sync_wait, then host_bound. So a 0.7 µs cudaStreamSynchronize followed by 126 ms of
-- DataLoader.__next__ before the launch is host_bound (host_ns 126 ms), not sync_wait.
-- host_op: the deepest host range (cpu_op, user_annotation, runtime call ...; Python frames are not
-- host ranges) on the launching thread that covers more than half of the gap, with host_op_ns its overlap
-- with the gap: "126 ms in enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__". A range
-- covering more than half contains the gap's midpoint, so the candidates are the ranges open at the
-- midpoint, one per nesting depth (an ordered pass per thread and depth); NULL for tiny gaps, unlinked activities and
-- gaps that no single range covers for more than half (ProfilerStep#N usually does, when nothing deeper).
-- Columns:
--   run_id, rank, device      VARCHAR, INTEGER, INTEGER  where
--   scope                     VARCHAR  `device` or `stream`
--   stream                    BIGINT  the stream (scope `stream`); NULL for scope `device`
--   step                      BIGINT  the step of the next activity
--   gap_start_ns, gap_end_ns, gap_ns   BIGINT  the gap
--   next_kernel_id, next_name BIGINT, VARCHAR  the activity that ends the gap
--   class                     VARCHAR  `tiny`, `sync_wait`, `host_bound` or `other` (the rule above)
--   wait_ns, host_ns, queued_ns   HUGEINT  the three parts (wait_ns + host_ns + queued_ns = gap_ns)
--   host_op, host_op_ns       VARCHAR, BIGINT  the host range that covers most of the gap, and how much of it
--                            (above)
--   hta_class                 VARCHAR  HTA's class for stream gaps, as Holistic Trace Analysis defines it:
--                             `host_wait` (the next launch started after the previous activity ended),
--                             else `kernel_wait` (gap < 30 µs), else `other`
--   offset_in_step_ns         BIGINT  gap_start_ns - the step's first GPU start
-- Method (no range join): the waits of each lane (a launching thread; lane `*` for unlinked activities;
-- lane `#gpu` for the GPU-side waits alone) are merged into disjoint islands, and C(t), the wait time before t, comes from the last island starting
-- at or before t (an ordered pass over the islands' starts and the points); the wait time in [x, y) is
-- C(y) - C(x).
-- Each part is partitioned by rank (and scope), so that a query for one rank or scope computes only that.
-- materialized: per_run   rows kept per run (warehouse/derived.py: `tracehouse derive`): a step's gaps
--                         need the whole rank's ordered passes (a filter on step reaches none of them)
CREATE OR REPLACE VIEW idle_gaps AS
WITH raw_gaps AS (
    -- the gap before each busy island of a device or a stream (_busy_islands), ended by the island's first
    -- activity: the time from the latest end of the activities before it to its start
    SELECT i.run_id, i.rank, i.device, i.scope, i.stream, k.step, i.prev_island_end_ns AS gap_start_ns,
           i.island_start_ns AS gap_end_ns, k.kernel_id AS next_kernel_id, k.name AS next_name,
           k.launch_start_ns, k.launch_dur_ns, k.launch_op_id, k.linked
    FROM _busy_islands AS i
    JOIN kernels AS k ON k.run_id = i.run_id AND k.rank = i.rank AND k.kernel_id = i.first_kernel_id
    WHERE i.scope IN ('device', 'stream') AND i.prev_island_end_ns IS NOT NULL
),
gaps AS (
    -- the launching thread (lane), and the launch call clamped into the gap: [launch_from, launch_to)
    SELECT g.*, l.pid AS launch_pid, l.tid AS launch_tid,
           CASE WHEN g.linked AND l.op_id IS NOT NULL THEN l.pid || ':' || l.tid ELSE '*' END AS thread_lane,
           CASE WHEN g.linked AND g.launch_start_ns IS NOT NULL
                THEN least(greatest(g.launch_start_ns, g.gap_start_ns), g.gap_end_ns)
                ELSE g.gap_start_ns END AS launch_from,
           CASE WHEN g.linked AND g.launch_start_ns IS NOT NULL
                THEN least(greatest(g.launch_start_ns + coalesce(g.launch_dur_ns, 0), g.gap_start_ns), g.gap_end_ns)
                ELSE g.gap_start_ns END AS launch_to
    FROM raw_gaps AS g
    LEFT JOIN cpu_ops AS l ON l.run_id = g.run_id AND l.rank = g.rank AND l.op_id = g.launch_op_id
),
laned AS (
    -- the lane whose waits count: the launching thread's, or `#gpu` (GPU-side waits alone) when the next
    -- activity's launch call had returned by the time the gap began
    SELECT g.*,
           CASE WHEN g.thread_lane <> '*' AND g.launch_start_ns + coalesce(g.launch_dur_ns, 0) <= g.gap_start_ns
                THEN '#gpu' ELSE g.thread_lane END AS lane
    FROM gaps AS g
),
host_waits AS (
    SELECT run_id, rank, pid, tid, start_ns, start_ns + dur_ns AS end_ns
    FROM cpu_ops
    WHERE cat IN ('cuda_runtime', 'cuda_driver')
      AND (name LIKE '%Synchronize%' OR name IN ('cudaMemcpy', 'hipMemcpy', 'hipMemcpyWithStream', 'cudaMemcpy2D'))
      AND dur_ns > 0
),
-- what the lookups below need of a gap: a device gap and the stream gap ended by the same activity over
-- the same span (one stream busy before it) are looked up once
gap_spans AS (
    SELECT DISTINCT run_id, rank, next_kernel_id, gap_start_ns, gap_end_ns, lane, thread_lane, launch_pid,
           launch_tid, launch_from, launch_to
    FROM laned
),
lanes AS (
    SELECT DISTINCT run_id, rank, lane FROM gap_spans WHERE lane <> '#gpu'
),
waits AS (
    -- per lane: the launching thread's own blocking calls; lane `*`: every thread's; GPU-side event waits
    -- in every lane
    SELECT w.run_id, w.rank, w.pid || ':' || w.tid AS lane, w.start_ns, w.end_ns FROM host_waits AS w
    UNION ALL
    SELECT run_id, rank, '*', start_ns, end_ns FROM host_waits
    UNION ALL
    SELECT l.run_id, l.rank, l.lane, o.start_ns, o.start_ns + o.dur_ns
    FROM cpu_ops AS o JOIN lanes AS l ON l.run_id = o.run_id AND l.rank = o.rank
    WHERE o.cat = 'cuda_sync' AND o.name = 'Stream Wait Event' AND o.dur_ns > 0
    UNION ALL
    SELECT run_id, rank, '#gpu', start_ns, start_ns + dur_ns
    FROM cpu_ops
    WHERE cat = 'cuda_sync' AND name = 'Stream Wait Event' AND dur_ns > 0
),
wait_islands AS (
    SELECT run_id, rank, lane, start_ns, end_ns,
           sum(CASE WHEN prev_end IS NULL OR start_ns > prev_end THEN 1 ELSE 0 END)
               OVER (PARTITION BY run_id, rank, lane ORDER BY start_ns, end_ns ROWS UNBOUNDED PRECEDING) AS island
    FROM (SELECT *, max(end_ns) OVER (PARTITION BY run_id, rank, lane ORDER BY start_ns, end_ns
                                      ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_end
          FROM waits) AS w
),
islands AS (
    -- disjoint wait islands with the wait time of the islands before each (covered_before)
    SELECT run_id, rank, lane, s, e,
           coalesce(sum(e - s) OVER (PARTITION BY run_id, rank, lane ORDER BY s
                                     ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0) AS covered_before
    FROM (SELECT run_id, rank, lane, island, min(start_ns) AS s, max(end_ns) AS e
          FROM wait_islands GROUP BY run_id, rank, lane, island) AS i
),
points AS (
    -- the four times at which C(t) is needed, per gap span
    SELECT run_id, rank, lane, next_kernel_id, gap_start_ns, gap_end_ns, 0 AS which, gap_start_ns AS t
    FROM gap_spans
    UNION ALL
    SELECT run_id, rank, lane, next_kernel_id, gap_start_ns, gap_end_ns, 1, launch_from FROM gap_spans
    UNION ALL
    SELECT run_id, rank, lane, next_kernel_id, gap_start_ns, gap_end_ns, 2, launch_to FROM gap_spans
    UNION ALL
    SELECT run_id, rank, lane, next_kernel_id, gap_start_ns, gap_end_ns, 3, gap_end_ns FROM gap_spans
),
looked_up AS (
    -- an ordered pass over the islands' starts and the points: a point sees the last island that
    -- started at or before it. The islands of a lane are disjoint and in start order, so that island has
    -- the largest start, end and covered_before of those before the point: a running max, not
    -- last_value(... IGNORE NULLS), which searches back over every point since the last island (quadratic
    -- in a lane of many gaps and few waits: 1,018 s of the view's 1,133 s on a 1 GB trace at 640MB)
    SELECT run_id, rank, next_kernel_id, gap_start_ns, gap_end_ns, which, t, is_point,
           max(i_s) OVER latest AS i_s,
           max(i_e) OVER latest AS i_e,
           max(i_before) OVER latest AS i_before
    FROM (
        SELECT run_id, rank, lane, next_kernel_id, gap_start_ns, gap_end_ns, which, t, 1 AS is_point,
               NULL::BIGINT AS i_s, NULL::BIGINT AS i_e, NULL::BIGINT AS i_before
        FROM points
        UNION ALL
        SELECT run_id, rank, lane, NULL, NULL, NULL, NULL, s, 0, s, e, covered_before FROM islands
    ) AS marks
    WINDOW latest AS (PARTITION BY run_id, rank, lane ORDER BY t, is_point ROWS UNBOUNDED PRECEDING)
),
covered AS (
    SELECT run_id, rank, next_kernel_id, gap_start_ns, gap_end_ns,
           max(CASE WHEN which = 0 THEN coalesce(i_before + least(t, i_e) - i_s, 0) END) AS c0,
           max(CASE WHEN which = 1 THEN coalesce(i_before + least(t, i_e) - i_s, 0) END) AS c1,
           max(CASE WHEN which = 2 THEN coalesce(i_before + least(t, i_e) - i_s, 0) END) AS c2,
           max(CASE WHEN which = 3 THEN coalesce(i_before + least(t, i_e) - i_s, 0) END) AS c3
    FROM looked_up
    WHERE is_point = 1
    GROUP BY run_id, rank, next_kernel_id, gap_start_ns, gap_end_ns
),
parts AS (
    SELECT g.*,
           (c.c1 - c.c0) + (c.c3 - c.c2) AS wait_ns,
           (g.launch_from - g.gap_start_ns) - (c.c1 - c.c0) + (g.launch_to - g.launch_from) AS host_ns,
           (g.gap_end_ns - g.launch_to) - (c.c3 - c.c2) AS queued_ns
    FROM laned AS g
    JOIN covered AS c ON c.run_id = g.run_id AND c.rank = g.rank AND c.next_kernel_id = g.next_kernel_id
                     AND c.gap_start_ns = g.gap_start_ns AND c.gap_end_ns = g.gap_end_ns
),
thread_depths AS (
    SELECT DISTINCT run_id, rank, pid, tid, CAST(depth AS INTEGER) AS depth FROM cpu_ops WHERE cat <> 'cuda_sync'
),
probes AS (
    -- per gap span of 1 µs or more with a launching thread: one probe per nesting depth of that thread
    SELECT g.run_id, g.rank, g.next_kernel_id, g.gap_start_ns, g.gap_end_ns,
           g.launch_pid AS pid, g.launch_tid AS tid, d.depth,
           g.gap_start_ns + CAST(((g.gap_end_ns - g.gap_start_ns) - (g.gap_end_ns - g.gap_start_ns) % 2) / 2 AS BIGINT) AS mid_ns
    FROM gap_spans AS g
    JOIN thread_depths AS d ON d.run_id = g.run_id AND d.rank = g.rank AND d.pid = g.launch_pid AND d.tid = g.launch_tid
    WHERE g.gap_end_ns - g.gap_start_ns >= 1000 AND g.thread_lane <> '*'
),
host_ranges AS (
    SELECT run_id, rank, pid, tid, CAST(depth AS INTEGER) AS depth, start_ns, start_ns + dur_ns AS end_ns, name, op_id
    FROM cpu_ops WHERE cat <> 'cuda_sync'
),
open_at_mid AS (
    -- the last range of each depth opened at or before the midpoint (an ordered pass over the ranges'
    -- starts and the probes; a probe sees the latest start before it); kept when it covers > half the gap
    SELECT run_id, rank, next_kernel_id, gap_start_ns, gap_end_ns, depth, name, gap_ns,
           least(end_ns, gap_end_ns) - greatest(start_ns, gap_start_ns) AS overlap_ns
    FROM (
        SELECT run_id, rank, next_kernel_id, depth, gap_start_ns, gap_end_ns,
               gap_end_ns - gap_start_ns AS gap_ns, is_probe,
               last_value(r_start IGNORE NULLS) OVER latest AS start_ns,
               last_value(r_end IGNORE NULLS) OVER latest AS end_ns,
               last_value(r_name IGNORE NULLS) OVER latest AS name
        FROM (
            SELECT run_id, rank, pid, tid, depth, mid_ns AS t, 1 AS is_probe,
                   next_kernel_id, gap_start_ns, gap_end_ns, NULL::BIGINT AS r_start, NULL::BIGINT AS r_end,
                   NULL::VARCHAR AS r_name
            FROM probes
            UNION ALL
            SELECT run_id, rank, pid, tid, depth, start_ns, 0, NULL, NULL, NULL,
                   start_ns, end_ns, name
            FROM host_ranges
        ) AS marks
        WINDOW latest AS (PARTITION BY run_id, rank, pid, tid, depth ORDER BY t, is_probe
                          ROWS UNBOUNDED PRECEDING)
    ) AS swept
    WHERE is_probe = 1 AND start_ns IS NOT NULL
),
host_op AS (
    -- the deepest of them (the ranges open at the midpoint nest, so the deepest is the most specific)
    SELECT run_id, rank, next_kernel_id, gap_start_ns, gap_end_ns,
           arg_max(name, depth) AS host_op, arg_max(overlap_ns, depth) AS host_op_ns
    FROM open_at_mid
    WHERE 2 * overlap_ns > gap_ns
    GROUP BY run_id, rank, next_kernel_id, gap_start_ns, gap_end_ns
),
step_starts AS (
    SELECT run_id, rank, step, min(start_ns) AS step_gpu_start_ns FROM kernels WHERE step IS NOT NULL GROUP BY ALL
)
SELECT p.run_id, p.rank, p.device, p.scope, p.stream, p.step, p.gap_start_ns, p.gap_end_ns,
       p.gap_end_ns - p.gap_start_ns AS gap_ns, p.next_kernel_id, p.next_name,
       CASE WHEN p.gap_end_ns - p.gap_start_ns < 1000 THEN 'tiny'
            WHEN p.wait_ns >= p.host_ns AND p.wait_ns >= p.queued_ns THEN 'sync_wait'
            WHEN p.host_ns >= p.queued_ns THEN 'host_bound'
            ELSE 'other' END AS class,
       p.wait_ns, p.host_ns, p.queued_ns,
       h.host_op, h.host_op_ns,
       CASE WHEN p.linked AND p.launch_start_ns > p.gap_start_ns THEN 'host_wait'
            WHEN p.gap_end_ns - p.gap_start_ns < 30000 THEN 'kernel_wait'
            ELSE 'other' END AS hta_class,
       p.gap_start_ns - s.step_gpu_start_ns AS offset_in_step_ns
FROM parts AS p
LEFT JOIN host_op AS h ON h.run_id = p.run_id AND h.rank = p.rank AND h.next_kernel_id = p.next_kernel_id
                      AND h.gap_start_ns = p.gap_start_ns AND h.gap_end_ns = p.gap_end_ns
LEFT JOIN step_starts AS s ON s.run_id = p.run_id AND s.rank = p.rank AND s.step = p.step;

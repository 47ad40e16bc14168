-- step_queueing: one row per (run_id, rank, step) with GPU activities: whether the step's first GPU
-- activities waited on the GPU long after they were launched, i.e. whether the time before the step's
-- GPU work is GPU queueing (the GPU busy with earlier work: of an earlier step, or from before the
-- profiled window, which the trace does not show; or a host/GPU clock offset) and not host setup.
-- GPU queueing vs launch delay: an activity is launched when its launch call RETURNS (the call's end).
-- A launch call that is itself long (the kernel's module loaded inside it, lazy initialization, a driver
-- call that blocks) is host-side launch delay: the host was busy in the call; the activity often starts
-- before the call returns. Only the time from the call's return to the activity's start is queueing:
-- an activity's launch-to-start delay is its start minus the earlier of its launch call's end and its
-- start (0 when it started before the call returned: a graph launch's first replayed kernels, a blocking
-- copy, a call slowed by module loading). A launch takes microseconds; the rule: the step is
-- `gpu_queued` when its first activity started at least 1 ms (1 000 000 ns) after its launch call
-- returned (the same 1 ms bar makes a launch edge of the critical path `gpu_queued` rather than
-- `launch_delay`). Its followers often run promptly (a blocking copy among them re-synchronizes host and
-- GPU), so the rule reads the first activity; the first few (up to 8, in start order, those with a
-- launch call in the trace) are summarized beside it.
-- Columns:
--   run_id, rank, step   VARCHAR, INTEGER, BIGINT  the step (kernels.step)
--   first_delay_ns       BIGINT  the step's first activity's launch-to-start delay (NULL: no launch call)
--   first_launch_call_ns  BIGINT  the duration of the step's first activity's launch call (NULL: no launch
--                        call): its host-side launch delay when long, never queueing
--   first_activities     BIGINT  how many first activities were measured (0: none has a launch call)
--   min_delay_ns         BIGINT  the smallest launch-to-start delay among them (NULL when none)
--   median_delay_ns      BIGINT  their median delay (the lower middle value for an even count; NULL when
--                            none)
--   queued_ns            BIGINT  the time the step's first activity waited, launched, inside the step's wall
--                        (= step_breakdown.gpu_queued_ns): its start minus the later of its launch and
--                        the wall's start (the earlier of the step's host start and first GPU start)
--   gpu_queued           BOOLEAN  first_delay_ns >= 1 000 000 (FALSE when the first activity has no launch
--                            call)
--   visible_busy_ns      HUGEINT  how much of the first activity's wait (its launch to its start) the trace
--                        shows the rank's GPU busy: the union of the rank's activities clipped to that window
--   queue_cause          VARCHAR  why a gpu_queued step waited: `earlier_gpu_work` when the trace shows the
--                        GPU busy for at least half the wait (e.g. the host running ahead of the previous
--                        step's GPU work), else `unseen_work_or_clock_offset` (work from before the profiled
--                        window, or host and GPU clocks offset); NULL when the step is not gpu_queued
-- materialized: per_run   rows kept per run (warehouse/derived.py: `tracehouse derive`): data_quality and
--                          run_metrics read it (42 s a query on a 1 GB run with the range join of its
--                          windows with every activity of the rank; ~9 s with islands and a sweep)
CREATE OR REPLACE VIEW step_queueing AS
WITH acts AS (
    SELECT run_id, rank, step, kernel_id, start_ns, launch_dur_ns,
           -- launched when its call returned, or at its start if it started before that
           CASE WHEN launch_start_ns IS NOT NULL THEN least(launch_start_ns + launch_dur_ns, start_ns) END
               AS launched_ns,
           ROW_NUMBER() OVER (PARTITION BY run_id, rank, step ORDER BY start_ns, kernel_id) AS rn
    FROM kernels
    WHERE step IS NOT NULL
),
launched AS (
    SELECT a.*, ROW_NUMBER() OVER (PARTITION BY run_id, rank, step ORDER BY start_ns, kernel_id) AS ln
    FROM acts a
    WHERE launched_ns IS NOT NULL
),
delays AS (
    -- the median is the lower middle value: rank r of n with 2r = n or 2r - 1 = n
    SELECT run_id, rank, step, COUNT(*) AS n, MIN(d) AS min_delay_ns,
           MAX(CASE WHEN 2 * r = n OR 2 * r - 1 = n THEN d END) AS median_delay_ns
    FROM (
        SELECT run_id, rank, step, start_ns - launched_ns AS d,
               ROW_NUMBER() OVER (PARTITION BY run_id, rank, step ORDER BY start_ns - launched_ns, kernel_id) AS r,
               COUNT(*) OVER (PARTITION BY run_id, rank, step) AS n
        FROM launched
        WHERE ln <= 8
    ) t
    GROUP BY run_id, rank, step
),
host AS (
    SELECT run_id, rank, step, MIN(start_ns) AS host_start_ns FROM step_spans GROUP BY run_id, rank, step
),
firsts AS (
    SELECT a.run_id, a.rank, a.step, a.start_ns, a.launched_ns, a.launch_dur_ns,
           least(a.start_ns, coalesce(h.host_start_ns, a.start_ns)) AS w_start
    FROM acts a
    LEFT JOIN host h ON h.run_id = a.run_id AND h.rank = a.rank AND h.step = a.step
    WHERE a.rn = 1
),
win AS (
    SELECT run_id, rank, step, launched_ns AS lo, start_ns AS hi FROM firsts WHERE launched_ns < start_ns
),
window_ranks AS (
    SELECT DISTINCT run_id, rank FROM win
),
rank_islands AS (
    -- the rank's busy time as disjoint islands (the union of its activities on all its devices), each with
    -- the busy time of the islands before it
    SELECT i.run_id, i.rank, i.island_start_ns AS lo, i.island_end_ns AS hi, i.busy_before_ns AS busy_before
    FROM _busy_islands AS i
    JOIN window_ranks AS r ON r.run_id = i.run_id AND r.rank = i.rank
    WHERE i.scope = 'rank'
),
points AS (
    -- the islands and both ends of every window in one time order (an island before a window's end at the
    -- same time): the busy time before a point t is that of the islands before the last island starting
    -- at or before t, plus that island up to t. The islands are disjoint and sorted, so the running max of
    -- their lo, hi and busy_before is that last island's.
    SELECT run_id, rank, lo AS t, 0 AS kind, CAST(NULL AS BIGINT) AS step, lo AS i_lo, hi AS i_hi,
           busy_before AS i_before, CAST(NULL AS BOOLEAN) AS at_hi
    FROM rank_islands
    UNION ALL
    SELECT run_id, rank, lo, 1, step, NULL, NULL, NULL, FALSE FROM win
    UNION ALL
    SELECT run_id, rank, hi, 1, step, NULL, NULL, NULL, TRUE FROM win
),
busy_before_point AS (
    SELECT run_id, rank, step, at_hi,
           coalesce(last_before + least(t, last_hi) - last_lo, 0) AS busy_to_t
    FROM (
        SELECT *,
               MAX(i_lo) OVER (PARTITION BY run_id, rank ORDER BY t, kind ROWS UNBOUNDED PRECEDING) AS last_lo,
               MAX(i_hi) OVER (PARTITION BY run_id, rank ORDER BY t, kind ROWS UNBOUNDED PRECEDING) AS last_hi,
               MAX(i_before) OVER (PARTITION BY run_id, rank ORDER BY t, kind ROWS UNBOUNDED PRECEDING)
                   AS last_before
        FROM points
    ) t
    WHERE kind = 1
),
busy AS (
    -- the rank's busy time inside the window [lo, hi): busy before hi minus busy before lo
    SELECT run_id, rank, step,
           SUM(CASE WHEN at_hi THEN busy_to_t ELSE -busy_to_t END) AS busy_ns
    FROM busy_before_point
    GROUP BY run_id, rank, step
),
out AS (
    SELECT f.run_id, f.rank, f.step, f.start_ns - f.launched_ns AS first_delay_ns,
           CASE WHEN f.launched_ns IS NOT NULL THEN f.launch_dur_ns END AS first_launch_call_ns,
           coalesce(d.n, 0) AS first_activities, d.min_delay_ns, d.median_delay_ns,
           CASE WHEN f.launched_ns IS NULL THEN 0
                ELSE f.start_ns - greatest(f.w_start, f.launched_ns) END AS queued_ns,
           coalesce(f.start_ns - f.launched_ns >= 1000000, FALSE) AS gpu_queued,
           coalesce(b.busy_ns, 0) AS visible_busy_ns
    FROM firsts f
    LEFT JOIN delays d ON d.run_id = f.run_id AND d.rank = f.rank AND d.step = f.step
    LEFT JOIN busy b ON b.run_id = f.run_id AND b.rank = f.rank AND b.step = f.step
)
SELECT run_id, rank, step, first_delay_ns, first_launch_call_ns, first_activities, min_delay_ns, median_delay_ns, queued_ns,
       gpu_queued, visible_busy_ns,
       CASE WHEN NOT gpu_queued THEN NULL
               WHEN 2 * visible_busy_ns >= first_delay_ns THEN 'earlier_gpu_work'
               ELSE 'unseen_work_or_clock_offset' END AS queue_cause
FROM out

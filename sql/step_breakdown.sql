-- step_breakdown: one row per (run_id, rank, step): the step's wall clock split into where it went, as
-- a hand analysis of one decode step does.
-- The wall runs from the earlier of the step's host start and its first GPU start to the later of its
-- host end and its last GPU end. It splits, exactly (the parts sum to wall_ns), into:
--   host_setup_ns      before the step's first GPU activity starts, while that activity was not yet
--                      launched (host preparing, launching)
--   gpu_queued_ns      before the step's first GPU activity starts, while it was already launched and
--                      waiting on the GPU: from its launch (the launch call's end; the call's start for
--                      a graph launch or a call that ended after the activity started) to its start,
--                      within the wall. Not host time: the GPU was busy with earlier work (of an earlier
--                      step, or from before the profiled window) or the host and GPU clocks are offset.
--                      0 when the first activity has no launch call in the trace
--                      (step_queueing says whether a step's first activities were queued)
--   compute_ns         GPU compute (gpu_timeline exact: union of non-communication, non-memory work)
--   exposed_comm_ns    communication not under compute
--   exposed_memory_ns  copies and fills under neither
--   gpu_idle_ns        gaps inside the GPU span (no activity on any stream of the rank's device(s))
--   host_tail_ns       after the last GPU activity, until the host leaves the step
-- Columns:
--   run_id, rank, step, phase, name   the step (steps view)
--   wall_start_ns, wall_end_ns, wall_ns   the wall clock of the step, as above
--   host_setup_ns, gpu_queued_ns, compute_ns, exposed_comm_ns, exposed_memory_ns   as above
--   gpu_idle_ns, host_tail_ns   as above
--   gpu_utilization    gpu busy / wall (0..1)
--   activities         GPU activities of the step
CREATE OR REPLACE VIEW step_breakdown AS
WITH s AS (
    SELECT *,
           CASE WHEN gpu_start_ns IS NULL THEN host_start_ns ELSE least(host_start_ns, gpu_start_ns) END AS w_start,
           CASE WHEN gpu_end_ns IS NULL THEN host_end_ns ELSE greatest(host_end_ns, gpu_end_ns) END AS w_end
    FROM steps
),
first_act AS (
    -- the step's first GPU activity and when it was launched
    SELECT run_id, rank, step, start_ns,
           CASE WHEN launch_start_ns IS NULL THEN NULL
                WHEN launch_call LIKE '%GraphLaunch%' OR launch_start_ns + launch_dur_ns > start_ns
                    THEN launch_start_ns
                ELSE launch_start_ns + launch_dur_ns END AS launched_ns
    FROM (
        SELECT k.*, ROW_NUMBER() OVER (PARTITION BY run_id, rank, step ORDER BY start_ns, kernel_id) AS rn
        FROM kernels k
        WHERE step IS NOT NULL
    ) t
    WHERE rn = 1
),
q AS (
    SELECT s.*,
           CASE WHEN s.gpu_start_ns IS NULL OR f.launched_ns IS NULL THEN 0
                ELSE s.gpu_start_ns - greatest(s.w_start, least(f.launched_ns, s.gpu_start_ns)) END AS queued
    FROM s
    LEFT JOIN first_act f ON f.run_id = s.run_id AND f.rank = s.rank AND f.step = s.step
)
SELECT
    run_id, rank, step, phase, name,
    w_start AS wall_start_ns, w_end AS wall_end_ns, w_end - w_start AS wall_ns,
    coalesce(gpu_start_ns, w_end) - w_start - queued AS host_setup_ns,
    queued AS gpu_queued_ns,
    compute_ns, exposed_comm_ns, exposed_memory_ns,
    coalesce(gpu_span_ns, 0) - gpu_busy_ns AS gpu_idle_ns,
    CASE WHEN gpu_end_ns IS NULL THEN 0 ELSE w_end - gpu_end_ns END AS host_tail_ns,
    CASE WHEN w_end > w_start THEN gpu_busy_ns / (w_end - w_start) END AS gpu_utilization,
    activities
FROM q;

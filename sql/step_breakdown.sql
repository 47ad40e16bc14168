-- step_breakdown: one row per (run_id, rank, step): the step's wall clock split into where it went, as
-- a hand analysis of one decode step does.
-- The wall runs from the earlier of the step's host start and its first GPU start to the later of its
-- host end and its last GPU end. It splits, exactly (the parts sum to wall_ns), into:
--   host_setup_ns      before the step's first GPU activity starts (host preparing, launching)
--   compute_ns         GPU compute (gpu_timeline exact: union of non-communication, non-memory work)
--   exposed_comm_ns    communication not under compute
--   exposed_memory_ns  copies and fills under neither
--   gpu_idle_ns        gaps inside the GPU span (no activity on any stream of the rank's device(s))
--   host_tail_ns       after the last GPU activity, until the host leaves the step
-- Columns:
--   run_id, rank, step, phase, name   the step (steps view)
--   wall_start_ns, wall_end_ns, wall_ns   the wall clock of the step, as above
--   host_setup_ns, compute_ns, exposed_comm_ns, exposed_memory_ns, gpu_idle_ns, host_tail_ns   as above
--   gpu_utilization    gpu busy / wall (0..1)
--   activities         GPU activities of the step
CREATE OR REPLACE VIEW step_breakdown AS
WITH s AS (
    SELECT *,
           CASE WHEN gpu_start_ns IS NULL THEN host_start_ns ELSE least(host_start_ns, gpu_start_ns) END AS w_start,
           CASE WHEN gpu_end_ns IS NULL THEN host_end_ns ELSE greatest(host_end_ns, gpu_end_ns) END AS w_end
    FROM steps
)
SELECT
    run_id, rank, step, phase, name,
    w_start AS wall_start_ns, w_end AS wall_end_ns, w_end - w_start AS wall_ns,
    coalesce(gpu_start_ns, w_end) - w_start AS host_setup_ns,
    compute_ns, exposed_comm_ns, exposed_memory_ns,
    coalesce(gpu_span_ns, 0) - gpu_busy_ns AS gpu_idle_ns,
    CASE WHEN gpu_end_ns IS NULL THEN 0 ELSE w_end - gpu_end_ns END AS host_tail_ns,
    CASE WHEN w_end > w_start THEN gpu_busy_ns / (w_end - w_start) END AS gpu_utilization,
    activities
FROM s;

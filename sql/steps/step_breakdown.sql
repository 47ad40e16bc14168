-- step_breakdown: one row per (run_id, rank, step): the step's wall clock split into where it went, as
-- a hand analysis of one decode step does.
-- The wall runs from the earlier of the step's host start and its first GPU start to the later of its
-- host end and its last GPU end. It splits, exactly (the parts sum to wall_ns), into:
--   host_setup_ns      before the step's first GPU activity starts, while that activity was not yet
--                      launched (host preparing, launching)
--   gpu_queued_ns  before the step's first GPU activity starts, while it was already launched and waiting
--                      on the GPU: from its launch (the launch call's return; 0 when the activity started
--                      before the call returned: a long call is host-side launch delay, counted in
--                      host_setup_ns) to its start, within the wall. Not host time: the GPU was busy with
--                      earlier work (of an earlier step, or from before the profiled window) or the host and
--                      GPU clocks are offset. 0 when the first activity has no launch call in the trace
--                      (step_queueing says whether a step's first activities were queued)
--   compute_ns         GPU compute (gpu_timeline exact: union of non-communication, non-memory work)
--   exposed_comm_ns    communication not under compute
--   exposed_memory_ns  copies and fills under neither
--   other_steps_ns     inside the GPU span, time when no activity of this step ran but an activity of
--                      another step (or of none) did, on the same device: steps whose GPU work
--                      interleaves (the host runs ahead, so the previous step's work still runs on one
--                      stream while this step's first activities start on another). The device was busy:
--                      this is not idle time. 0 when the steps' GPU work does not interleave
--   gpu_idle_ns        inside the GPU span, time when no activity at all ran on the device (summed over
--                      the rank's devices, as the busy time is)
--   host_tail_ns       after the last GPU activity, until the host leaves the step
-- compute_ns, exposed_comm_ns and exposed_memory_ns classify the step's own activities (gpu_timeline of
-- the step): a communication kernel of this step that ran under another step's compute is still counted
-- exposed here.
-- Columns:
--   run_id, rank, step, phase, name   VARCHAR, INTEGER, BIGINT, VARCHAR, VARCHAR  the step (steps view)
--   wall_start_ns, wall_end_ns, wall_ns   BIGINT  the wall clock of the step, as above
--   host_setup_ns, gpu_queued_ns, compute_ns, exposed_comm_ns, exposed_memory_ns   BIGINT, BIGINT, HUGEINT, HUGEINT, HUGEINT
--                            as above
--   other_steps_ns, gpu_idle_ns, host_tail_ns   HUGEINT, HUGEINT, BIGINT  as above
--   gpu_window_ns      BIGINT  the step's GPU window (steps.gpu_window_ns: from the end of the previous
--                      step's GPU work, or the step's own GPU start when the device was idle as it began, to
--                      its GPU end)
--   gpu_utilization    DOUBLE  steps.gpu_busy_pct / 100 (0..1): the device's busy time in the step's GPU
--                      window / the window, the one definition of busy % (run_metrics' gpu_busy_pct, the
--                      cards); not busy / wall, which would count an async engine's launch-ahead (the host
--                      enqueuing the step long before the GPU runs it) as idle GPU
--   activities         HUGEINT  GPU activities of the step
-- materialized: per_run   rows kept per run (warehouse/derived.py: `tracehouse derive`)
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
           launch_start_ns + launch_dur_ns AS launched_ns
    FROM (
        SELECT k.*, ROW_NUMBER() OVER (PARTITION BY run_id, rank, step ORDER BY start_ns, kernel_id) AS rn
        FROM kernels k
        WHERE step IS NOT NULL
    ) t
    WHERE rn = 1
),
island_sums AS (
    -- the device's busy islands (activities of any step that touch or overlap), with the busy time before each
    SELECT run_id, rank, device, island_start_ns AS i_start, island_end_ns AS i_end, busy_before_ns AS i_before
    FROM _busy_islands
    WHERE scope = 'device'
),
rank_devices AS (
    SELECT DISTINCT run_id, rank, device FROM island_sums
),
span_ends AS (
    -- each end of the step's GPU span, on each device of its rank (which: 0 the start, 1 the end)
    SELECT s.run_id, s.rank, s.step, d.device, 0 AS which, s.gpu_start_ns AS t
    FROM s JOIN rank_devices AS d ON d.run_id = s.run_id AND d.rank = s.rank
    WHERE s.gpu_start_ns IS NOT NULL
    UNION ALL
    SELECT s.run_id, s.rank, s.step, d.device, 1, s.gpu_end_ns
    FROM s JOIN rank_devices AS d ON d.run_id = s.run_id AND d.rank = s.rank
    WHERE s.gpu_start_ns IS NOT NULL
),
busy_before AS (
    -- B(t), the device's busy time before t, at each span end: an ordered pass over the islands' starts
    -- and the ends (an end sees the last island that started at or before it); in time linear in the
    -- islands and steps, where a join of every step with every island of the rank was steps x islands
    SELECT run_id, rank, step, which, coalesce(i_before + least(t, i_end) - i_start, 0) AS busy_ns
    FROM (
        SELECT run_id, rank, step, which, t, is_end,
               last_value(i_start IGNORE NULLS) OVER latest AS i_start,
               last_value(i_end IGNORE NULLS) OVER latest AS i_end,
               last_value(i_before IGNORE NULLS) OVER latest AS i_before
        FROM (
            SELECT run_id, rank, device, step, which, t, 1 AS is_end,
                   NULL::BIGINT AS i_start, NULL::BIGINT AS i_end, NULL::BIGINT AS i_before
            FROM span_ends
            UNION ALL
            SELECT run_id, rank, device, NULL, NULL, i_start, 0, i_start, i_end, i_before FROM island_sums
        ) AS marks
        WINDOW latest AS (PARTITION BY run_id, rank, device ORDER BY t, is_end ROWS UNBOUNDED PRECEDING)
    ) AS swept
    WHERE is_end = 1
),
device_busy AS (
    -- the device's busy time (any step's work) inside the step's GPU span, B(end) - B(start), summed over
    -- the rank's devices
    SELECT run_id, rank, step, sum(CASE WHEN which = 1 THEN busy_ns ELSE -busy_ns END) AS busy_all_ns
    FROM busy_before
    GROUP BY run_id, rank, step
),
q AS (
    SELECT s.*,
           CASE WHEN s.gpu_start_ns IS NULL OR f.launched_ns IS NULL THEN 0
                ELSE s.gpu_start_ns - greatest(s.w_start, least(f.launched_ns, s.gpu_start_ns)) END AS queued,
           -- never below the step's own busy time (the islands hold its activities too)
           greatest(coalesce(d.busy_all_ns, 0), s.gpu_busy_ns) AS busy_all
    FROM s
    LEFT JOIN first_act f ON f.run_id = s.run_id AND f.rank = s.rank AND f.step = s.step
    LEFT JOIN device_busy d ON d.run_id = s.run_id AND d.rank = s.rank AND d.step = s.step
)
SELECT
    run_id, rank, step, phase, name,
    w_start AS wall_start_ns, w_end AS wall_end_ns, w_end - w_start AS wall_ns,
    coalesce(gpu_start_ns, w_end) - w_start - queued AS host_setup_ns,
    queued AS gpu_queued_ns,
    compute_ns, exposed_comm_ns, exposed_memory_ns,
    busy_all - gpu_busy_ns AS other_steps_ns,
    coalesce(gpu_span_ns, 0) - busy_all AS gpu_idle_ns,
    CASE WHEN gpu_end_ns IS NULL THEN 0 ELSE w_end - gpu_end_ns END AS host_tail_ns,
    gpu_window_ns,
    gpu_busy_pct / 100.0 AS gpu_utilization,
    activities
FROM q;

-- gpu_timeline: where the GPU's time went. One row per (run_id, rank, device, step, variant), plus one
-- row per (run_id, rank, device, variant) with step NULL for the whole rank. The `hta` variant has
-- whole-rank rows only.
-- Method: a sweep over the start (+1) and end (-1) of every interval, counting active compute, comm
-- and memory intervals; between two consecutive boundaries the state is constant, and each piece of
-- time goes to the first class active in the order compute > comm > memory, else to idle. So
-- compute_ns + exposed_comm_ns + exposed_memory_ns + idle_ns = span_ns holds exactly.
-- Columns:
--   run_id, rank, device, step   the group (step NULL: the whole rank)
--   variant                      `exact`, `linked`, `hta_names` or `hta` (see _timeline_intervals)
--   activities                   intervals in the group
--   first_start_ns, last_end_ns  first GPU start and last GPU end
--   span_ns                      last_end_ns - first_start_ns
--   busy_ns                      length of the union of all intervals
--   compute_ns                   length of the union of compute intervals (not communication, not memory)
--   comm_ns                      length of the union of communication intervals
--   exposed_comm_ns              communication time not under compute: |comm - compute|
--   exposed_memory_ns            memory time under neither: |memory - compute - comm|
--   idle_ns                      span_ns - busy_ns
--   comm_compute_overlap_pct     |comm ∩ compute| / |comm| * 100 (NULL without communication)
CREATE OR REPLACE VIEW gpu_timeline AS
WITH scoped AS (
    -- each interval counts once for its step and once for the whole rank (step key -1)
    SELECT run_id, rank, device, variant, step AS step_key, start_ns, end_ns, cls
    FROM _timeline_intervals WHERE step IS NOT NULL
    UNION ALL
    SELECT run_id, rank, device, variant, -1 AS step_key, start_ns, end_ns, cls
    FROM _timeline_intervals
),
marks AS (
    SELECT run_id, rank, device, variant, step_key, start_ns AS t,
           CASE WHEN cls = 'compute' THEN 1 ELSE 0 END AS d_compute,
           CASE WHEN cls = 'comm' THEN 1 ELSE 0 END AS d_comm,
           CASE WHEN cls = 'memory' THEN 1 ELSE 0 END AS d_memory
    FROM scoped
    UNION ALL
    SELECT run_id, rank, device, variant, step_key, end_ns,
           CASE WHEN cls = 'compute' THEN -1 ELSE 0 END,
           CASE WHEN cls = 'comm' THEN -1 ELSE 0 END,
           CASE WHEN cls = 'memory' THEN -1 ELSE 0 END
    FROM scoped
),
points AS (
    SELECT run_id, rank, device, variant, step_key, t,
           sum(d_compute) AS d_compute, sum(d_comm) AS d_comm, sum(d_memory) AS d_memory
    FROM marks
    GROUP BY run_id, rank, device, variant, step_key, t
),
states AS (
    SELECT run_id, rank, device, variant, step_key, t,
           lead(t) OVER running AS next_t,
           sum(d_compute) OVER running AS n_compute,
           sum(d_comm) OVER running AS n_comm,
           sum(d_memory) OVER running AS n_memory
    FROM points
    WINDOW running AS (PARTITION BY run_id, rank, device, variant, step_key ORDER BY t
                       ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)
),
pieces AS (
    SELECT run_id, rank, device, variant, step_key, next_t - t AS len,
           n_compute > 0 AS in_compute, n_comm > 0 AS in_comm, n_memory > 0 AS in_memory
    FROM states
    WHERE next_t IS NOT NULL
),
totals AS (
    SELECT run_id, rank, device, variant, step_key,
           coalesce(sum(len) FILTER (WHERE in_compute OR in_comm OR in_memory), 0) AS busy_ns,
           coalesce(sum(len) FILTER (WHERE in_compute), 0) AS compute_ns,
           coalesce(sum(len) FILTER (WHERE in_comm), 0) AS comm_ns,
           coalesce(sum(len) FILTER (WHERE in_comm AND NOT in_compute), 0) AS exposed_comm_ns,
           coalesce(sum(len) FILTER (WHERE in_memory AND NOT in_compute AND NOT in_comm), 0) AS exposed_memory_ns,
           coalesce(sum(len) FILTER (WHERE in_comm AND in_compute), 0) AS overlap_ns
    FROM pieces
    GROUP BY run_id, rank, device, variant, step_key
),
spans AS (
    SELECT run_id, rank, device, variant, step_key, count(*) AS activities,
           min(start_ns) AS first_start_ns, max(end_ns) AS last_end_ns
    FROM scoped
    GROUP BY run_id, rank, device, variant, step_key
)
SELECT
    s.run_id, s.rank, s.device,
    CASE WHEN s.step_key = -1 THEN NULL ELSE s.step_key END AS step,
    s.variant, s.activities, s.first_start_ns, s.last_end_ns,
    s.last_end_ns - s.first_start_ns AS span_ns,
    coalesce(t.busy_ns, 0) AS busy_ns,
    coalesce(t.compute_ns, 0) AS compute_ns,
    coalesce(t.comm_ns, 0) AS comm_ns,
    coalesce(t.exposed_comm_ns, 0) AS exposed_comm_ns,
    coalesce(t.exposed_memory_ns, 0) AS exposed_memory_ns,
    s.last_end_ns - s.first_start_ns - coalesce(t.busy_ns, 0) AS idle_ns,
    CASE WHEN t.comm_ns > 0 THEN 100.0 * t.overlap_ns / t.comm_ns END AS comm_compute_overlap_pct
FROM spans AS s
LEFT JOIN totals AS t
  ON t.run_id = s.run_id AND t.rank = s.rank AND t.device IS NOT DISTINCT FROM s.device
 AND t.variant = s.variant AND t.step_key = s.step_key;

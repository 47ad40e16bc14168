-- kernel_overlap: one row per GPU activity: how much of it ran alone on its device and how much was
-- hidden under work on other streams.
-- Columns:
--   run_id, rank, kernel_id, device, stream, step, phase, name, category, dur_ns   the activity
--   exclusive_ns              time while no other stream of the device was busy
--   hidden_ns                 dur_ns - exclusive_ns: time while another stream was busy too
--   hidden_under_compute_ns   time while another stream ran compute (not communication, not memory)
--   exclusive_ratio, hidden_ratio   the two as fractions of dur_ns (NULL for zero-length activities)
CREATE OR REPLACE VIEW kernel_overlap AS
WITH acts AS (
    SELECT run_id, rank, kernel_id, device, stream, step, phase_key AS phase, name, category, start_ns,
           end_ns, dur_ns, kind = 'kernel' AND category <> 'communication' AS is_compute
    FROM _kernel_facts
),
pieces AS (
    SELECT a.run_id, a.rank, a.kernel_id,
           least(a.end_ns, g.seg_end_ns) - greatest(a.start_ns, g.seg_start_ns) AS len,
           g.busy_streams,
           g.compute_streams - CASE WHEN a.is_compute THEN 1 ELSE 0 END AS other_compute_streams
    FROM acts AS a
    JOIN _device_segments AS g
      ON g.run_id = a.run_id AND g.rank = a.rank AND g.device = a.device
     AND g.seg_start_ns < a.end_ns AND g.seg_end_ns > a.start_ns
),
per_activity AS (
    SELECT run_id, rank, kernel_id,
           sum(len) FILTER (WHERE busy_streams = 1) AS exclusive_ns,
           sum(len) FILTER (WHERE other_compute_streams > 0) AS under_compute_ns
    FROM pieces
    GROUP BY run_id, rank, kernel_id
)
SELECT a.run_id, a.rank, a.kernel_id, a.device, a.stream, a.step, a.phase, a.name, a.category, a.dur_ns,
       coalesce(p.exclusive_ns, 0) AS exclusive_ns,
       a.dur_ns - coalesce(p.exclusive_ns, 0) AS hidden_ns,
       coalesce(p.under_compute_ns, 0) AS hidden_under_compute_ns,
       CASE WHEN a.dur_ns > 0 THEN coalesce(p.exclusive_ns, 0) / a.dur_ns END AS exclusive_ratio,
       CASE WHEN a.dur_ns > 0 THEN (a.dur_ns - coalesce(p.exclusive_ns, 0)) / a.dur_ns END AS hidden_ratio
FROM acts AS a
LEFT JOIN per_activity AS p ON p.run_id = a.run_id AND p.rank = a.rank AND p.kernel_id = a.kernel_id;

-- kernel_overlap: one row per GPU activity: how much of it ran alone on its device and how much was
-- hidden under work on other streams.
-- Method, per device, in one ordered pass (no range join): first each stream's activities are merged
-- into islands (an activity opens a new island when it starts after every earlier one on that stream
-- ended), likewise its compute activities; then a sweep over the island boundaries counts the busy
-- streams and the streams running compute, and carries three running totals: the time when exactly
-- one stream was busy (exclusive), when at least one and when at least two streams ran compute. The
-- activities' own start and end are points of the same sweep, so each activity's share of a total is
-- its value at the activity's end minus its value at its start.
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
ordered AS (
    SELECT *,
           max(end_ns) OVER (PARTITION BY run_id, rank, device, stream ORDER BY start_ns, end_ns
                             ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_end,
           max(end_ns) OVER (PARTITION BY run_id, rank, device, stream, is_compute ORDER BY start_ns, end_ns
                             ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_same_end
    FROM acts
    WHERE end_ns > start_ns
),
numbered AS (
    SELECT *,
           sum(CASE WHEN prev_end IS NULL OR start_ns > prev_end THEN 1 ELSE 0 END)
               OVER (PARTITION BY run_id, rank, device, stream ORDER BY start_ns, end_ns
                     ROWS UNBOUNDED PRECEDING) AS island,
           sum(CASE WHEN prev_same_end IS NULL OR start_ns > prev_same_end THEN 1 ELSE 0 END)
               OVER (PARTITION BY run_id, rank, device, stream, is_compute ORDER BY start_ns, end_ns
                     ROWS UNBOUNDED PRECEDING) AS same_island
    FROM ordered
),
islands AS (
    SELECT run_id, rank, device, min(start_ns) AS s, max(end_ns) AS e, 1 AS d_busy, 0 AS d_compute
    FROM numbered GROUP BY run_id, rank, device, stream, island
    UNION ALL
    SELECT run_id, rank, device, min(start_ns), max(end_ns), 0, 1
    FROM numbered WHERE is_compute GROUP BY run_id, rank, device, stream, same_island
),
marks AS (
    SELECT run_id, rank, device, s AS t, d_busy, d_compute, CAST(NULL AS BIGINT) AS kernel_id, 0 AS edge FROM islands
    UNION ALL
    SELECT run_id, rank, device, e, -d_busy, -d_compute, NULL, 0 FROM islands
    UNION ALL
    SELECT run_id, rank, device, start_ns, 0, 0, kernel_id, 1 FROM acts
    UNION ALL
    SELECT run_id, rank, device, end_ns, 0, 0, kernel_id, 2 FROM acts
),
states AS (
    SELECT run_id, rank, device, t, kernel_id, edge,
           sum(d_busy) OVER running AS busy_streams,
           sum(d_compute) OVER running AS compute_streams,
           lead(t) OVER (PARTITION BY run_id, rank, device ORDER BY t, edge, kernel_id, d_busy, d_compute) - t AS len
    FROM marks
    WINDOW running AS (PARTITION BY run_id, rank, device ORDER BY t, edge, kernel_id, d_busy, d_compute
                       ROWS UNBOUNDED PRECEDING)
),
totals AS (
    -- the running totals up to (not including) each row's own piece, i.e. their value at time t
    SELECT kernel_id, edge, run_id, rank,
           coalesce(sum(CASE WHEN busy_streams = 1 THEN len ELSE 0 END) OVER before, 0) AS exclusive_at,
           coalesce(sum(CASE WHEN compute_streams >= 1 THEN len ELSE 0 END) OVER before, 0) AS compute1_at,
           coalesce(sum(CASE WHEN compute_streams >= 2 THEN len ELSE 0 END) OVER before, 0) AS compute2_at
    FROM states
    WINDOW before AS (PARTITION BY run_id, rank, device ORDER BY t, edge, kernel_id, busy_streams, compute_streams
                      ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING)
),
per_activity AS (
    SELECT run_id, rank, kernel_id,
           max(CASE WHEN edge = 2 THEN exclusive_at END) - max(CASE WHEN edge = 1 THEN exclusive_at END) AS exclusive_ns,
           max(CASE WHEN edge = 2 THEN compute1_at END) - max(CASE WHEN edge = 1 THEN compute1_at END) AS compute1_ns,
           max(CASE WHEN edge = 2 THEN compute2_at END) - max(CASE WHEN edge = 1 THEN compute2_at END) AS compute2_ns
    FROM totals
    WHERE kernel_id IS NOT NULL
    GROUP BY run_id, rank, kernel_id
)
SELECT a.run_id, a.rank, a.kernel_id, a.device, a.stream, a.step, a.phase, a.name, a.category, a.dur_ns,
       coalesce(p.exclusive_ns, 0) AS exclusive_ns,
       a.dur_ns - coalesce(p.exclusive_ns, 0) AS hidden_ns,
       -- another stream ran compute: for a compute activity, a second compute stream; else any
       coalesce(CASE WHEN a.is_compute THEN p.compute2_ns ELSE p.compute1_ns END, 0) AS hidden_under_compute_ns,
       CASE WHEN a.dur_ns > 0 THEN coalesce(p.exclusive_ns, 0) / a.dur_ns END AS exclusive_ratio,
       CASE WHEN a.dur_ns > 0 THEN (a.dur_ns - coalesce(p.exclusive_ns, 0)) / a.dur_ns END AS hidden_ratio
FROM acts AS a
LEFT JOIN per_activity AS p ON p.run_id = a.run_id AND p.rank = a.rank AND p.kernel_id = a.kernel_id;

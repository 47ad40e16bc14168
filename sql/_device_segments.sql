-- _device_segments: helper of kernel_overlap and stream_summary. One row per maximal piece of a
-- device's timeline over which the set of busy streams does not change.
-- Method: the union of each stream's activities (islands: an activity opens a new island when it starts
-- after every earlier one on that stream ended), the same for its compute activities, then a sweep
-- over island boundaries across the device's streams.
-- Columns:
--   run_id, rank, device        the device
--   seg_start_ns, seg_end_ns    the piece
--   busy_streams                streams with an activity running during the piece
--   compute_streams             streams with a compute activity (not communication, not memory) running
CREATE OR REPLACE VIEW _device_segments AS
WITH acts AS (
    SELECT run_id, rank, device, stream, start_ns, end_ns,
           kind = 'kernel' AND category <> 'communication' AS is_compute
    FROM _kernel_facts
    WHERE end_ns > start_ns
),
ordered AS (
    SELECT *,
           max(end_ns) OVER (PARTITION BY run_id, rank, device, stream ORDER BY start_ns, end_ns
                             ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_end,
           max(CASE WHEN is_compute THEN end_ns END)
               OVER (PARTITION BY run_id, rank, device, stream, is_compute ORDER BY start_ns, end_ns
                     ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_compute_end
    FROM acts
),
numbered AS (
    SELECT *,
           sum(CASE WHEN prev_end IS NULL OR start_ns > prev_end THEN 1 ELSE 0 END)
               OVER (PARTITION BY run_id, rank, device, stream ORDER BY start_ns, end_ns
                     ROWS UNBOUNDED PRECEDING) AS island,
           sum(CASE WHEN prev_compute_end IS NULL OR start_ns > prev_compute_end THEN 1 ELSE 0 END)
               OVER (PARTITION BY run_id, rank, device, stream, is_compute ORDER BY start_ns, end_ns
                     ROWS UNBOUNDED PRECEDING) AS compute_island
    FROM ordered
),
islands AS (
    SELECT run_id, rank, device, min(start_ns) AS s, max(end_ns) AS e, 1 AS d_busy, 0 AS d_compute
    FROM numbered GROUP BY run_id, rank, device, stream, island
    UNION ALL
    SELECT run_id, rank, device, min(start_ns), max(end_ns), 0, 1
    FROM numbered WHERE is_compute GROUP BY run_id, rank, device, stream, compute_island
),
marks AS (
    SELECT run_id, rank, device, s AS t, d_busy, d_compute FROM islands
    UNION ALL
    SELECT run_id, rank, device, e, -d_busy, -d_compute FROM islands
),
points AS (
    SELECT run_id, rank, device, t, sum(d_busy) AS d_busy, sum(d_compute) AS d_compute
    FROM marks GROUP BY run_id, rank, device, t
),
states AS (
    SELECT run_id, rank, device, t,
           lead(t) OVER (PARTITION BY run_id, rank, device ORDER BY t) AS next_t,
           sum(d_busy) OVER (PARTITION BY run_id, rank, device ORDER BY t ROWS UNBOUNDED PRECEDING) AS busy_streams,
           sum(d_compute) OVER (PARTITION BY run_id, rank, device ORDER BY t ROWS UNBOUNDED PRECEDING) AS compute_streams
    FROM points
)
SELECT run_id, rank, device, t AS seg_start_ns, next_t AS seg_end_ns, busy_streams, compute_streams
FROM states
WHERE next_t IS NOT NULL AND busy_streams > 0;

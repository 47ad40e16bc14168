-- export_exposed_comm: one row per interval of exposed communication on a device, per (run_id, rank,
-- device, start_ns): time when a communication activity ran and no compute activity did (gpu_timeline's
-- exposed_comm_ns, variant `exact`, laid out in time). Summed per (run_id, rank, device) it is the
-- whole-rank row's exposed_comm_ns exactly.
-- Method: a sweep over the `exact` intervals of _timeline_intervals: each start adds 1 to its class's count
-- and each end subtracts 1 (ends before starts at the same ns, so that touching intervals do not overlap);
-- between two consecutive points the counts are constant, and a piece with comm > 0 and compute = 0 is
-- exposed; touching exposed pieces are merged into one interval (a gaps-and-islands pass).
-- Columns:
--   run_id, rank, device   VARCHAR, INTEGER, INTEGER  where
--   start_ns, end_ns, dur_ns   BIGINT  the interval (end_ns > start_ns)
CREATE OR REPLACE VIEW export_exposed_comm AS
WITH intervals AS (
    SELECT run_id, rank, device, cls, start_ns, end_ns
    FROM _timeline_intervals
    WHERE variant = 'exact' AND end_ns > start_ns AND cls IN ('comm', 'compute')
),
points AS (
    SELECT run_id, rank, device, start_ns AS t, 1 AS sort_key,
           CASE WHEN cls = 'comm' THEN 1 ELSE 0 END AS d_comm, CASE WHEN cls = 'compute' THEN 1 ELSE 0 END AS d_compute
    FROM intervals
    UNION ALL
    SELECT run_id, rank, device, end_ns, 0,
           CASE WHEN cls = 'comm' THEN -1 ELSE 0 END, CASE WHEN cls = 'compute' THEN -1 ELSE 0 END
    FROM intervals
),
-- the counts after each point, and the next point's time
swept AS (
    SELECT run_id, rank, device, t,
           sum(d_comm) OVER w AS comm, sum(d_compute) OVER w AS compute,
           lead(t) OVER w AS next_t
    FROM points
    WINDOW w AS (PARTITION BY run_id, rank, device ORDER BY t, sort_key, d_comm, d_compute
                 ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)
),
pieces AS (
    SELECT run_id, rank, device, t AS start_ns, next_t AS end_ns
    FROM swept
    WHERE comm > 0 AND compute = 0 AND next_t > t
),
-- islands: a piece starts a new interval unless it touches the previous piece
islands AS (
    SELECT *, sum(starts) OVER (PARTITION BY run_id, rank, device ORDER BY start_ns) AS island
    FROM (SELECT *, CASE WHEN start_ns = lag(end_ns) OVER (PARTITION BY run_id, rank, device ORDER BY start_ns)
                         THEN 0 ELSE 1 END AS starts
          FROM pieces)
)
SELECT run_id, rank, device, min(start_ns) AS start_ns, max(end_ns) AS end_ns, max(end_ns) - min(start_ns) AS dur_ns
FROM islands
GROUP BY run_id, rank, device, island

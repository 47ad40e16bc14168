-- critical_stream: one row per (run_id, rank, step) that has a critical path: the path's extent and its
-- critical stream, the stream with the most `gpu` time on the path (ties: the lower stream id). Only GPU
-- time on the path counts (never host time, launch delays, gaps or waits). When the path holds no GPU
-- time the step has no critical stream (NULL) and gpu_share is 0; where gpu_share is small (a host-bound
-- or queued step) the critical stream names little of the path: read critical_stream_share beside it.
-- Columns:
--   run_id, rank, step   VARCHAR, INTEGER, BIGINT  the step
--   path_start_ns        BIGINT  start of the path's first segment
--   path_end_ns          BIGINT  end of its last segment (the end of the step's last GPU activity)
--   span_ns              BIGINT  path_end_ns - path_start_ns = sum of the segments' dur_ns
--   segments             HUGEINT  number of segments (critical_path rows)
--   gpu_ns               HUGEINT  gpu time on the path (all streams)
--   critical_stream      BIGINT  the stream with the most gpu time on the path (NULL if the path holds none)
--   critical_stream_ns   HUGEINT  that stream's gpu time on the path
--   gpu_share            DOUBLE  gpu_ns / span_ns (0 when span_ns is 0)
--   critical_stream_share  DOUBLE  critical_stream_ns / span_ns (NULL without a critical stream)
CREATE OR REPLACE VIEW critical_stream AS
WITH by_stream AS (
    -- one pass over the path: per stream (NULL: segments that are not gpu)
    SELECT run_id, rank, step, CASE WHEN kind = 'gpu' THEN stream END AS stream,
           MIN(start_ns) AS first_ns, MAX(start_ns + dur_ns) AS last_ns, COUNT(*) AS n,
           SUM(CASE WHEN kind = 'gpu' THEN dur_ns ELSE 0 END) AS gpu_ns
    FROM critical_path
    GROUP BY run_id, rank, step, CASE WHEN kind = 'gpu' THEN stream END
),
ranked AS (
    SELECT b.*,
           ROW_NUMBER() OVER (PARTITION BY run_id, rank, step
                              ORDER BY CASE WHEN stream IS NULL THEN 1 ELSE 0 END, gpu_ns DESC, stream) AS rn
    FROM by_stream b
)
SELECT run_id, rank, step, MIN(first_ns) AS path_start_ns, MAX(last_ns) AS path_end_ns,
       MAX(last_ns) - MIN(first_ns) AS span_ns, SUM(n) AS segments, SUM(gpu_ns) AS gpu_ns,
       MAX(CASE WHEN rn = 1 THEN stream END) AS critical_stream,
       MAX(CASE WHEN rn = 1 AND stream IS NOT NULL THEN gpu_ns END) AS critical_stream_ns,
       CASE WHEN MAX(last_ns) > MIN(first_ns) THEN CAST(SUM(gpu_ns) AS DOUBLE) / (MAX(last_ns) - MIN(first_ns))
            ELSE 0.0 END AS gpu_share,
       CASE WHEN MAX(last_ns) > MIN(first_ns)
            THEN CAST(MAX(CASE WHEN rn = 1 AND stream IS NOT NULL THEN gpu_ns END) AS DOUBLE)
                 / (MAX(last_ns) - MIN(first_ns)) END AS critical_stream_share
FROM ranked
GROUP BY run_id, rank, step

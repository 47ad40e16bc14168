-- stream_share: one row per (run_id, rank, device, stream) that ran GPU activities: its share of the
-- run's GPU time, and whether it carries work in the report's sense (the run report counts these
-- streams: with one, nothing runs beside any kernel and overlap has nothing to say).
-- Columns:
--   run_id, rank, device, stream   VARCHAR, INTEGER, INTEGER, BIGINT  the stream (kernels)
--   gpu_time_ns    BIGINT  sum of dur_ns of its activities
--   share          DOUBLE  gpu_time_ns / the run's GPU time (all ranks, devices, streams); NULL when the
--                           run has no GPU time (only zero-duration activities)
--   carries_work   BOOLEAN  share >= report_params.report_bar (1 %); FALSE when share is NULL
CREATE OR REPLACE VIEW stream_share AS
WITH per_stream AS (
    SELECT run_id, rank, device, stream, sum(dur_ns) AS ns FROM kernels GROUP BY run_id, rank, device, stream
),
shared AS (
    -- nullif: 0 / 0 is NaN on DuckDB and NULL on Spark; a run without GPU time has no shares
    SELECT *, ns / nullif(sum(ns) OVER (PARTITION BY run_id), 0) AS share FROM per_stream
)
SELECT run_id, rank, device, stream, CAST(ns AS BIGINT) AS gpu_time_ns, share,
       coalesce(share >= (SELECT report_bar FROM report_params), FALSE) AS carries_work
FROM shared;

-- step_roofline: one row per (run_id, rank, step) with GPU work: how much of the device's peak the step
-- used (MFU, MBU), from the kernels whose work is known (_kernel_work: FLOPs and bytes per launching op).
--   mfu_pct = 100 × Σ over the step's kernels of flops / (peak_tflops × 1000) / step_time_ns: the time the
--             step's FLOPs need at the peak of each kernel's precision, as a share of the step time
--   mbu_pct = 100 × Σ bytes / (peak_tbps × 1000) / step_time_ns: the same for HBM bytes
-- step_time_ns is the step's GPU span (steps.gpu_span_ns), else its host window. Kernels whose op has no
-- formula add nothing (their GPU time is in step_time_ns, not in known_gpu_ns): MFU/MBU are lower bounds,
-- read with known_gpu_pct. NULL where the device has no peaks.
-- Columns:
--   run_id, rank, step, phase   VARCHAR, INTEGER, BIGINT, VARCHAR  the step (steps)
--   batch_size, tokens          BIGINT  its batch composition (steps)
--   step_time_ns                BIGINT  as above
--   known_gpu_ns                HUGEINT  GPU time of the step's kernels whose work is known
--   known_gpu_pct               DOUBLE  100 × known_gpu_ns / the step's kernel GPU time (sum of durations)
--   flops, bytes                DOUBLE  Σ over those kernels
--   mfu_pct, mbu_pct            DOUBLE  as above
-- materialized: per_run   rows kept per run (warehouse/derived.py: `tracehouse derive`)
CREATE OR REPLACE VIEW step_roofline AS
WITH work AS (
    -- exact sums (DECIMAL), so the figures do not depend on the order rows are added in
    SELECT run_id, rank, step, sum(dur_ns) AS known_gpu_ns,
           CAST(sum(CAST(flops AS DECIMAL(38, 6))) AS DOUBLE) AS flops,
           CAST(sum(CAST(bytes AS DECIMAL(38, 6))) AS DOUBLE) AS bytes,
           CAST(sum(CAST(flops / (peak_tflops * 1000.0) AS DECIMAL(38, 12))) AS DOUBLE) AS ideal_compute_ns,
           CAST(sum(CAST(bytes / (peak_tbps * 1000.0) AS DECIMAL(38, 12))) AS DOUBLE) AS ideal_memory_ns,
           bool_and(peak_tbps IS NOT NULL) AS known_device
    FROM _kernel_work
    WHERE step IS NOT NULL
    GROUP BY run_id, rank, step
),
all_kernels AS (
    SELECT run_id, rank, step, sum(dur_ns) AS kernel_ns FROM kernels WHERE kind = 'kernel' AND step IS NOT NULL
    GROUP BY run_id, rank, step
)
SELECT s.run_id, s.rank, s.step, s.phase, s.batch_size, s.tokens,
       coalesce(s.gpu_span_ns, s.wall_ns) AS step_time_ns,
       w.known_gpu_ns, 100.0 * w.known_gpu_ns / a.kernel_ns AS known_gpu_pct, w.flops, w.bytes,
       CASE WHEN w.known_device THEN 100.0 * coalesce(w.ideal_compute_ns, 0) / coalesce(s.gpu_span_ns, s.wall_ns) END AS mfu_pct,
       CASE WHEN w.known_device THEN 100.0 * w.ideal_memory_ns / coalesce(s.gpu_span_ns, s.wall_ns) END AS mbu_pct
FROM steps AS s
JOIN work AS w ON w.run_id = s.run_id AND w.rank = s.rank AND w.step = s.step
JOIN all_kernels AS a ON a.run_id = s.run_id AND a.rank = s.rank AND a.step = s.step
WHERE coalesce(s.gpu_span_ns, s.wall_ns) > 0;

-- kernel_roofline: one row per (run_id, phase, kernel name) of the kernels whose launching op's work is
-- known (_op_work: FLOPs and bytes from Input Dims / Input type, the formulas in its header): how close
-- they ran to the device's roofline. An op's FLOPs and bytes are charged to the kernels it launched in
-- proportion to their GPU time (_kernel_work: each kernel of the op gets the op's achieved rate).
-- Kernels whose op has no formula are left out (silent, not guessed). The device peaks and how they are
-- chosen: _kernel_work (no device row: the peak columns, bound and pct_of_bound are NULL).
-- Columns:
--   run_id, phase       VARCHAR  the run and the kernels' phase (kernels.phase, 'unknown' when NULL)
--   kernel              VARCHAR  the kernel name
--   category            VARCHAR  its category (_kernel_facts)
--   family              VARCHAR  gemm, attention, norm, elementwise (the op's formula)
--   precision           VARCHAR  bf16, fp8, fp4, fp32; NULL for bytes-only families (a kernel launched at
--                       several: the first by name, and its peak)
--   launches            BIGINT  kernels counted
--   dur_ns              HUGEINT  their GPU time (sum of durations)
--   flops               DOUBLE  FLOPs charged to them (NULL: bytes-only family)
--   bytes               DOUBLE  bytes charged to them
--   achieved_tflops     DOUBLE  flops / dur_ns / 1000 (TFLOP/s)
--   achieved_tbps       DOUBLE  bytes / dur_ns / 1000 (TB/s)
--   intensity           DOUBLE  arithmetic intensity, flops / bytes (FLOP/byte)
--   device              VARCHAR  the device_peaks row used (_run_device)
--   peaks_source        VARCHAR  where its figures come from
--   peak_tflops         DOUBLE  the compute peak for the precision (TFLOP/s)
--   peak_tbps           DOUBLE  the HBM peak (TB/s)
--   ridge               DOUBLE  peak_tflops / peak_tbps: the intensity where the bound turns from memory to
--                            compute
--   bound               VARCHAR  compute (intensity >= ridge) or memory; memory for bytes-only families
--   attainable_tflops   DOUBLE  min(peak_tflops, intensity × peak_tbps): the roofline at this intensity
--   pct_of_bound        DOUBLE  100 × achieved_tflops / attainable_tflops; bytes-only: 100 × achieved_tbps /
--                       peak_tbps, NULL where that is over 100: the bytes from the input dims are more than
--                       the device can move in that time, so they are not the traffic (an input was a
--                       broadcast, stride-0 view, e.g. a gradient expanded over a pooled map: the dims do not
--                       show it)
-- materialized: per_run   rows kept per run (warehouse/derived.py: `tracehouse derive`)
CREATE OR REPLACE VIEW kernel_roofline AS
WITH grouped AS (
    SELECT run_id, phase, kernel, min(category) AS category, min(family) AS family,
           min(precision) AS precision, count(*) AS launches, sum(dur_ns) AS dur_ns,
           -- exact sums (DECIMAL), so the figure does not depend on the order rows are added in
           CAST(sum(CAST(flops AS DECIMAL(38, 6))) AS DOUBLE) AS flops,
           CAST(sum(CAST(bytes AS DECIMAL(38, 6))) AS DOUBLE) AS bytes, any_value(device) AS device,
           any_value(peaks_source) AS peaks_source, arg_min(peak_tflops, precision) AS peak_tflops,
           any_value(peak_tbps) AS peak_tbps
    FROM _kernel_work
    GROUP BY run_id, phase, kernel
    HAVING sum(dur_ns) > 0
),
rated AS (
    SELECT g.*,
           g.flops / g.dur_ns / 1000.0 AS achieved_tflops,
           g.bytes / g.dur_ns / 1000.0 AS achieved_tbps,
           g.flops / g.bytes AS intensity
    FROM grouped AS g
)
SELECT run_id, phase, kernel, category, family, precision, launches, dur_ns, flops, bytes,
       achieved_tflops, achieved_tbps, intensity, device, peaks_source, peak_tflops, peak_tbps,
       peak_tflops / peak_tbps AS ridge,
       CASE WHEN flops IS NULL THEN (CASE WHEN peak_tbps IS NOT NULL THEN 'memory' END)
            WHEN peak_tflops IS NULL OR peak_tbps IS NULL THEN NULL
            WHEN intensity >= peak_tflops / peak_tbps THEN 'compute' ELSE 'memory' END AS bound,
       least(peak_tflops, intensity * peak_tbps) AS attainable_tflops,
       CASE WHEN flops IS NULL AND achieved_tbps > peak_tbps THEN NULL
            WHEN flops IS NULL THEN 100.0 * achieved_tbps / peak_tbps
            ELSE 100.0 * achieved_tflops / least(peak_tflops, intensity * peak_tbps) END AS pct_of_bound
FROM rated;

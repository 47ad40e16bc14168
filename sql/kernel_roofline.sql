-- kernel_roofline: one row per (run_id, phase, kernel name) of the kernels whose launching op's work is
-- known (_op_work: FLOPs and bytes from Input Dims / Input type, the formulas in its header): how close
-- they ran to the device's roofline. An op's FLOPs and bytes are charged to the kernels it launched in
-- proportion to their GPU time (so a GEMM and its split-K reduce share the GEMM's work, never count it
-- twice; each kernel of the op gets the op's achieved rate). Kernels whose op has no formula are left
-- out (silent, not guessed).
-- Device peaks: the row of device_peaks (sql/rules/device_peaks.csv, or the user's file named by
-- TRACEHOUSE_DEVICE_PEAKS, which wins) whose pattern matches runs.hardware, first by rule_order; else
-- the row whose props_match equals the trace's first device's `cc=<major>.<minor> sms=<n> mem_gib=<GiB>`.
-- No row: the peak columns, bound and pct_of_bound are NULL.
-- The compute peak is that of the op's precision (input 0's dtype): bf16 (FP16/BF16), fp8, fp4, fp32
-- (the TF32 peak where the device has one: an FP32 GEMM may run on TF32 tensor cores).
-- Columns:
--   run_id, phase       the run and the kernels' phase (kernels.phase, 'unknown' when NULL)
--   kernel              the kernel name
--   category            its category (_kernel_facts)
--   family              gemm, attention, norm, elementwise (the op's formula)
--   precision           bf16, fp8, fp4, fp32; NULL for bytes-only families
--   launches            kernels counted
--   dur_ns              their GPU time (sum of durations)
--   flops               DOUBLE  FLOPs charged to them (NULL: bytes-only family)
--   bytes               DOUBLE  bytes charged to them
--   achieved_tflops     flops / dur_ns / 1000 (TFLOP/s)
--   achieved_tbps       bytes / dur_ns / 1000 (TB/s)
--   intensity           arithmetic intensity, flops / bytes (FLOP/byte)
--   device              the device_peaks row used; peaks_source: its source
--   peak_tflops         the compute peak for the precision (TFLOP/s); peak_tbps: HBM peak (TB/s)
--   ridge               peak_tflops / peak_tbps: the intensity where the bound turns from memory to compute
--   bound               compute (intensity >= ridge) or memory; memory for bytes-only families
--   attainable_tflops   min(peak_tflops, intensity × peak_tbps): the roofline at this intensity
--   pct_of_bound        100 × achieved_tflops / attainable_tflops; bytes-only: 100 × achieved_tbps / peak_tbps
CREATE OR REPLACE VIEW kernel_roofline AS
WITH device AS (
    SELECT run_id, device, peaks_source, bf16_tflops, fp8_tflops, fp4_tflops, tf32_tflops, fp32_tflops, hbm_tbps
    FROM (
        SELECT r.run_id, p.device, p.source AS peaks_source, p.bf16_tflops, p.fp8_tflops, p.fp4_tflops, p.tf32_tflops,
               p.fp32_tflops, p.hbm_tbps,
               ROW_NUMBER() OVER (PARTITION BY r.run_id
                                  ORDER BY CASE WHEN p.pattern IS NOT NULL AND regexp_matches(coalesce(r.hardware, ''), p.pattern)
                                                THEN 0 ELSE 1 END, p.rule_order) AS rn
        FROM runs AS r
        JOIN device_peaks AS p
          ON (p.pattern IS NOT NULL AND r.hardware IS NOT NULL AND r.hardware <> '' AND regexp_matches(r.hardware, p.pattern))
          OR (p.props_match IS NOT NULL AND p.props_match =
                'cc=' || json_extract_string(r.device_properties, '$[0].computeMajor') || '.'
                || json_extract_string(r.device_properties, '$[0].computeMinor')
                || ' sms=' || json_extract_string(r.device_properties, '$[0].numSms')
                || ' mem_gib=' || CAST(round(TRY_CAST(json_extract_string(r.device_properties, '$[0].totalGlobalMem') AS DOUBLE)
                                             / 1073741824.0) AS BIGINT))
    ) WHERE rn = 1
),
op_work AS (
    SELECT DISTINCT run_id, rank, op_id, family, precision, flops, bytes FROM _op_work
),
launch_map AS (
    SELECT DISTINCT run_id, rank, launch_op_id, op_id FROM _op_work
),
charged AS (
    -- every kernel of an op with known work, with its share of the op's work
    SELECT f.run_id, f.phase_key AS phase, f.name AS kernel, f.category, w.family, w.precision, f.dur_ns,
           w.flops * f.dur_ns / sum(f.dur_ns) OVER (PARTITION BY f.run_id, f.rank, w.op_id) AS flops,
           w.bytes * f.dur_ns / sum(f.dur_ns) OVER (PARTITION BY f.run_id, f.rank, w.op_id) AS bytes
    FROM _kernel_facts AS f
    JOIN launch_map AS m ON m.run_id = f.run_id AND m.rank = f.rank AND m.launch_op_id = f.cpu_op_id
    JOIN op_work AS w ON w.run_id = m.run_id AND w.rank = m.rank AND w.op_id = m.op_id
    WHERE f.kind = 'kernel'
),
grouped AS (
    SELECT run_id, phase, kernel, any_value(category) AS category, any_value(family) AS family,
           any_value(precision) AS precision, count(*) AS launches, sum(dur_ns) AS dur_ns,
           sum(flops) AS flops, sum(bytes) AS bytes
    FROM charged
    GROUP BY run_id, phase, kernel
    HAVING sum(dur_ns) > 0
),
rated AS (
    SELECT g.*,
           g.flops / g.dur_ns / 1000.0 AS achieved_tflops,
           g.bytes / g.dur_ns / 1000.0 AS achieved_tbps,
           g.flops / g.bytes AS intensity,
           d.device, d.peaks_source,
           CASE g.precision WHEN 'bf16' THEN d.bf16_tflops WHEN 'fp8' THEN d.fp8_tflops WHEN 'fp4' THEN d.fp4_tflops
                            WHEN 'fp32' THEN coalesce(d.tf32_tflops, d.fp32_tflops) END AS peak_tflops,
           d.hbm_tbps AS peak_tbps
    FROM grouped AS g
    LEFT JOIN device AS d ON d.run_id = g.run_id
)
SELECT run_id, phase, kernel, category, family, precision, launches, dur_ns, flops, bytes,
       achieved_tflops, achieved_tbps, intensity, device, peaks_source, peak_tflops, peak_tbps,
       peak_tflops / peak_tbps AS ridge,
       CASE WHEN flops IS NULL THEN (CASE WHEN peak_tbps IS NOT NULL THEN 'memory' END)
            WHEN peak_tflops IS NULL OR peak_tbps IS NULL THEN NULL
            WHEN intensity >= peak_tflops / peak_tbps THEN 'compute' ELSE 'memory' END AS bound,
       least(peak_tflops, intensity * peak_tbps) AS attainable_tflops,
       CASE WHEN flops IS NULL THEN 100.0 * achieved_tbps / peak_tbps
            ELSE 100.0 * achieved_tflops / least(peak_tflops, intensity * peak_tbps) END AS pct_of_bound
FROM rated;

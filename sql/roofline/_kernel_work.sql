-- _kernel_work: helper of kernel_roofline and step_roofline. One row per GPU kernel whose launching op's
-- work is known (_op_work), with its share of the op's FLOPs and bytes (the op's work split over the
-- kernels it launched in proportion to their GPU time: a GEMM and its split-K reduce share the GEMM's
-- work, never count it twice) and the device peaks it is held to.
-- Device peaks: _run_device (no row: the peak columns are NULL). The compute peak is that of the op's precision (input 0's dtype):
-- bf16 (FP16/BF16), fp8, fp4, fp32 (the TF32 peak where the device has one: an FP32 GEMM may run on
-- TF32 tensor cores).
-- Columns:
--   run_id, rank, kernel_id, step   VARCHAR, INTEGER, BIGINT, BIGINT  the kernel and its step
--   phase             VARCHAR  kernels.phase, 'unknown' when NULL
--   kernel            VARCHAR  the kernel name
--   category          VARCHAR  its category (_kernel_facts)
--   op_id             BIGINT  the op whose work it shares (_op_work)
--   family, precision VARCHAR  the op's formula family and precision (_op_work)
--   dur_ns            BIGINT  the kernel's GPU time
--   flops, bytes      DOUBLE  its share of the op's FLOPs (NULL: bytes-only family) and bytes
--   device, peaks_source   VARCHAR  the device_peaks row used and its source
--   peak_tflops       DOUBLE  the compute peak for the precision (TFLOP/s)
--   peak_tbps         DOUBLE  the HBM peak (TB/s)
CREATE OR REPLACE VIEW _kernel_work AS
-- each view it reads is read once (a CTE): DuckDB binds a view again at every reference
WITH all_op_work AS (SELECT * FROM _op_work),
op_work AS (
    SELECT DISTINCT run_id, rank, op_id, family, precision, flops, bytes FROM all_op_work
),
launch_map AS (
    SELECT DISTINCT run_id, rank, launch_op_id, op_id FROM all_op_work
),
charged AS (
    -- every kernel of an op with known work, with its share of the op's work
    SELECT f.run_id, f.rank, f.kernel_id, f.step, f.phase_key AS phase, f.name AS kernel, f.category, w.op_id,
           w.family, w.precision, f.dur_ns,
           w.flops * f.dur_ns / sum(f.dur_ns) OVER (PARTITION BY f.run_id, f.rank, w.op_id) AS flops,
           w.bytes * f.dur_ns / sum(f.dur_ns) OVER (PARTITION BY f.run_id, f.rank, w.op_id) AS bytes
    FROM _kernel_facts AS f
    JOIN launch_map AS m ON m.run_id = f.run_id AND m.rank = f.rank AND m.launch_op_id = f.cpu_op_id
    JOIN op_work AS w ON w.run_id = m.run_id AND w.rank = m.rank AND w.op_id = m.op_id
    WHERE f.kind = 'kernel'
)
SELECT c.*, d.device, d.peaks_source,
       CASE c.precision WHEN 'bf16' THEN d.bf16_tflops WHEN 'fp8' THEN d.fp8_tflops WHEN 'fp4' THEN d.fp4_tflops
                        WHEN 'fp32' THEN coalesce(d.tf32_tflops, d.fp32_tflops) END AS peak_tflops,
       d.hbm_tbps AS peak_tbps
FROM charged AS c
LEFT JOIN _run_device AS d ON d.run_id = c.run_id;

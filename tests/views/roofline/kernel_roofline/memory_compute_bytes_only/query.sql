SELECT run_id, kernel, launches, dur_ns, flops, bytes, achieved_tflops, achieved_tbps, intensity, ridge, bound,
       attainable_tflops, pct_of_bound
FROM kernel_roofline ORDER BY run_id, kernel

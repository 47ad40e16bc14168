SELECT rank, metric, value, better, spread, n_steps FROM run_metrics
WHERE metric IN ('steps', 'step_time_median_ns', 'step_time_p90_ns', 'gpu_busy_ns_per_step', 'idle_pct')
ORDER BY metric, rank NULLS LAST

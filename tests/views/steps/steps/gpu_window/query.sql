SELECT step, gpu_window_start_ns, gpu_window_ns, gpu_window_busy_ns, gpu_busy_pct FROM steps ORDER BY step

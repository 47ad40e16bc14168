SELECT variant, step, start_ns, end_ns, cls FROM _timeline_intervals ORDER BY variant, start_ns

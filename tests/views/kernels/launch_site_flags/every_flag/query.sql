SELECT run_id, rank, step, flag, severity, evidence FROM launch_site_flags

SELECT run_id, rank, step, flag, severity, evidence FROM capture_flags

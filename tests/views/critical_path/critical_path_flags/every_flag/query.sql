SELECT run_id, rank, step, flag, severity, evidence FROM critical_path_flags

SELECT run_id, rank, step, flag, severity, evidence FROM step_flags

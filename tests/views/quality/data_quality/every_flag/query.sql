SELECT run_id, rank, step, flag, severity, evidence FROM data_quality

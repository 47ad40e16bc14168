SELECT run_id, rank, step, flag, severity, evidence, message FROM queueing_flags

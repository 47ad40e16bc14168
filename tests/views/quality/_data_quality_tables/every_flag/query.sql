SELECT run_id, rank, step, flag, severity, evidence FROM _data_quality_tables

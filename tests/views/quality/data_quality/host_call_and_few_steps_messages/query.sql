SELECT rank, step, flag, message FROM data_quality

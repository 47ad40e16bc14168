SELECT rank, step, flag, message FROM critical_path_flags

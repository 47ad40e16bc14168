SELECT rank, step, flag, message FROM step_flags

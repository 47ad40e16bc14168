SELECT run_id, rank, step, seq, kind, category, name, start_ns, dur_ns, kernel_id, op_id, stream, edge
FROM critical_path
ORDER BY run_id, rank, step, seq

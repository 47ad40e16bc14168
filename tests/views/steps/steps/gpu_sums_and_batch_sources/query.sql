SELECT run_id, rank, step, wall_ns, gpu_start_ns, gpu_end_ns, gpu_span_ns, gpu_busy_ns, compute_ns,
       exposed_comm_ns, exposed_memory_ns, idle_ns, activities, gemm_ns, communication_ns, other_ns,
       batch_size, tokens, batch_source
FROM steps ORDER BY run_id, rank, step

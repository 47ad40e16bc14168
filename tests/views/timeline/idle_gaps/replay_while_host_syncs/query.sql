SELECT scope, stream, step, gap_start_ns, gap_end_ns, gap_ns, next_kernel_id, class, wait_ns, host_ns, queued_ns,
       hta_class, offset_in_step_ns
FROM idle_gaps ORDER BY scope, stream, gap_start_ns

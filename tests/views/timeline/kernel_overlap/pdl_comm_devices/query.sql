SELECT kernel_id, exclusive_ns, stream_exclusive_ns, hidden_ns, hidden_under_compute_ns, exclusive_ratio, hidden_ratio
FROM kernel_overlap ORDER BY kernel_id

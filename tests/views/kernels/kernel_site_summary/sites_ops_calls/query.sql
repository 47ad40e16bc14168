SELECT run_id, phase, name, site, site_rank, gpu_time_ns, launches, site_share, cpu_op, launch_call
FROM kernel_site_summary
ORDER BY name, site_rank

SELECT kernel_id, file, line, function, site, site_class, plumbing_frames, inner_site, module_path, module,
       site_source, cpu_op_name, cpu_op_input_dims, capture_match, capture_file
FROM kernel_launch_site
ORDER BY kernel_id

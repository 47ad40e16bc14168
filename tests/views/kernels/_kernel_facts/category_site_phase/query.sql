SELECT kernel_id, kind, name, category, site, site_source, phase, phase_key FROM _kernel_facts ORDER BY kernel_id

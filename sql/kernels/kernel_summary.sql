-- kernel_summary: one row per (run_id, phase, kernel name): where the GPU time went, by kernel.
-- Columns:
--   run_id, phase            VARCHAR  the run and phase
--   name                     VARCHAR  activity name (kernel symbol or `Memcpy ...`)
--   kind                     VARCHAR  kernel, memcpy or memset
--   category                 VARCHAR  its category (kernel_category)
--   gpu_time_ns              HUGEINT  sum of its durations (all ranks, streams)
--   share                    DOUBLE  gpu_time_ns / the phase's total GPU time
--   launches                 BIGINT  number of activities
--   mean_ns, median_ns, p90_ns, p99_ns, min_ns, max_ns   DOUBLE, DOUBLE, DOUBLE, DOUBLE, BIGINT, BIGINT
--                            duration statistics (continuous quantiles)
--   python_site              VARCHAR  the launch site with the most GPU time of this kernel ('file(line):
--                            function')
--   python_site_share        DOUBLE  that site's share of the kernel's GPU time
--   second_site              VARCHAR  the next site by time (NULL when only one)
--   launch_call              VARCHAR  the most common launching call (cudaLaunchKernel, cudaGraphLaunch, ...)
--   ranks                    BIGINT  on how many ranks it ran
-- materialized: per_run   rows kept per run (warehouse/derived.py: `tracehouse derive`)
CREATE OR REPLACE VIEW kernel_summary AS
WITH facts AS (
    SELECT run_id, phase_key AS phase, name, kind, category, dur_ns, site, launch_call, rank FROM _kernel_facts
),
per_kernel AS (
    SELECT run_id, phase, name, any_value(kind) AS kind, any_value(category) AS category,
           sum(dur_ns) AS gpu_time_ns, count(*) AS launches,
           avg(dur_ns) AS mean_ns, quantile_cont(dur_ns, 0.5) AS median_ns,
           quantile_cont(dur_ns, 0.9) AS p90_ns, quantile_cont(dur_ns, 0.99) AS p99_ns,
           min(dur_ns) AS min_ns, max(dur_ns) AS max_ns, count(DISTINCT rank) AS ranks
    FROM facts
    GROUP BY run_id, phase, name
),
sites AS (
    SELECT run_id, phase, name, site, sum(dur_ns) AS site_ns,
           row_number() OVER (PARTITION BY run_id, phase, name ORDER BY sum(dur_ns) DESC, site) AS site_rank
    FROM facts WHERE site IS NOT NULL
    GROUP BY run_id, phase, name, site
),
calls AS (
    SELECT run_id, phase, name, launch_call,
           row_number() OVER (PARTITION BY run_id, phase, name ORDER BY count(*) DESC, launch_call) AS call_rank
    FROM facts WHERE launch_call IS NOT NULL
    GROUP BY run_id, phase, name, launch_call
)
SELECT
    k.run_id, k.phase, k.name, k.kind, k.category, k.gpu_time_ns,
    CASE WHEN sum(k.gpu_time_ns) OVER (PARTITION BY k.run_id, k.phase) > 0
         THEN k.gpu_time_ns / sum(k.gpu_time_ns) OVER (PARTITION BY k.run_id, k.phase) END AS share,
    k.launches, k.mean_ns, k.median_ns, k.p90_ns, k.p99_ns, k.min_ns, k.max_ns,
    s1.site AS python_site,
    CASE WHEN k.gpu_time_ns > 0 THEN s1.site_ns / k.gpu_time_ns END AS python_site_share,
    s2.site AS second_site,
    c.launch_call,
    k.ranks
FROM per_kernel AS k
LEFT JOIN sites AS s1 ON s1.run_id = k.run_id AND s1.phase = k.phase AND s1.name = k.name AND s1.site_rank = 1
LEFT JOIN sites AS s2 ON s2.run_id = k.run_id AND s2.phase = k.phase AND s2.name = k.name AND s2.site_rank = 2
LEFT JOIN calls AS c ON c.run_id = k.run_id AND c.phase = k.phase AND c.name = k.name AND c.call_rank = 1;

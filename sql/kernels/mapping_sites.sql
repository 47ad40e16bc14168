-- Mapping/formal mode: Python sites for a run (usually CUDA-graph replays, whose own stack is the replay
-- call) taken from a graph-off run of the same workload. A kernel of the target run takes the site of
-- the mapping run's kernel with the same name and the same ordinal among same-named kernels of its
-- step (its n-th launch in the step); across the mapping run's steps and ranks the most common site
-- for (name, ordinal) wins. One row per (phase, name) of the target run: its top mapped site, that
-- site's share of the kernel's GPU time, and the share of the kernel's time that found a mapping.
-- Parameters: $target, $mapping (run ids).
WITH target AS (
    SELECT phase_key AS phase, name, dur_ns,
           row_number() OVER (PARTITION BY rank, step, name ORDER BY start_ns, kernel_id) AS ordinal
    FROM _kernel_facts WHERE run_id = $target
),
mapping AS (
    SELECT name, site,
           row_number() OVER (PARTITION BY rank, step, name ORDER BY start_ns, kernel_id) AS ordinal
    FROM _kernel_facts WHERE run_id = $mapping
),
mapped_site AS (
    SELECT name, ordinal, site
    FROM (SELECT name, ordinal, site, row_number() OVER (PARTITION BY name, ordinal ORDER BY count(*) DESC, site) AS r
          FROM mapping WHERE site IS NOT NULL GROUP BY name, ordinal, site)
    WHERE r = 1
),
joined AS (
    SELECT t.phase, t.name, t.dur_ns, m.site FROM target AS t
    LEFT JOIN mapped_site AS m ON m.name = t.name AND m.ordinal = t.ordinal
),
per_site AS (
    SELECT phase, name, site, sum(dur_ns) AS ns,
           row_number() OVER (PARTITION BY phase, name ORDER BY sum(dur_ns) DESC, site) AS r
    FROM joined WHERE site IS NOT NULL GROUP BY phase, name, site
),
totals AS (
    SELECT phase, name, sum(dur_ns) AS ns, sum(dur_ns) FILTER (WHERE site IS NOT NULL) AS mapped_ns
    FROM joined GROUP BY phase, name
)
SELECT t.phase, t.name, s.site, s.ns / t.ns AS site_share, coalesce(t.mapped_ns, 0) / t.ns AS mapped_share
FROM totals AS t LEFT JOIN per_site AS s ON s.phase = t.phase AND s.name = t.name AND s.r = 1
WHERE t.ns > 0

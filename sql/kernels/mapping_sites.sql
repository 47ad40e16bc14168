-- mapping_sites: mapping/formal mode: Python sites for a run (usually CUDA-graph replays, whose own stack
-- is the replay call) taken from a graph-off run of the same workload. One row per (target_run,
-- mapping_run, phase, name) for every two different runs: a kernel of the target run takes the site of the
-- mapping run's kernel with the same name and the same ordinal among same-named kernels of its step (its
-- n-th launch in the step, per rank); across the mapping run's steps and ranks the most common site for
-- (name, ordinal) wins (ties: the first site in text order). A row says the (phase, name)'s top mapped
-- site, that site's share of the kernel's GPU time, and the share of the kernel's time that found a
-- mapping. Rows only for names with GPU time. Ask for one pair (`WHERE target_run = ? AND mapping_run =
-- ?`, on a connection focused on the two runs: `tracehouse report --mapping-run`).
-- Columns:
--   target_run     VARCHAR  the run whose kernels are located (runs.run_id)
--   mapping_run    VARCHAR  the graph-off run whose sites are borrowed
--   phase, name    VARCHAR  the target run's kernel (_kernel_facts.phase_key, name)
--   site           VARCHAR  its most common mapped site by GPU time (NULL: none found)
--   site_share     DOUBLE  that site's share of the kernel's GPU time (NULL: none found)
--   mapped_share   DOUBLE  the share of the kernel's GPU time that found a mapped site (0..1)
CREATE OR REPLACE VIEW mapping_sites AS
-- each view it reads is read once (a CTE): DuckDB binds a view again at every reference
WITH numbered AS (
    SELECT run_id, phase_key, name, dur_ns, site,
           row_number() OVER (PARTITION BY run_id, rank, step, name ORDER BY start_ns, kernel_id) AS ordinal
    FROM _kernel_facts
),
target AS (
    SELECT run_id AS target_run, phase_key AS phase, name, dur_ns, ordinal FROM numbered
),
mapping AS (
    SELECT run_id AS mapping_run, name, site, ordinal FROM numbered
),
mapped_site AS (
    SELECT mapping_run, name, ordinal, site
    FROM (SELECT mapping_run, name, ordinal, site,
                 row_number() OVER (PARTITION BY mapping_run, name, ordinal ORDER BY count(*) DESC, site) AS r
          FROM mapping WHERE site IS NOT NULL GROUP BY mapping_run, name, ordinal, site)
    WHERE r = 1
),
joined AS (
    SELECT t.target_run, p.run_id AS mapping_run, t.phase, t.name, t.dur_ns, m.site
    FROM target AS t
    JOIN runs AS p ON p.run_id <> t.target_run
    LEFT JOIN mapped_site AS m ON m.mapping_run = p.run_id AND m.name = t.name AND m.ordinal = t.ordinal
),
per_site AS (
    SELECT target_run, mapping_run, phase, name, site, sum(dur_ns) AS ns,
           row_number() OVER (PARTITION BY target_run, mapping_run, phase, name ORDER BY sum(dur_ns) DESC, site) AS r
    FROM joined WHERE site IS NOT NULL GROUP BY target_run, mapping_run, phase, name, site
),
totals AS (
    SELECT target_run, mapping_run, phase, name, sum(dur_ns) AS ns,
           sum(dur_ns) FILTER (WHERE site IS NOT NULL) AS mapped_ns
    FROM joined GROUP BY target_run, mapping_run, phase, name
)
SELECT t.target_run, t.mapping_run, t.phase, t.name, s.site, s.ns / t.ns AS site_share,
       coalesce(t.mapped_ns, 0) / t.ns AS mapped_share
FROM totals AS t
LEFT JOIN per_site AS s ON s.target_run = t.target_run AND s.mapping_run = t.mapping_run AND s.phase = t.phase
                       AND s.name = t.name AND s.r = 1
WHERE t.ns > 0;

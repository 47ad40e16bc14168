-- kernel_site_summary: one row per (run_id, phase, kernel name, launch site): how a kernel's GPU time splits
-- over the Python lines that launched it, and which host op and launch call launched it from each (the
-- triage view's "Python location (site share)" and "CPU op": `tracehouse report --format triage`).
-- The site is the activity's launch site (kernel_launch_site.site, as _kernel_facts.site); the activities
-- with no known site form one row of their own, site NULL. The host op is the innermost cpu_op around the
-- launch (kernels.cpu_op_id -> cpu_ops.name); a graph replay has none (its launch call is the graph launch).
-- Columns:
--   run_id, phase, name   VARCHAR  the kernel (phase as _kernel_facts.phase_key: 'unknown' when none)
--   site                  VARCHAR  its launch site 'file(line): function' (NULL: the activities without one)
--   site_rank             BIGINT  1 for the site with the most GPU time of this kernel in the phase, 2 the
--                                 next, ...; ties by site text; the NULL site comes after every known site
--   gpu_time_ns           HUGEINT  GPU time of the kernel's activities launched from this site
--   launches              BIGINT  how many activities those are
--   site_share            DOUBLE  gpu_time_ns / the kernel's GPU time in the phase (all its sites and the
--                                 NULL site; NULL when that is 0); site_rank 1's equals
--                                 kernel_summary.python_site_share when the site is known
--   cpu_op                VARCHAR  the most common launching host op among those activities (ties: name
--                                 order; NULL: none known)
--   launch_call           VARCHAR  the most common launch call among them (cudaLaunchKernel,
--                                 hipGraphLaunch, ...; ties: name order; NULL: none linked)
CREATE OR REPLACE VIEW kernel_site_summary AS
-- each view it reads is read once (a CTE): DuckDB binds a view again at every reference
WITH facts AS (
    SELECT f.run_id, f.phase_key AS phase, f.name, f.site, f.dur_ns, f.launch_call, o.name AS cpu_op
    FROM _kernel_facts AS f
    LEFT JOIN cpu_ops AS o ON o.run_id = f.run_id AND o.rank = f.rank AND o.op_id = f.cpu_op_id
),
per_site AS (
    SELECT run_id, phase, name, site, sum(dur_ns) AS gpu_time_ns, count(*) AS launches
    FROM facts
    GROUP BY run_id, phase, name, site
),
ops AS (
    SELECT run_id, phase, name, site, cpu_op,
           row_number() OVER (PARTITION BY run_id, phase, name, site ORDER BY count(*) DESC, cpu_op) AS op_rank
    FROM facts WHERE cpu_op IS NOT NULL
    GROUP BY run_id, phase, name, site, cpu_op
),
calls AS (
    SELECT run_id, phase, name, site, launch_call,
           row_number() OVER (PARTITION BY run_id, phase, name, site ORDER BY count(*) DESC, launch_call)
               AS call_rank
    FROM facts WHERE launch_call IS NOT NULL
    GROUP BY run_id, phase, name, site, launch_call
)
SELECT
    s.run_id, s.phase, s.name, s.site,
    row_number() OVER (
        PARTITION BY s.run_id, s.phase, s.name
        ORDER BY CASE WHEN s.site IS NULL THEN 1 ELSE 0 END, s.gpu_time_ns DESC, s.site
    ) AS site_rank,
    s.gpu_time_ns,
    s.launches,
    CASE WHEN sum(s.gpu_time_ns) OVER (PARTITION BY s.run_id, s.phase, s.name) > 0
         THEN s.gpu_time_ns / sum(s.gpu_time_ns) OVER (PARTITION BY s.run_id, s.phase, s.name) END AS site_share,
    o.cpu_op,
    c.launch_call
FROM per_site AS s
LEFT JOIN ops AS o
    ON o.run_id = s.run_id AND o.phase = s.phase AND o.name = s.name AND o.site IS NOT DISTINCT FROM s.site
   AND o.op_rank = 1
LEFT JOIN calls AS c
    ON c.run_id = s.run_id AND c.phase = s.phase AND c.name = s.name AND c.site IS NOT DISTINCT FROM s.site
   AND c.call_rank = 1;

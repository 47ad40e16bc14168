-- fusion_match: one row per (run_id, phase, pattern_id) for every pattern of the fusion catalogue
-- (sql/rules/fusion_patterns.csv, tables fusion_patterns / fusion_pattern_steps) that the run shows
-- evidence of. Patterns without evidence have no row.
-- Matching. A GPU activity counts for split step k of a pattern when its name matches the step's regex
-- AND its category (kernel_category) is one of the step's categories; the fused kernel likewise. The
-- category gate keeps evidence specific: a grouped MoE GEMM (category moe) is never evidence for an
-- attention or KV-cache-store step, whatever its name says.
-- Status (first that holds):
--   Confirmed  the split kernels occur adjacent and in order on one stream: activities with consecutive
--              positions on the same (rank, device, stream), ordered by start time, matching steps 1..n
--   Fused      the fused kernel runs in this run and phase (and no adjacent split chain was found)
--   Likely     every split step has a matching activity in the run and phase, but never adjacent
-- Method: the catalogue's regexes run once per distinct (name, category); whatever only counts
-- activities by name (Likely, Fused, the evidence of Likely) is summed from per-name totals, and the
-- adjacent chains come from one ordered pass per stream that puts the next two activities beside each one.
-- Columns:
--   run_id, phase          the run and phase (phase 'unknown' when none); the phase of a chain is the
--                          phase of its first activity
--   pattern_id, pattern_name, pattern_framework   the catalogue entry (framework: sglang, vllm, tensorrt-llm)
--   framework_match        pattern_framework = runs.framework (NULL when the run's framework is neither
--                          of the three, e.g. 'pytorch'); a report may keep only matching rows
--   status                 Confirmed, Fused or Likely (above)
--   occurrences            Confirmed: adjacent chains; Likely: the fewest activities of any step (the
--                          number of complete sets); Fused: launches of the fused kernel
--   related_gpu_time_ns    GPU time of the evidence: Confirmed: the activities in the chains; Likely:
--                          every activity matching a step; Fused: the fused kernel's activities
--   share                  related_gpu_time_ns / the phase's total GPU time (as kernel_summary.share)
--   evidence_1, evidence_2, evidence_3   per step, the matching kernel name with the most GPU time among
--                          the evidence (NULL for steps the pattern does not have, and for Fused rows)
--   evidence               the evidence kernel names joined with ' -> ' (Fused: the fused kernel's name)
--   fused_kernel           the fused kernel's name with the most GPU time when it runs, else NULL
--   fused_gpu_time_ns, fused_launches   the fused kernel's time and launches (0 when it does not run)
--   python_site            the current Python location: top launch site (kernel_summary.python_site) of
--                          evidence_1, or of the fused kernel for Fused rows
--   python_site_share      that site's share of that kernel's GPU time
--   source_path, rationale, reference, catalog_version   from the catalogue
CREATE OR REPLACE VIEW fusion_match AS
WITH per_name AS (
    -- launches and GPU time per name (and category) in each run and phase
    SELECT run_id, phase_key AS phase, name, category, count(*) AS launches, sum(dur_ns) AS time_ns
    FROM _kernel_facts
    GROUP BY run_id, phase_key, name, category
),
phase_total AS (
    SELECT run_id, phase, sum(time_ns) AS total_ns FROM per_name GROUP BY run_id, phase
),
names AS (
    SELECT DISTINCT name, category FROM per_name
),
step_names AS (
    SELECT s.pattern_id, s.step, n.name
    FROM fusion_pattern_steps AS s
    JOIN names AS n
      ON ';' || s.categories || ';' LIKE '%;' || n.category || ';%'
     AND regexp_matches(n.name, s.pattern)
),
fused_names AS (
    SELECT p.pattern_id, n.name
    FROM fusion_patterns AS p
    JOIN names AS n
      ON ';' || p.fused_categories || ';' LIKE '%;' || n.category || ';%'
     AND regexp_matches(n.name, p.fused_pattern)
),
sequenced AS (
    -- each activity with the next two on its stream (rank, device, stream, in start order)
    SELECT run_id, rank, kernel_id, phase_key AS phase, name, dur_ns,
           lead(kernel_id, 1) OVER w AS kernel_id_2, lead(name, 1) OVER w AS name_2, lead(dur_ns, 1) OVER w AS dur_ns_2,
           lead(kernel_id, 2) OVER w AS kernel_id_3, lead(name, 2) OVER w AS name_3, lead(dur_ns, 2) OVER w AS dur_ns_3
    FROM _kernel_facts
    WINDOW w AS (PARTITION BY run_id, rank, device, stream ORDER BY start_ns, kernel_id)
),
chains AS (
    -- complete chains: an activity matching step 1 followed on its stream by activities matching the
    -- next steps, in order (one row per match of its first activity); the chain's phase is its first
    -- activity's
    SELECT a.run_id, a.rank, a.phase, s1.pattern_id, p.n_splits,
           a.kernel_id AS kernel_id_1, a.name AS name_1, a.dur_ns AS dur_ns_1,
           a.kernel_id_2, a.name_2, a.dur_ns_2, a.kernel_id_3, a.name_3, a.dur_ns_3
    FROM sequenced AS a
    JOIN step_names AS s1 ON s1.step = 1 AND s1.name = a.name
    JOIN fusion_patterns AS p ON p.pattern_id = s1.pattern_id
    JOIN (SELECT DISTINCT pattern_id, step, name FROM step_names) AS s2
      ON s2.pattern_id = s1.pattern_id AND s2.step = 2 AND s2.name = a.name_2
    LEFT JOIN (SELECT DISTINCT pattern_id, step, name FROM step_names) AS s3
      ON s3.pattern_id = s1.pattern_id AND s3.step = 3 AND s3.name = a.name_3
    WHERE p.n_splits = 2 OR s3.name IS NOT NULL
),
chain_acts AS (
    -- the activities of complete chains, once each (a kernel can end one chain and start the next)
    SELECT DISTINCT run_id, chain_phase, pattern_id, step, rank, kernel_id, name, dur_ns
    FROM (
        SELECT run_id, phase AS chain_phase, pattern_id, 1 AS step, rank, kernel_id_1 AS kernel_id, name_1 AS name,
               dur_ns_1 AS dur_ns
        FROM chains
        UNION ALL
        SELECT run_id, phase, pattern_id, 2, rank, kernel_id_2, name_2, dur_ns_2 FROM chains
        UNION ALL
        SELECT run_id, phase, pattern_id, 3, rank, kernel_id_3, name_3, dur_ns_3 FROM chains WHERE n_splits >= 3
    ) AS members
),
confirmed AS (
    SELECT run_id, phase, pattern_id, count(*) AS chains
    FROM chains
    GROUP BY run_id, phase, pattern_id
),
confirmed_time AS (
    SELECT run_id, chain_phase AS phase, pattern_id, sum(dur_ns) AS time_ns
    FROM (SELECT DISTINCT run_id, chain_phase, pattern_id, rank, kernel_id, dur_ns FROM chain_acts) AS x
    GROUP BY run_id, chain_phase, pattern_id
),
step_presence AS (
    SELECT n.run_id, n.phase, s.pattern_id, s.step, CAST(sum(n.launches) AS BIGINT) AS acts
    FROM per_name AS n
    JOIN step_names AS s ON s.name = n.name
    GROUP BY n.run_id, n.phase, s.pattern_id, s.step
),
likely AS (
    SELECT s.run_id, s.phase, s.pattern_id, min(s.acts) AS sets
    FROM step_presence AS s
    JOIN fusion_patterns AS p ON p.pattern_id = s.pattern_id
    GROUP BY s.run_id, s.phase, s.pattern_id
    HAVING count(DISTINCT s.step) = max(p.n_splits)
),
likely_time AS (
    -- every activity that matches a step, once
    SELECT n.run_id, n.phase, m.pattern_id, sum(n.time_ns) AS time_ns
    FROM per_name AS n
    JOIN (SELECT DISTINCT pattern_id, name FROM step_names) AS m ON m.name = n.name
    GROUP BY n.run_id, n.phase, m.pattern_id
),
fused_acts AS (
    SELECT n.run_id, n.phase, f.pattern_id, n.name, sum(n.launches) AS launches, sum(n.time_ns) AS time_ns
    FROM per_name AS n
    JOIN fused_names AS f ON f.name = n.name
    GROUP BY n.run_id, n.phase, f.pattern_id, n.name
),
fused AS (
    SELECT run_id, phase, pattern_id, sum(launches) AS launches, sum(time_ns) AS time_ns
    FROM fused_acts
    GROUP BY run_id, phase, pattern_id
),
fused_top AS (
    SELECT run_id, phase, pattern_id, name,
           row_number() OVER (PARTITION BY run_id, phase, pattern_id ORDER BY time_ns DESC, name) AS rn
    FROM fused_acts
),
keys AS (
    SELECT run_id, phase, pattern_id FROM confirmed
    UNION
    SELECT run_id, phase, pattern_id FROM likely
    UNION
    SELECT run_id, phase, pattern_id FROM fused
),
decided AS (
    SELECT k.run_id, k.phase, k.pattern_id,
           CASE WHEN c.chains > 0 THEN 'Confirmed' WHEN f.launches > 0 THEN 'Fused' ELSE 'Likely' END AS status,
           c.chains, l.sets, f.launches AS fused_launches, f.time_ns AS fused_time_ns,
           ct.time_ns AS confirmed_time_ns, lt.time_ns AS likely_time_ns
    FROM keys AS k
    LEFT JOIN confirmed AS c ON c.run_id = k.run_id AND c.phase = k.phase AND c.pattern_id = k.pattern_id
    LEFT JOIN confirmed_time AS ct ON ct.run_id = k.run_id AND ct.phase = k.phase AND ct.pattern_id = k.pattern_id
    LEFT JOIN likely AS l ON l.run_id = k.run_id AND l.phase = k.phase AND l.pattern_id = k.pattern_id
    LEFT JOIN likely_time AS lt ON lt.run_id = k.run_id AND lt.phase = k.phase AND lt.pattern_id = k.pattern_id
    LEFT JOIN fused AS f ON f.run_id = k.run_id AND f.phase = k.phase AND f.pattern_id = k.pattern_id
),
evidence_pool AS (
    -- the activities that are the evidence of the decided status, per step
    SELECT d.run_id, d.phase, d.pattern_id, x.step, x.name, sum(x.dur_ns) AS time_ns
    FROM decided AS d
    JOIN chain_acts AS x ON x.run_id = d.run_id AND x.chain_phase = d.phase AND x.pattern_id = d.pattern_id
    WHERE d.status = 'Confirmed'
    GROUP BY d.run_id, d.phase, d.pattern_id, x.step, x.name
    UNION ALL
    SELECT d.run_id, d.phase, d.pattern_id, s.step, n.name, sum(n.time_ns)
    FROM decided AS d
    JOIN per_name AS n ON n.run_id = d.run_id AND n.phase = d.phase
    JOIN step_names AS s ON s.pattern_id = d.pattern_id AND s.name = n.name
    WHERE d.status = 'Likely'
    GROUP BY d.run_id, d.phase, d.pattern_id, s.step, n.name
),
evidence_ranked AS (
    SELECT run_id, phase, pattern_id, step, name,
           row_number() OVER (PARTITION BY run_id, phase, pattern_id, step ORDER BY time_ns DESC, name) AS rn
    FROM evidence_pool
),
evidence AS (
    SELECT run_id, phase, pattern_id,
           max(CASE WHEN step = 1 THEN name END) AS evidence_1,
           max(CASE WHEN step = 2 THEN name END) AS evidence_2,
           max(CASE WHEN step = 3 THEN name END) AS evidence_3
    FROM evidence_ranked
    WHERE rn = 1
    GROUP BY run_id, phase, pattern_id
)
SELECT
    d.run_id,
    d.phase,
    d.pattern_id,
    p.name AS pattern_name,
    p.framework AS pattern_framework,
    CASE WHEN r.framework IN ('sglang', 'vllm', 'tensorrt-llm') THEN p.framework = r.framework END AS framework_match,
    d.status,
    CASE d.status WHEN 'Confirmed' THEN d.chains WHEN 'Fused' THEN d.fused_launches ELSE d.sets END AS occurrences,
    CASE d.status WHEN 'Confirmed' THEN d.confirmed_time_ns WHEN 'Fused' THEN d.fused_time_ns
                  ELSE d.likely_time_ns END AS related_gpu_time_ns,
    CASE WHEN t.total_ns > 0 THEN
        CASE d.status WHEN 'Confirmed' THEN d.confirmed_time_ns WHEN 'Fused' THEN d.fused_time_ns
                      ELSE d.likely_time_ns END / t.total_ns
    END AS share,
    e.evidence_1,
    e.evidence_2,
    e.evidence_3,
    CASE WHEN d.status = 'Fused' THEN ft.name ELSE concat_ws(' -> ', e.evidence_1, e.evidence_2, e.evidence_3) END
        AS evidence,
    ft.name AS fused_kernel,
    coalesce(d.fused_time_ns, 0) AS fused_gpu_time_ns,
    coalesce(d.fused_launches, 0) AS fused_launches,
    ks.python_site,
    ks.python_site_share,
    p.source_path,
    p.rationale,
    p.reference,
    p.catalog_version
FROM decided AS d
JOIN fusion_patterns AS p ON p.pattern_id = d.pattern_id
JOIN phase_total AS t ON t.run_id = d.run_id AND t.phase = d.phase
LEFT JOIN runs AS r ON r.run_id = d.run_id
LEFT JOIN evidence AS e ON e.run_id = d.run_id AND e.phase = d.phase AND e.pattern_id = d.pattern_id
LEFT JOIN fused_top AS ft ON ft.run_id = d.run_id AND ft.phase = d.phase AND ft.pattern_id = d.pattern_id AND ft.rn = 1
LEFT JOIN kernel_summary AS ks
  ON ks.run_id = d.run_id AND ks.phase = d.phase
 AND ks.name = CASE WHEN d.status = 'Fused' THEN ft.name ELSE e.evidence_1 END

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
WITH acts AS (
    SELECT run_id, rank, device, stream, kernel_id, phase_key AS phase, name, category, dur_ns,
           row_number() OVER (PARTITION BY run_id, rank, device, stream ORDER BY start_ns, kernel_id) AS seq
    FROM _kernel_facts
),
phase_total AS (
    SELECT run_id, phase, sum(dur_ns) AS total_ns FROM acts GROUP BY run_id, phase
),
names AS (
    SELECT DISTINCT name, category FROM acts
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
hits AS (
    SELECT a.run_id, a.rank, a.device, a.stream, a.seq, a.kernel_id, a.phase, a.name, a.dur_ns,
           sn.pattern_id, sn.step
    FROM acts AS a
    JOIN step_names AS sn ON sn.name = a.name
),
chain_members AS (
    -- for every activity h1 that matches step 1: the activity k-1 places later on its stream, if it
    -- matches step k
    SELECT h1.run_id, h1.rank, h1.device, h1.stream, h1.seq AS start_seq, h1.phase, h1.pattern_id,
           h.step, h.kernel_id, h.name, h.dur_ns
    FROM hits AS h1
    JOIN hits AS h
      ON h.run_id = h1.run_id AND h.rank = h1.rank AND h.device = h1.device AND h.stream = h1.stream
     AND h.pattern_id = h1.pattern_id AND h.seq - h.step + 1 = h1.seq
    WHERE h1.step = 1
),
complete_chains AS (
    SELECT c.run_id, c.rank, c.device, c.stream, c.start_seq, c.pattern_id
    FROM chain_members AS c
    JOIN fusion_patterns AS p ON p.pattern_id = c.pattern_id
    GROUP BY c.run_id, c.rank, c.device, c.stream, c.start_seq, c.pattern_id
    HAVING count(DISTINCT c.step) = max(p.n_splits)
),
chain_acts AS (
    -- the activities of complete chains, once each (a kernel can end one chain and start the next)
    SELECT DISTINCT m.run_id, m.phase AS chain_phase, m.pattern_id, m.step, m.rank, m.kernel_id, m.name, m.dur_ns
    FROM chain_members AS m
    JOIN complete_chains AS c
      ON c.run_id = m.run_id AND c.rank = m.rank AND c.device = m.device AND c.stream = m.stream
     AND c.start_seq = m.start_seq AND c.pattern_id = m.pattern_id
),
confirmed AS (
    SELECT c.run_id, m.phase, c.pattern_id, count(*) AS chains
    FROM complete_chains AS c
    JOIN chain_members AS m
      ON m.run_id = c.run_id AND m.rank = c.rank AND m.device = c.device AND m.stream = c.stream
     AND m.start_seq = c.start_seq AND m.pattern_id = c.pattern_id AND m.step = 1
    GROUP BY c.run_id, m.phase, c.pattern_id
),
confirmed_time AS (
    SELECT run_id, chain_phase AS phase, pattern_id, sum(dur_ns) AS time_ns
    FROM (SELECT DISTINCT run_id, chain_phase, pattern_id, rank, kernel_id, dur_ns FROM chain_acts) AS x
    GROUP BY run_id, chain_phase, pattern_id
),
step_presence AS (
    SELECT run_id, phase, pattern_id, step, count(*) AS acts
    FROM hits
    GROUP BY run_id, phase, pattern_id, step
),
likely AS (
    SELECT s.run_id, s.phase, s.pattern_id, min(s.acts) AS sets
    FROM step_presence AS s
    JOIN fusion_patterns AS p ON p.pattern_id = s.pattern_id
    GROUP BY s.run_id, s.phase, s.pattern_id
    HAVING count(DISTINCT s.step) = max(p.n_splits)
),
likely_time AS (
    SELECT run_id, phase, pattern_id, sum(dur_ns) AS time_ns
    FROM (SELECT DISTINCT run_id, phase, pattern_id, rank, kernel_id, dur_ns FROM hits) AS x
    GROUP BY run_id, phase, pattern_id
),
fused_acts AS (
    SELECT a.run_id, a.phase, f.pattern_id, a.name, count(*) AS launches, sum(a.dur_ns) AS time_ns
    FROM acts AS a
    JOIN fused_names AS f ON f.name = a.name
    GROUP BY a.run_id, a.phase, f.pattern_id, a.name
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
    SELECT d.run_id, d.phase, d.pattern_id, h.step, h.name, sum(h.dur_ns)
    FROM decided AS d
    JOIN hits AS h ON h.run_id = d.run_id AND h.phase = d.phase AND h.pattern_id = d.pattern_id
    WHERE d.status = 'Likely'
    GROUP BY d.run_id, d.phase, d.pattern_id, h.step, h.name
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

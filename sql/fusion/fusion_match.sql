-- fusion_match: one row per (run_id, phase, pattern) of the fusion catalogue (sql/rules/fusion_patterns.csv,
-- tables fusion_patterns / fusion_pattern_steps) that the run shows evidence of. No evidence, no row.
-- Evidence is the pattern's OWN op sequence, never the mere presence of kernels somewhere in the run.
-- Chains (sql/fusion/_fusion_chains.sql): activities matching the pattern's split steps IN ORDER on one stream,
--   inside one step and one graph replay (never across a graph boundary), at most 2 other activities
--   between two steps, each step's kernel name + category and, where the step names one, its launching
--   host op; the pattern's shape rule on the ops' Input Dims (same_input, gate_product, logits_2d,
--   same_input_2d) and
--   its requires_category hold. Adjacent: nothing between. The rules are that file's header.
-- Status (first that holds):
--   Confirmed  at least one adjacent chain
--   Fused      the fused kernel (name regex AND fused_categories) runs in this run and phase
--   Likely     at least one chain, none adjacent (up to 2 activities between its steps)
-- Vendor. A pattern names the vendor whose GPUs run its fused kernel (fusion_patterns.vendor: nvidia, amd,
--   any); on a run of the other vendor (_run_vendor: by device name, else by launch calls) it gives no row,
--   so a CUDA-only kernel is never suggested on AMD, nor an AITER (ROCm) kernel on NVIDIA. A run whose
--   vendor is unknown keeps every pattern.
-- What the fusion removes (the share). The fused kernel still does the work of some steps (the all-reduce
--   of an all-reduce + RMSNorm fusion, the RoPE of RoPE + KV store); it removes the others
--   (fusion_pattern_steps.removed, column `removes` of the catalogue). Model: the removable time of a row
--   is the GPU time of the removed steps' activities of its evidence chains (each activity once) plus, on
--   adjacent chains, the idle time on the stream between the chain's steps (gap_ns_1, gap_ns_2 of
--   _fusion_chains: one kernel has no launch gap inside). The kept steps' time is assumed unchanged (the
--   fused kernel costs what its kept steps cost). Fused rows remove nothing (0). fusion_removable lists
--   the activities and gaps behind each row's figure (the input of a what-if replay).
-- Framework. On a run whose framework (runs.framework, see ingest detect_framework) is sglang, vllm or
--   tensorrt-llm, only that framework's patterns have rows (row_scope 'framework'). On any other run
--   (pytorch, ...) patterns sharing a pattern_key give ONE row (row_scope 'generic', pattern_framework
--   'generic'): the pattern with the best status (Confirmed, Fused, Likely), then the most related GPU
--   time, then the first in the catalogue; its source_path lists every framework's implementation.
-- Columns:
--   run_id, phase          VARCHAR  the run and phase (phase 'unknown' when none); a chain's phase is its
--                          first activity's
--   pattern_id, pattern_name, pattern_key   VARCHAR  the catalogue entry, and the key it shares with the
--                          other frameworks' entries for the same op sequence
--   pattern_framework      VARCHAR  the entry's framework (sglang, vllm, tensorrt-llm); 'generic' on generic
--                            rows
--   row_scope              VARCHAR  'framework' or 'generic' (above)
--   framework_match        BOOLEAN  TRUE on framework rows, NULL on generic rows (never FALSE: no such row)
--   status                 VARCHAR  Confirmed, Fused or Likely (above)
--   occurrences            HUGEINT  Confirmed: adjacent chains; Likely: chains; Fused: launches of the fused
--                            kernel
--   chains_adjacent, chains_near   BIGINT  adjacent chains, and chains with activities between their steps
--   related_gpu_time_ns    HUGEINT  GPU time of the evidence: Confirmed: the activities of the adjacent
--                          chains; Likely: the activities of the chains (each once); Fused: the fused
--                          kernel's
--   removable_gpu_time_ns  HUGEINT  what the fusion would remove (above): the removed steps' GPU time plus
--                          the launch gaps inside adjacent chains; 0 on Fused rows
--   removable_gap_ns       HUGEINT  the launch-gap part of removable_gpu_time_ns
--   share                  DOUBLE  removable_gpu_time_ns / the phase's total GPU time (as kernel_summary.share):
--                          the share of the phase the fusion could save, not the evidence's whole time
--   related_share          DOUBLE  related_gpu_time_ns / the phase's total GPU time
--   evidence_1, evidence_2, evidence_3   VARCHAR  per step, the kernel name with the most GPU time among the
--                          evidence (NULL for steps the pattern does not have, and for Fused rows)
--   evidence               VARCHAR  the evidence kernel names joined with ' -> ' (Fused: the fused kernel's
--                            name)
--   evidence_ops           VARCHAR  per step, the most frequent launching op and its Input Dims among the
--                          evidence, joined with ' -> ' (e.g. 'aten::silu [[16,559,2816]] -> aten::mul
--                          [[16,559,2816],[16,559,2816]]'); NULL when no launching op is known
--   evidence_sequence      VARCHAR  the whole evidence, uncut: per step 'kernel ×launches (op dims)' joined
--                          with ' -> ', then the chain counts ('; N adjacent, M near chain(s)'); Fused: every
--                          fused kernel 'name ×launches', joined with ' + ' (most GPU time first)
--   evidence_basis         VARCHAR  'ops' (every counted chain had its launching ops; shapes checked where
--                          the pattern has a rule), 'ops and kernel names' (some had), 'kernel names' (none
--                          had, e.g. graph replays: judged by kernel names and order alone); NULL for Fused
--   fused_kernel           VARCHAR  the fused kernel's name with the most GPU time when it runs, else NULL
--   fused_gpu_time_ns, fused_launches   HUGEINT  the fused kernel's time and launches (0 when it does not
--                            run)
--   python_site            VARCHAR  the current Python location: top launch site (kernel_summary.python_site)
--                          of evidence_1, or of the fused kernel for Fused rows
--   python_site_share      DOUBLE  that site's share of that kernel's GPU time
--   source_path            VARCHAR  where the fused implementation lives (generic rows: 'framework: path;
--                            ...')
--   rationale, reference   VARCHAR  from the catalogue
--   pattern_vendor         VARCHAR  the pattern's vendor (nvidia, amd or any)
--   run_vendor             VARCHAR  the run's vendor (_run_vendor: nvidia, amd, NULL unknown)
--   catalog_version        VARCHAR  from the catalogue
-- materialized: per_run   rows kept per run (warehouse/derived.py: `tracehouse derive`)
CREATE OR REPLACE VIEW fusion_match AS
-- each view it reads is read once (a CTE): DuckDB binds a view again at every reference
WITH all_fusion_chains AS (SELECT * FROM _fusion_chains),
run_vendor AS (SELECT * FROM _run_vendor),
per_name AS (
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
fused_names AS (
    SELECT p.pattern_id, n.name, n.category
    FROM fusion_patterns AS p
    JOIN names AS n
      ON ';' || p.fused_categories || ';' LIKE '%;' || n.category || ';%'
     AND regexp_matches(n.name, p.fused_pattern)
),
chain_stats AS (
    SELECT run_id, phase, pattern_id,
           count(*) FILTER (WHERE adjacent) AS chains_adjacent,
           count(*) FILTER (WHERE NOT adjacent) AS chains_near,
           bool_and(ops_known) FILTER (WHERE adjacent) AS ops_known_adjacent,
           bool_and(ops_known) AS ops_known_all,
           bool_or(ops_known) FILTER (WHERE adjacent) AS some_ops_adjacent,
           bool_or(ops_known) AS some_ops_all
    FROM all_fusion_chains
    GROUP BY run_id, phase, pattern_id
),
fused_acts AS (
    SELECT n.run_id, n.phase, f.pattern_id, n.name, sum(n.launches) AS launches, sum(n.time_ns) AS time_ns
    FROM per_name AS n
    -- the activity's own category (a name's can depend on its launching op): name regex AND fused_categories
    JOIN fused_names AS f ON f.name = n.name AND f.category = n.category
    GROUP BY n.run_id, n.phase, f.pattern_id, n.name
),
fused AS (
    SELECT run_id, phase, pattern_id, sum(launches) AS launches, sum(time_ns) AS time_ns,
           string_agg(name || ' ×' || CAST(launches AS VARCHAR), ' + ' ORDER BY time_ns DESC, name) AS names_text
    FROM fused_acts
    GROUP BY run_id, phase, pattern_id
),
fused_top AS (
    SELECT run_id, phase, pattern_id, name, launches,
           row_number() OVER (PARTITION BY run_id, phase, pattern_id ORDER BY time_ns DESC, name) AS rn
    FROM fused_acts
),
keys AS (
    SELECT run_id, phase, pattern_id FROM chain_stats
    UNION
    SELECT run_id, phase, pattern_id FROM fused
),
decided AS (
    SELECT k.run_id, k.phase, k.pattern_id,
           CASE WHEN coalesce(c.chains_adjacent, 0) > 0 THEN 'Confirmed'
                WHEN coalesce(f.launches, 0) > 0 THEN 'Fused' ELSE 'Likely' END AS status,
           coalesce(c.chains_adjacent, 0) AS chains_adjacent, coalesce(c.chains_near, 0) AS chains_near,
           c.ops_known_adjacent, c.ops_known_all, c.some_ops_adjacent, c.some_ops_all,
           f.launches AS fused_launches, f.time_ns AS fused_time_ns, f.names_text AS fused_text
    FROM keys AS k
    JOIN fusion_patterns AS p ON p.pattern_id = k.pattern_id
    LEFT JOIN chain_stats AS c ON c.run_id = k.run_id AND c.phase = k.phase AND c.pattern_id = k.pattern_id
    LEFT JOIN fused AS f ON f.run_id = k.run_id AND f.phase = k.phase AND f.pattern_id = k.pattern_id
    -- the vendor gate: a pattern of one vendor gives no row on a run of the other. NOT EXISTS, not a LEFT
    -- JOIN of run_vendor: with that join DuckDB estimated this CTE at ~10^12 rows (a GROUP BY is estimated
    -- at its input's rows), so evidence_chains built its hash table on the chains, wide with their kernel
    -- names, instead of on the few decided rows (a 4 GB trace's fusion_match ran out of 640MB there)
    WHERE NOT EXISTS (
        SELECT 1 FROM run_vendor AS v
        WHERE v.run_id = k.run_id AND v.vendor IS NOT NULL
          AND NOT coalesce(p.vendor = 'any' OR v.vendor = p.vendor, FALSE)
    )
),
evidence_chains AS (
    -- the chains that are the evidence of the decided status (Confirmed: the adjacent ones; Likely: all)
    SELECT c.*
    FROM all_fusion_chains AS c
    JOIN decided AS d ON d.run_id = c.run_id AND d.phase = c.phase AND d.pattern_id = c.pattern_id
    WHERE (d.status = 'Confirmed' AND c.adjacent) OR d.status = 'Likely'
),
evidence_acts AS (
    -- the activities of the evidence chains, per step (a kernel can end one chain and start the next)
    SELECT DISTINCT m.run_id, m.phase, m.pattern_id, m.step, m.rank, m.kernel_id, m.name, m.dur_ns, m.op, m.dims,
           s.removed
    FROM (
        SELECT run_id, phase, pattern_id, 1 AS step, rank, kernel_id_1 AS kernel_id, name_1 AS name,
               dur_ns_1 AS dur_ns, op_1 AS op, dims_1 AS dims
        FROM evidence_chains
        UNION ALL
        SELECT run_id, phase, pattern_id, 2, rank, kernel_id_2, name_2, dur_ns_2, op_2, dims_2 FROM evidence_chains
        UNION ALL
        SELECT run_id, phase, pattern_id, 3, rank, kernel_id_3, name_3, dur_ns_3, op_3, dims_3
        FROM evidence_chains WHERE n_splits = 3
    ) AS m
    JOIN fusion_pattern_steps AS s ON s.pattern_id = m.pattern_id AND s.step = m.step
),
removable AS (
    -- what the fusion would remove: the removed steps' activities (each once) and, on adjacent chains,
    -- the idle time between the chain's steps (one kernel has no gaps inside)
    SELECT run_id, phase, pattern_id, sum(ns) AS removable_ns, sum(ns) FILTER (WHERE kind = 'gap') AS gap_ns
    FROM (
        SELECT DISTINCT run_id, phase, pattern_id, 'kernel' AS kind, rank, kernel_id, dur_ns AS ns
        FROM evidence_acts WHERE removed
        UNION ALL
        SELECT DISTINCT run_id, phase, pattern_id, 'gap', rank, kernel_id_2, gap_ns_1
        FROM evidence_chains WHERE adjacent
        UNION ALL
        SELECT DISTINCT run_id, phase, pattern_id, 'gap', rank, kernel_id_3, gap_ns_2
        FROM evidence_chains WHERE adjacent AND n_splits = 3
    ) AS x
    GROUP BY run_id, phase, pattern_id
),
evidence_time AS (
    SELECT run_id, phase, pattern_id, sum(dur_ns) AS time_ns
    FROM (SELECT DISTINCT run_id, phase, pattern_id, rank, kernel_id, dur_ns FROM evidence_acts) AS x
    GROUP BY run_id, phase, pattern_id
),
evidence_names AS (
    SELECT run_id, phase, pattern_id, step, name, count(*) AS launches,
           row_number() OVER (PARTITION BY run_id, phase, pattern_id, step
                              ORDER BY sum(dur_ns) DESC, name) AS rn
    FROM evidence_acts
    GROUP BY run_id, phase, pattern_id, step, name
),
evidence_opsig AS (
    SELECT run_id, phase, pattern_id, step, op || ' ' || coalesce(dims, '[]') AS sig,
           row_number() OVER (PARTITION BY run_id, phase, pattern_id, step
                              ORDER BY count(*) DESC, op, dims) AS rn
    FROM evidence_acts
    WHERE op IS NOT NULL
    GROUP BY run_id, phase, pattern_id, step, op, dims
),
evidence_steps AS (
    SELECT n.run_id, n.phase, n.pattern_id, n.step, n.name,
           n.name || ' ×' || CAST(t.launches AS VARCHAR) || coalesce(' (' || o.sig || ')', '') AS step_text,
           o.sig
    FROM evidence_names AS n
    JOIN (SELECT run_id, phase, pattern_id, step, count(*) AS launches FROM evidence_acts
          GROUP BY run_id, phase, pattern_id, step) AS t
      ON t.run_id = n.run_id AND t.phase = n.phase AND t.pattern_id = n.pattern_id AND t.step = n.step
    LEFT JOIN evidence_opsig AS o
      ON o.run_id = n.run_id AND o.phase = n.phase AND o.pattern_id = n.pattern_id AND o.step = n.step AND o.rn = 1
    WHERE n.rn = 1
),
evidence AS (
    SELECT run_id, phase, pattern_id,
           max(CASE WHEN step = 1 THEN name END) AS evidence_1,
           max(CASE WHEN step = 2 THEN name END) AS evidence_2,
           max(CASE WHEN step = 3 THEN name END) AS evidence_3,
           max(CASE WHEN step = 1 THEN sig END) AS ops_1,
           max(CASE WHEN step = 2 THEN sig END) AS ops_2,
           max(CASE WHEN step = 3 THEN sig END) AS ops_3,
           max(CASE WHEN step = 1 THEN step_text END) AS text_1,
           max(CASE WHEN step = 2 THEN step_text END) AS text_2,
           max(CASE WHEN step = 3 THEN step_text END) AS text_3
    FROM evidence_steps
    GROUP BY run_id, phase, pattern_id
),
rowed AS (
    -- every decided pattern with its figures, ready for the framework scoping
    SELECT
        d.run_id,
        d.phase,
        d.pattern_id,
        p.name AS pattern_name,
        p.pattern_key,
        p.framework AS entry_framework,
        p.catalog_order,
        r.framework AS run_framework,
        d.status,
        CASE d.status WHEN 'Confirmed' THEN d.chains_adjacent WHEN 'Fused' THEN d.fused_launches
                      ELSE d.chains_near END AS occurrences,
        d.chains_adjacent,
        d.chains_near,
        CASE WHEN d.status = 'Fused' THEN d.fused_time_ns ELSE et.time_ns END AS related_gpu_time_ns,
        coalesce(rm.removable_ns, 0) AS removable_gpu_time_ns,
        coalesce(rm.gap_ns, 0) AS removable_gap_ns,
        p.vendor AS pattern_vendor,
        v.vendor AS run_vendor,
        t.total_ns,
        e.evidence_1, e.evidence_2, e.evidence_3,
        CASE WHEN d.status = 'Fused' THEN ft.name ELSE concat_ws(' -> ', e.evidence_1, e.evidence_2, e.evidence_3) END
            AS evidence,
        CASE WHEN d.status <> 'Fused' AND coalesce(e.ops_1, e.ops_2, e.ops_3) IS NOT NULL
             THEN concat_ws(' -> ', coalesce(e.ops_1, '?'), coalesce(e.ops_2, '?'),
                            CASE WHEN p.n_splits = 3 THEN coalesce(e.ops_3, '?') END) END AS evidence_ops,
        CASE WHEN d.status = 'Fused' THEN d.fused_text
             ELSE concat_ws(' -> ', e.text_1, e.text_2, e.text_3)
                  || '; ' || CAST(d.chains_adjacent AS VARCHAR) || ' adjacent, '
                  || CAST(d.chains_near AS VARCHAR) || ' near chain(s)' END AS evidence_sequence,
        CASE WHEN d.status = 'Confirmed' THEN
                  CASE WHEN d.ops_known_adjacent THEN 'ops' WHEN d.some_ops_adjacent THEN 'ops and kernel names'
                       ELSE 'kernel names' END
             WHEN d.status = 'Likely' THEN
                  CASE WHEN d.ops_known_all THEN 'ops' WHEN d.some_ops_all THEN 'ops and kernel names'
                       ELSE 'kernel names' END END
            AS evidence_basis,
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
    LEFT JOIN evidence_time AS et ON et.run_id = d.run_id AND et.phase = d.phase AND et.pattern_id = d.pattern_id
    LEFT JOIN removable AS rm ON rm.run_id = d.run_id AND rm.phase = d.phase AND rm.pattern_id = d.pattern_id
    LEFT JOIN run_vendor AS v ON v.run_id = d.run_id
    LEFT JOIN fused_top AS ft ON ft.run_id = d.run_id AND ft.phase = d.phase AND ft.pattern_id = d.pattern_id AND ft.rn = 1
    LEFT JOIN kernel_summary AS ks
      ON ks.run_id = d.run_id AND ks.phase = d.phase
     AND ks.name = CASE WHEN d.status = 'Fused' THEN ft.name ELSE e.evidence_1 END
),
implementations AS (
    SELECT pattern_key, string_agg(framework || ': ' || source_path, '; ' ORDER BY catalog_order) AS paths
    FROM fusion_patterns
    GROUP BY pattern_key
),
scoped AS (
    SELECT w.*,
           CASE WHEN w.run_framework IN ('sglang', 'vllm', 'tensorrt-llm') THEN 'framework' ELSE 'generic' END
               AS row_scope,
           row_number() OVER (PARTITION BY w.run_id, w.phase, w.pattern_key
                              ORDER BY CASE w.status WHEN 'Confirmed' THEN 0 WHEN 'Fused' THEN 1 ELSE 2 END,
                                       w.related_gpu_time_ns DESC NULLS LAST, w.catalog_order) AS key_rank
    FROM rowed AS w
)
SELECT
    s.run_id,
    s.phase,
    s.pattern_id,
    s.pattern_name,
    s.pattern_key,
    CASE WHEN s.row_scope = 'generic' THEN 'generic' ELSE s.entry_framework END AS pattern_framework,
    s.row_scope,
    CASE WHEN s.row_scope = 'framework' THEN TRUE END AS framework_match,
    s.status,
    s.occurrences,
    s.chains_adjacent,
    s.chains_near,
    s.related_gpu_time_ns,
    s.removable_gpu_time_ns,
    s.removable_gap_ns,
    CASE WHEN s.total_ns > 0 THEN s.removable_gpu_time_ns / s.total_ns END AS share,
    CASE WHEN s.total_ns > 0 THEN s.related_gpu_time_ns / s.total_ns END AS related_share,
    s.evidence_1,
    s.evidence_2,
    s.evidence_3,
    s.evidence,
    s.evidence_ops,
    s.evidence_sequence,
    s.evidence_basis,
    s.fused_kernel,
    s.fused_gpu_time_ns,
    s.fused_launches,
    s.python_site,
    s.python_site_share,
    CASE WHEN s.row_scope = 'generic' THEN i.paths ELSE s.source_path END AS source_path,
    s.rationale,
    s.reference,
    s.pattern_vendor,
    s.run_vendor,
    s.catalog_version
FROM scoped AS s
JOIN implementations AS i ON i.pattern_key = s.pattern_key
WHERE (s.row_scope = 'framework' AND s.entry_framework = s.run_framework)
   OR (s.row_scope = 'generic' AND s.key_rank = 1)

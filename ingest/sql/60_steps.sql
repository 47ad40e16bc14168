-- Stage 3f: steps and phases of one rank (PRODUCT.md, Words: step, phase).
-- A step comes from, in order of preference: `ProfilerStep#N` annotations; serving annotations
-- (SGLang `step[...]`, vLLM `execute_..context_<c>..generation_<g>..`, ATOM `prefill[..]`/`decode[..]`);
-- one graph launch per step; else the whole rank is step 0. The phase comes from the annotation,
-- else from the stage in the file name; a `phase` label given at ingest wins over both (table
-- rank_context, written by ingest/rank.py).
CREATE OR REPLACE TABLE step_candidates AS
WITH annotations AS (
    SELECT name, start_ns, start_ns + dur_ns AS end_ns, tid
    FROM cpu_ops WHERE lower(cat) = 'user_annotation'
),
-- ProfilerStep#N: a host range of any category (a user_annotation since 2022; the 2021 Kineto and the
-- autograd profiler wrote it as an op, cpu_op), never its GPU-side copy (gpu_user_annotation)
profiler AS (
    SELECT 1 AS priority, 'profiler_step' AS source,
           TRY_CAST(regexp_extract(name, '^ProfilerStep#(\d+)', 1) AS BIGINT) AS step_number,
           name, start_ns, start_ns + dur_ns AS end_ns, NULL AS phase
    FROM cpu_ops WHERE cat IS DISTINCT FROM 'gpu_user_annotation' AND regexp_matches(name, '^ProfilerStep#\d+')
),
sglang AS (
    SELECT 2, 'sglang_step', NULL, name, start_ns, end_ns,
           CASE WHEN regexp_matches(name, '^step\[\s*DECODE') THEN 'decode'
                WHEN regexp_matches(name, '^step\[\s*(EXTEND|PREFILL)') THEN 'prefill'
                WHEN regexp_matches(name, '^step\[\s*MIXED') THEN 'mixed' END
    FROM annotations WHERE regexp_matches(name, '^step\[')
),
vllm AS (
    SELECT 3, 'vllm_execute', NULL, name, start_ns, end_ns,
           CASE WHEN ctx > 0 AND gen = 0 THEN 'prefill'
                WHEN ctx = 0 AND gen > 0 THEN 'decode'
                WHEN ctx > 0 AND gen > 0 THEN 'mixed' END
    FROM (
        SELECT *, TRY_CAST(regexp_extract(name, 'context_(\d+)', 1) AS BIGINT) AS ctx,
                  TRY_CAST(regexp_extract(name, 'generation_(\d+)', 1) AS BIGINT) AS gen
        FROM annotations WHERE regexp_matches(name, '^execute_(\d+_)?context_\d+')
    )
),
atom AS (
    SELECT 4, 'atom_step', NULL, name, start_ns, end_ns,
           CASE WHEN name LIKE 'prefill[%' THEN 'prefill' ELSE 'decode' END
    FROM annotations WHERE regexp_matches(name, '^(prefill|decode)\[')
),
graphs AS (
    SELECT 5, 'graph_launch', NULL, name, start_ns, start_ns + dur_ns, NULL
    FROM host_api WHERE name IN ('cudaGraphLaunch', 'hipGraphLaunch', 'cudaGraphLaunch_v10000')
)
SELECT * FROM profiler UNION ALL SELECT * FROM sglang UNION ALL SELECT * FROM vllm
UNION ALL SELECT * FROM atom UNION ALL SELECT * FROM graphs;

CREATE OR REPLACE TABLE steps AS
WITH chosen AS (
    SELECT * FROM step_candidates
    WHERE priority = (SELECT min(priority) FROM step_candidates)
),
numbered AS (
    SELECT coalesce(step_number, row_number() OVER (ORDER BY start_ns, end_ns) - 1) AS step,
           name, source, start_ns, end_ns, phase
    FROM chosen
),
whole AS (
    SELECT 0 AS step, 'whole trace' AS name, 'whole' AS source,
           (SELECT min(start_ns) FROM events WHERE ph = 'X') AS start_ns,
           (SELECT max(start_ns + dur_ns) FROM events WHERE ph = 'X') AS end_ns,
           NULL AS phase
    WHERE NOT EXISTS (SELECT 1 FROM step_candidates)
)
SELECT step, name, source, start_ns, end_ns,
       coalesce((SELECT label_phase FROM rank_context), phase, (SELECT stage_phase FROM rank_context), 'unknown') AS phase
FROM (SELECT * FROM numbered UNION ALL SELECT * FROM whole);

-- Stage 3f: steps and phases of one rank (docs/words.md: step, phase). A step is one iteration of
-- the engine, found from, in order of preference (the first rule that finds any step decides):
--   1 `ProfilerStep#N` (any host category: user_annotation, legacy Operator, ...; not its GPU mirror);
--   2 SGLang's scheduler annotation `step[...]`;
--   3 vLLM's model runner `execute_model`: a `python_function` frame `.../(gpu_)model_runner.py(N):
--     execute_model` under a `vllm/` path, or a user annotation named `execute_model` (outermost only);
--   4 vLLM's `execute_..context_<c>..generation_<g>..` annotation;
--   5 ATOM's `prefill[..]` / `decode[..]`;
--   6 TensorRT-LLM's executor iteration: a `python_function` frame `.../py_executor.py(N): _forward_step`
--     under a `tensorrt_llm/` path (outermost only);
--   7 host bursts: where nothing marks steps, a step is a repeating burst of launch calls between host
--     idle periods (below); a graph launch is never a step by itself, it joins the burst it is in;
--   else the whole rank is step 0.
-- Host bursts, precisely: take the rank's launch calls (host calls with GPU work linked to them:
-- kernel, copy, fill and graph launches) in start order; the gap before a call is its start minus the
-- latest end of the calls before it (0 when they overlap). A gap is a boundary when it is longer than
-- 10 x the median gap and at least the threshold T: among the gaps above 10 x the median, T is the one
-- with the widest relative jump over the next smaller gap (gap / next smaller, 1 ns at least; ties: the
-- smaller gap), and that jump must be at least 10 x. Bursts are the runs of calls between boundaries;
-- they are steps when they repeat: at least 3 of them hold the same work, their count of launch calls
-- within 10 % of the bursts' median count (iterations of one loop; a warm-up burst beside them is a step
-- too, and step_warmup judges it). Bursts that do not repeat (setup calls, one-off launches between long
-- host calls) are no steps: the whole rank is step 0. A burst's window runs from its first call's start
-- to its last call's end.
-- The phase: the step marker's own (step[DECODE..], vLLM context/generation counts, ATOM prefill/
-- decode); else the phase of the serving annotation (rules 2, 4, 5) that overlaps the step's host window
-- the most; else from the stage in the file name; a `phase` label given at ingest wins over all (table
-- rank_context, written by ingest/rank.py).
CREATE OR REPLACE TABLE step_candidates AS
WITH annotations AS (
    SELECT name, start_ns, start_ns + dur_ns AS end_ns, tid
    FROM cpu_ops WHERE lower(cat) = 'user_annotation'
),
-- ProfilerStep#N: a host range of any category (a user_annotation since 2022; the 2021 Kineto and the
-- autograd profiler wrote it as an op, cpu_op), never its GPU-side copy (gpu_user_annotation)
profiler AS (
    -- host ranges only (Kineto mirrors ProfilerStep#N on the GPU timeline as gpu_user_annotation); one
    -- per step number (the longest), should a trace record it twice
    SELECT 1 AS priority, 'profiler_step' AS source, step_number, name, start_ns, end_ns, NULL AS phase
    FROM (
        SELECT TRY_CAST(regexp_extract(name, '^ProfilerStep#(\d+)', 1) AS BIGINT) AS step_number,
               name, start_ns, start_ns + dur_ns AS end_ns
        FROM cpu_ops
        WHERE regexp_matches(name, '^ProfilerStep#\d+') AND cat IS DISTINCT FROM 'gpu_user_annotation'
    )
    QUALIFY row_number() OVER (PARTITION BY step_number ORDER BY end_ns - start_ns DESC, start_ns) = 1
),
sglang AS (
    SELECT 2, 'sglang_step', NULL, name, start_ns, end_ns,
           CASE WHEN regexp_matches(name, '^step\[\s*DECODE') THEN 'decode'
                WHEN regexp_matches(name, '^step\[\s*(EXTEND|PREFILL)') THEN 'prefill'
                WHEN regexp_matches(name, '^step\[\s*MIXED') THEN 'mixed' END
    FROM annotations WHERE regexp_matches(name, '^step\[')
),
runner_marks AS (
    -- vLLM's execute_model and TensorRT-LLM's _forward_step, as frames or annotations
    SELECT CASE WHEN function = 'execute_model' THEN 3 ELSE 6 END AS priority,
           CASE WHEN function = 'execute_model' THEN 'vllm_execute_model' ELSE 'trtllm_iteration' END AS source,
           name, tid, start_ns, start_ns + dur_ns AS end_ns
    FROM python_frames
    WHERE (function = 'execute_model' AND regexp_matches(file, '(^|[/\\])vllm[/\\].*model_runner\.py$'))
       OR (function = '_forward_step' AND regexp_matches(file, '(^|[/\\])tensorrt_llm[/\\].*py_executor\.py$'))
    UNION ALL
    SELECT 3, 'vllm_execute_model', name, tid, start_ns, end_ns FROM annotations WHERE name = 'execute_model'
),
runner AS (
    -- outermost only: a mark inside another of its kind on the same thread is the same iteration
    SELECT m.priority, m.source, NULL, m.name, m.start_ns, m.end_ns, NULL
    FROM runner_marks m
    WHERE NOT EXISTS (
        SELECT 1 FROM runner_marks o
        WHERE o.priority = m.priority AND o.tid = m.tid AND o.start_ns <= m.start_ns AND o.end_ns >= m.end_ns
          AND (o.start_ns < m.start_ns OR o.end_ns > m.end_ns)
    )
),
vllm AS (
    SELECT 4, 'vllm_execute', NULL, name, start_ns, end_ns,
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
    SELECT 5, 'atom_step', NULL, name, start_ns, end_ns,
           CASE WHEN name LIKE 'prefill[%' THEN 'prefill' ELSE 'decode' END
    FROM annotations WHERE regexp_matches(name, '^(prefill|decode)\[')
)
SELECT * FROM profiler UNION ALL SELECT * FROM sglang UNION ALL SELECT * FROM runner
UNION ALL SELECT * FROM vllm UNION ALL SELECT * FROM atom;

-- host bursts (rule 7), computed only when no marker found a step
CREATE OR REPLACE TABLE step_bursts AS
WITH calls AS (
    SELECT start_ns, start_ns + dur_ns AS end_ns,
           max(start_ns + dur_ns) OVER (ORDER BY start_ns, launch_id ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING)
               AS before_end
    FROM launch_points
    WHERE NOT EXISTS (SELECT 1 FROM step_candidates)
),
gaps AS (
    SELECT start_ns, end_ns, CASE WHEN before_end IS NULL THEN NULL ELSE greatest(start_ns - before_end, 0) END AS gap
    FROM calls
),
sizes AS (
    -- each distinct gap with the next smaller one (one ordered pass; 1 ns when that is 0)
    SELECT gap, greatest(lag(gap) OVER (ORDER BY gap), 1) AS below
    FROM (SELECT DISTINCT gap FROM gaps WHERE gap IS NOT NULL)
),
threshold AS (
    SELECT gap AS t FROM sizes
    WHERE gap > 10 * (SELECT median(gap) FROM gaps WHERE gap IS NOT NULL) AND gap >= 10 * below
    ORDER BY gap / below DESC, gap
    LIMIT 1
),
numbered AS (
    SELECT start_ns, end_ns,
           sum(CASE WHEN gap >= (SELECT t FROM threshold) THEN 1 ELSE 0 END) OVER (ORDER BY start_ns ROWS UNBOUNDED PRECEDING)
               AS burst
    FROM gaps
    WHERE EXISTS (SELECT 1 FROM threshold)
),
bursts AS (
    SELECT burst, min(start_ns) AS start_ns, max(end_ns) AS end_ns, count(*) AS calls FROM numbered GROUP BY burst
)
SELECT 7 AS priority, 'host_burst' AS source, NULL::BIGINT AS step_number,
       'host burst ' || burst || ' (' || calls || ' launch calls)' AS name, start_ns, end_ns, NULL::VARCHAR AS phase
FROM bursts
WHERE (SELECT count(*) FROM bursts
       WHERE abs(calls - (SELECT median(calls) FROM bursts)) <= 0.1 * (SELECT median(calls) FROM bursts)) >= 3;

CREATE OR REPLACE TABLE steps AS
WITH candidates AS (
    SELECT * FROM step_candidates UNION ALL SELECT * FROM step_bursts
),
chosen AS (
    SELECT * FROM candidates
    WHERE priority = (SELECT min(priority) FROM candidates)
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
    WHERE NOT EXISTS (SELECT 1 FROM candidates)
),
phased AS (
    -- the serving annotations that state a phase (rules 2, 4, 5)
    SELECT start_ns, end_ns, phase FROM step_candidates WHERE priority IN (2, 4, 5) AND phase IS NOT NULL
),
overlapping AS (
    -- for a step without a phase of its own: the phase of the annotation that overlaps it the most
    SELECT n.step, p.phase,
           row_number() OVER (PARTITION BY n.step
                              ORDER BY least(n.end_ns, p.end_ns) - greatest(n.start_ns, p.start_ns) DESC,
                                       p.start_ns) AS pick
    FROM numbered n JOIN phased p ON p.start_ns < n.end_ns AND p.end_ns > n.start_ns
    WHERE n.phase IS NULL
)
SELECT s.step, s.name, s.source, s.start_ns, s.end_ns,
       coalesce((SELECT label_phase FROM rank_context), s.phase, o.phase, (SELECT stage_phase FROM rank_context),
                'unknown') AS phase
FROM (SELECT * FROM numbered UNION ALL SELECT * FROM whole) AS s
LEFT JOIN overlapping o ON o.step = s.step AND o.pick = 1;

-- _fusion_chains: helper of fusion_match. One row per chain: activities matching the split steps of a
-- fusion pattern (sql/rules/fusion_patterns.csv) in order on one stream; the evidence fusion_match counts.
-- Step match. A GPU activity counts for split step k when (1) its name matches the step's regex, (2) its
--   category (kernel_category) is one of the step's categories (a grouped MoE GEMM is never evidence for
--   an attention or KV-cache-store step), and (3) where the step names a launching host op (column
--   split_k_ops) and the activity has one (kernels.cpu_op_id: the innermost op enclosing the launch), that
--   op's name matches it. Graph replays have no launching op: their kernels are judged by (1) and (2).
-- Chain. Activities matching steps 1..n IN ORDER on one (rank, device, stream), in start order, inside
--   one scope: the same step (kernels.step) and the same graph replay (the cudaGraphLaunch correlation;
--   all eager activities share one scope). A chain never spans a step or a graph boundary (piecewise CUDA
--   graphs: split kernels on either side of a graph boundary are not evidence). Between consecutive
--   steps at most 2 other activities may run; a chain whose steps follow each other directly is adjacent.
--   Each activity matching step 1 starts at most one chain (the nearest complete one).
-- Shape rule (column shape_rule, checked on the launching ops' `Input Dims`; first input = the first
--   tensor's dims of the op):
--   same_input    every step's op has step 1's first input shape (residual add -> norm of its output)
--   gate_product  step 2's op has exactly two inputs, both of step 1's first input shape: the gate product
--                 act(gate) * up; a scaling by a scalar or a broadcast (attention scaling, RoPE) is not
--   logits_2d     step 1's first input is 2-D [tokens, vocab] (sampling logits, not attention scores)
--   same_input_2d same_input, and that input is 2-D [tokens, vocab] (a temperature divide of the logits
--                 followed by their softmax; not a divide of a [N, 1] column followed by another softmax)
--   A chain whose rule fails is no evidence. A chain whose shapes are unknown (no launching op, no
--   Input Dims) is judged by names alone: evidence_basis says which.
-- Requires. A pattern with requires_category (MoE routing / finalize: `moe`) has evidence only in a phase
--   that has GPU time in that category (an index + sum of a dense model is not a MoE finalize).
-- Columns:
--   run_id, rank, phase      VARCHAR, INTEGER, VARCHAR  the run, rank and the phase of the chain's first
--                            activity ('unknown' when none)
--   pattern_id, n_splits     VARCHAR, INTEGER  the catalogue entry and its number of steps
--   kernel_id_1, name_1, dur_ns_1   BIGINT, VARCHAR, BIGINT  step 1's activity
--   kernel_id_2, name_2, dur_ns_2   BIGINT, VARCHAR, BIGINT  step 2's activity
--   kernel_id_3, name_3, dur_ns_3   BIGINT, VARCHAR, BIGINT  step 3's activity (NULL when the pattern has 2
--                            steps)
--   gap_ns_1, gap_ns_2       BIGINT  the stream's time between step 1's end and step 2's start, and between
--                            step 2's end and step 3's start (never below 0; NULL: no step 3); on an
--                            adjacent chain it is idle time (nothing ran between)
--   op_1, dims_1, op_2, dims_2, op_3, dims_3   VARCHAR  each step's launching op and that op's Input Dims
--                            (NULL: none known, or no such step)
--   ops_known                BOOLEAN  every step's launching op is known
--   adjacent                 BOOLEAN  the steps follow each other directly on the stream
CREATE OR REPLACE VIEW _fusion_chains AS
WITH launched AS (
    -- every activity with its scope and its launching op (name, dims)
    SELECT f.run_id, f.rank, f.kernel_id, f.device, f.stream, f.start_ns, f.dur_ns, f.name, f.category,
           f.phase_key AS phase,
           coalesce(f.step, -1) AS step_key,
           CASE WHEN f.launch_call LIKE '%GraphLaunch%' THEN coalesce(k.correlation, -2) ELSE -1 END AS replay_key,
           o.name AS op_name,
           replace(o.input_dims, ' ', '') AS op_dims
    FROM _kernel_facts AS f
    -- the launch's correlation and op come from `kernels` (a stored _kernel_facts keeps fewer columns)
    LEFT JOIN kernels AS k ON k.run_id = f.run_id AND k.rank = f.rank AND k.kernel_id = f.kernel_id
    LEFT JOIN cpu_ops AS o ON o.run_id = k.run_id AND o.rank = k.rank AND o.op_id = k.cpu_op_id
),
facts AS (
    -- first_dims: the first input's dims ('[[16,559,2816],[...]]' -> '[16,559,2816]'); NULL when the op has
    -- no dims or its first input is a list of tensors (string functions, no regex: the same on Spark)
    -- pos: the activity's place on its stream (numbered here, not joined back: 1.4M activities at 1 GB)
    SELECT *,
           CASE WHEN op_dims LIKE '[[%' AND substr(op_dims, 3, 1) <> '['
                THEN substr(op_dims, 2, strpos(op_dims, ']') - 1) END AS first_dims,
           row_number() OVER (PARTITION BY run_id, rank, device, stream ORDER BY start_ns, kernel_id) AS pos
    FROM launched
),
per_name AS (
    -- launches and GPU time per name (and category) in each run and phase
    SELECT run_id, phase, name, category, count(*) AS launches, sum(dur_ns) AS time_ns
    FROM facts
    GROUP BY run_id, phase, name, category
),
names AS (
    SELECT DISTINCT name, category FROM per_name
),
step_names AS (
    SELECT s.pattern_id, s.step, s.ops, n.name, n.category
    FROM fusion_pattern_steps AS s
    JOIN names AS n
      ON ';' || s.categories || ';' LIKE '%;' || n.category || ';%'
     AND regexp_matches(n.name, s.pattern)
),
op_names AS (
    SELECT DISTINCT op_name FROM facts WHERE op_name IS NOT NULL
),
step_ops AS (
    -- the launching ops a step accepts (steps without an op regex accept any)
    SELECT s.pattern_id, s.step, o.op_name
    FROM fusion_pattern_steps AS s
    JOIN op_names AS o ON s.ops IS NOT NULL AND regexp_matches(o.op_name, s.ops)
),
candidates AS (
    -- activities that can be evidence for a step: name + category (the activity's own: a name's category can
    -- depend on the launching op), and the launching op where both are known
    SELECT f.*, s.pattern_id, s.step
    FROM facts AS f
    JOIN step_names AS s ON s.name = f.name AND s.category = f.category
    LEFT JOIN step_ops AS so ON so.pattern_id = s.pattern_id AND so.step = s.step AND so.op_name = f.op_name
    WHERE s.ops IS NULL OR f.op_name IS NULL OR so.op_name IS NOT NULL
),
gaps AS (
    -- how far the next step may be on its stream: directly next, or 1 or 2 activities later (an equality
    -- join per gap, so the chains are found in time linear in the candidates)
    SELECT 1 AS o UNION ALL SELECT 2 UNION ALL SELECT 3
),
pairs AS (
    -- steps 1 and 2 of a chain: the same stream, step and graph replay, step 2 at most 3 positions later
    -- (the place wanted, next_pos, a column: a join key; `b.pos = a.pos + g.o` was a filter after the join,
    -- which met every step-1 candidate with every step-2 candidate of its stream and step: 6.2M rows at 1 GB)
    SELECT a.run_id, a.rank, a.device, a.stream, a.step_key, a.replay_key, a.phase, a.pattern_id,
           p.n_splits, p.shape_rule, p.requires_category,
           a.kernel_id AS kernel_id_1, a.name AS name_1, a.dur_ns AS dur_ns_1, a.start_ns AS start_ns_1,
           a.op_name AS op_1,
           a.op_dims AS dims_1, a.first_dims AS first_1, a.pos AS pos_1,
           b.kernel_id AS kernel_id_2, b.name AS name_2, b.dur_ns AS dur_ns_2, b.start_ns AS start_ns_2,
           b.op_name AS op_2,
           b.op_dims AS dims_2, b.first_dims AS first_2, b.pos AS pos_2
    FROM (SELECT c.*, c.pos + g.o AS next_pos FROM candidates AS c CROSS JOIN gaps AS g WHERE c.step = 1) AS a
    JOIN fusion_patterns AS p ON p.pattern_id = a.pattern_id
    JOIN candidates AS b
      ON b.run_id = a.run_id AND b.rank = a.rank AND b.device = a.device AND b.stream = a.stream
     AND b.pattern_id = a.pattern_id AND b.step = 2
     AND b.step_key = a.step_key AND b.replay_key = a.replay_key
     AND b.pos = a.next_pos
),
sequences AS (
    -- complete sequences: the pairs of two-step patterns, and the pairs followed by their step 3
    SELECT x.*, CAST(NULL AS BIGINT) AS next_pos,
           CAST(NULL AS BIGINT) AS kernel_id_3, CAST(NULL AS VARCHAR) AS name_3,
           CAST(NULL AS BIGINT) AS dur_ns_3, CAST(NULL AS BIGINT) AS start_ns_3,
           CAST(NULL AS VARCHAR) AS op_3, CAST(NULL AS VARCHAR) AS dims_3,
           CAST(NULL AS VARCHAR) AS first_3, CAST(NULL AS BIGINT) AS pos_3
    FROM pairs AS x
    WHERE x.n_splits = 2
    UNION ALL
    SELECT x.*, c.kernel_id, c.name, c.dur_ns, c.start_ns, c.op_name, c.op_dims,
           c.first_dims, c.pos
    FROM (SELECT p.*, p.pos_2 + g.o AS next_pos FROM pairs AS p CROSS JOIN gaps AS g WHERE p.n_splits = 3) AS x
    JOIN candidates AS c
      ON c.run_id = x.run_id AND c.rank = x.rank AND c.device = x.device AND c.stream = x.stream
     AND c.pattern_id = x.pattern_id AND c.step = 3
     AND c.step_key = x.step_key AND c.replay_key = x.replay_key
     AND c.pos = x.next_pos
),
raw_chains AS (
    SELECT q.run_id, q.rank, q.phase, q.pattern_id, q.n_splits, q.shape_rule,
           q.kernel_id_1, q.name_1, q.dur_ns_1, q.kernel_id_2, q.name_2, q.dur_ns_2,
           q.kernel_id_3, q.name_3, q.dur_ns_3,
           greatest(q.start_ns_2 - (q.start_ns_1 + q.dur_ns_1), 0) AS gap_ns_1,
           greatest(q.start_ns_3 - (q.start_ns_2 + q.dur_ns_2), 0) AS gap_ns_2,
           q.op_1, q.dims_1, q.op_2, q.dims_2, q.op_3, q.dims_3,
           q.op_1 IS NOT NULL AND q.op_2 IS NOT NULL AND (q.n_splits = 2 OR q.op_3 IS NOT NULL) AS ops_known,
           q.pos_2 = q.pos_1 + 1 AND (q.n_splits = 2 OR q.pos_3 = q.pos_2 + 1) AS adjacent,
           CASE q.shape_rule
               WHEN 'same_input' THEN
                   CASE WHEN q.first_1 IS NULL OR q.first_2 IS NULL OR (q.n_splits = 3 AND q.first_3 IS NULL)
                        THEN NULL
                        ELSE q.first_2 = q.first_1 AND (q.n_splits = 2 OR q.first_3 = q.first_1) END
               WHEN 'same_input_2d' THEN
                   CASE WHEN q.first_1 IS NULL OR q.first_2 IS NULL OR (q.n_splits = 3 AND q.first_3 IS NULL)
                        THEN NULL
                        ELSE q.first_2 = q.first_1 AND (q.n_splits = 2 OR q.first_3 = q.first_1)
                             AND length(q.first_1) - length(replace(q.first_1, ',', '')) = 1 END
               WHEN 'gate_product' THEN
                   CASE WHEN q.first_1 IS NULL OR q.dims_2 IS NULL THEN NULL
                        ELSE q.dims_2 = '[' || q.first_1 || ',' || q.first_1 || ']' END
               WHEN 'logits_2d' THEN
                   CASE WHEN q.first_1 IS NULL THEN NULL
                        ELSE length(q.first_1) - length(replace(q.first_1, ',', '')) = 1 END
           END AS shape_ok,
           q.pos_2 - q.pos_1 + coalesce(q.pos_3 - q.pos_2, 0) AS span
    FROM sequences AS q
    WHERE q.requires_category IS NULL OR EXISTS (
              SELECT 1 FROM per_name AS r
              WHERE r.run_id = q.run_id AND r.phase = q.phase AND r.category = q.requires_category)
),
shaped AS (
    SELECT * FROM raw_chains WHERE shape_ok IS NULL OR shape_ok
),
nearest AS (
    -- one chain per first activity: the nearest one whose shapes do not contradict the rule (least span,
    -- then kernel_id_2, then kernel_id_3; of one pattern, kernel_id_3 is NULL on every chain or on none).
    -- An aggregate and a join back rather than a row_number window over the wide chains (1.3M at 1 GB: the
    -- window was the view's largest cost)
    SELECT run_id, rank, pattern_id, kernel_id_1,
           min({'span': span, 'kernel_id_2': kernel_id_2, 'kernel_id_3': kernel_id_3}) AS pick
    FROM shaped
    GROUP BY run_id, rank, pattern_id, kernel_id_1
)
SELECT c.run_id, c.rank, c.phase, c.pattern_id, c.n_splits,
       c.kernel_id_1, c.name_1, c.dur_ns_1, c.kernel_id_2, c.name_2, c.dur_ns_2, c.kernel_id_3, c.name_3, c.dur_ns_3,
       c.gap_ns_1, c.gap_ns_2,
       c.op_1, c.dims_1, c.op_2, c.dims_2, c.op_3, c.dims_3, c.ops_known, c.adjacent
FROM shaped AS c
JOIN nearest AS n
  ON n.run_id = c.run_id AND n.rank = c.rank AND n.pattern_id = c.pattern_id AND n.kernel_id_1 = c.kernel_id_1
 AND n.pick.span = c.span AND n.pick.kernel_id_2 = c.kernel_id_2
 AND n.pick.kernel_id_3 IS NOT DISTINCT FROM c.kernel_id_3

-- activity_category: one row per GPU activity of `kernels`: its category, decided by the first rule of
-- `category_rules` (lowest rule_order; sql/rules/kernel_categories.csv, user rules first) that matches the
-- activity. This is the category every analysis uses (_kernel_facts.category, the timeline's classes, the
-- critical path's gpu rows). A rule matches an activity when
--   * its `pattern` (RE2 / Java regex, searched in the name; '' = any name) matches the activity's name, and
--   * if it has an `op_pattern`: the activity's launching op (the innermost cpu_op around its launch call,
--     kernels.cpu_op_id) is, or lies at most 4 host-range levels below, a cpu_op whose name matches
--     op_pattern and whose `Input Dims` (cpu_ops.input_dims, spaces ignored) satisfy `op_shape`:
--       (none)         no condition on the dims;
--       scores         input 0 is 4-D [B, H, Sq, Sk]; every op that a `scores` rule matches (softmax over
--                      the attention scores, its backward) makes (B, H, Sq, Sk) an attention score tensor of
--                      the run;
--       scores_matmul  a batched matmul A x B with A [N, X, Y], B [N, Y, Z] (or 4-D [b, h, X, Y] x
--                      [b, h, Y, Z], N = b*h) where the run has a score tensor with B*H = N and
--                      {Sq, Sk} = {X, Z} (QK^T: produces the scores; dV, dQ/dK grads of the backward) or
--                      {Sq, Sk} = {X, Y} (P x V: consumes them); the batched matmuls of an MLP, MoE or a
--                      recommender's feature interaction have no such softmax beside them and stay `gemm`;
--       on_scores      input 0 has exactly the shape [B, H, Sq, Sk] of a score tensor of the run
--                      (scaling, masking, dropout, casts of the scores).
-- Memcpy and memset activities are `memory` by their kind, before any rule. Activities that no op rule
-- matches take their name's category from kernel_category (the name-only rules); a name no rule matches is
-- `other`. So a kernel name is `attention` under an attention-shaped aten::bmm and `gemm` under aten::mm.
-- Method (narrow joins, no regex per activity): op_pattern is tried once per distinct cpu_op name; the dims
-- are parsed once per distinct (run, op name, dims) of the ops it matches; the ops that satisfy a rule and
-- their descendants (4 levels, joins on op ids) give the launching ops a rule applies to; the activities
-- launched from those ops are then tested against the rule's name pattern once per distinct name.
-- Columns:
--   run_id, rank, kernel_id  the activity (kernels)
--   category                 its category (the vocabulary of kernel_category)
--   rule_name                the rule that decided (kernel_category.rule_name for name decisions)
--   by_op                    TRUE when a rule with an op_pattern decided (the launching op mattered)
CREATE OR REPLACE VIEW activity_category AS
WITH op_rules AS (
    SELECT rule_order, rule_name, category, pattern, op_pattern, op_shape
    FROM category_rules
    WHERE op_pattern IS NOT NULL
),
op_names AS (
    SELECT DISTINCT name FROM cpu_ops WHERE cat = 'cpu_op'
),
name_rules AS (
    -- every (op name, op rule) whose op_pattern matches the op's name
    SELECT n.name, r.rule_order, r.op_shape
    FROM op_names AS n
    JOIN op_rules AS r ON regexp_matches(n.name, r.op_pattern)
),
roots_raw AS (
    SELECT o.run_id, o.rank, o.op_id, o.name, coalesce(replace(o.input_dims, ' ', ''), '') AS dims
    FROM cpu_ops AS o
    WHERE o.cat = 'cpu_op' AND o.name IN (SELECT name FROM name_rules)
),
root_keys AS (
    SELECT DISTINCT run_id, name, dims FROM roots_raw
),
parsed AS (
    -- input 0 as 4-D (s_*), and the first two inputs as a batched matmul of 3-D or 4-D tensors (m*_*)
    SELECT run_id, name, dims,
           CAST(nullif(regexp_extract(dims, '^[^0-9][^0-9]([0-9]+),([0-9]+),([0-9]+),([0-9]+)[^0-9,]', 1), '') AS BIGINT) AS s_b,
           CAST(nullif(regexp_extract(dims, '^[^0-9][^0-9]([0-9]+),([0-9]+),([0-9]+),([0-9]+)[^0-9,]', 2), '') AS BIGINT) AS s_h,
           CAST(nullif(regexp_extract(dims, '^[^0-9][^0-9]([0-9]+),([0-9]+),([0-9]+),([0-9]+)[^0-9,]', 3), '') AS BIGINT) AS s_q,
           CAST(nullif(regexp_extract(dims, '^[^0-9][^0-9]([0-9]+),([0-9]+),([0-9]+),([0-9]+)[^0-9,]', 4), '') AS BIGINT) AS s_k,
           regexp_extract(dims, '^[^0-9][^0-9]([0-9]+),([0-9]+),([0-9]+)[^0-9,][^0-9][^0-9]([0-9]+),([0-9]+),([0-9]+)[^0-9,]', 0) AS m3,
           regexp_extract(dims, '^[^0-9][^0-9]([0-9]+),([0-9]+),([0-9]+),([0-9]+)[^0-9,][^0-9][^0-9]([0-9]+),([0-9]+),([0-9]+),([0-9]+)[^0-9,]', 0) AS m4
    FROM root_keys
),
matmuls AS (
    SELECT p.*,
           CASE WHEN m3 <> '' THEN
                CASE WHEN regexp_extract(m3, '^[^0-9][^0-9]([0-9]+),([0-9]+),([0-9]+)[^0-9,][^0-9][^0-9]([0-9]+),([0-9]+),([0-9]+)', 1)
                          = regexp_extract(m3, '^[^0-9][^0-9]([0-9]+),([0-9]+),([0-9]+)[^0-9,][^0-9][^0-9]([0-9]+),([0-9]+),([0-9]+)', 4)
                      AND regexp_extract(m3, '^[^0-9][^0-9]([0-9]+),([0-9]+),([0-9]+)[^0-9,][^0-9][^0-9]([0-9]+),([0-9]+),([0-9]+)', 3)
                          = regexp_extract(m3, '^[^0-9][^0-9]([0-9]+),([0-9]+),([0-9]+)[^0-9,][^0-9][^0-9]([0-9]+),([0-9]+),([0-9]+)', 5)
                     THEN 3 END
                WHEN m4 <> '' THEN
                CASE WHEN regexp_extract(m4, '^[^0-9][^0-9]([0-9]+),([0-9]+),([0-9]+),([0-9]+)[^0-9,][^0-9][^0-9]([0-9]+),([0-9]+),([0-9]+),([0-9]+)', 1)
                          = regexp_extract(m4, '^[^0-9][^0-9]([0-9]+),([0-9]+),([0-9]+),([0-9]+)[^0-9,][^0-9][^0-9]([0-9]+),([0-9]+),([0-9]+),([0-9]+)', 5)
                      AND regexp_extract(m4, '^[^0-9][^0-9]([0-9]+),([0-9]+),([0-9]+),([0-9]+)[^0-9,][^0-9][^0-9]([0-9]+),([0-9]+),([0-9]+),([0-9]+)', 2)
                          = regexp_extract(m4, '^[^0-9][^0-9]([0-9]+),([0-9]+),([0-9]+),([0-9]+)[^0-9,][^0-9][^0-9]([0-9]+),([0-9]+),([0-9]+),([0-9]+)', 6)
                      AND regexp_extract(m4, '^[^0-9][^0-9]([0-9]+),([0-9]+),([0-9]+),([0-9]+)[^0-9,][^0-9][^0-9]([0-9]+),([0-9]+),([0-9]+),([0-9]+)', 4)
                          = regexp_extract(m4, '^[^0-9][^0-9]([0-9]+),([0-9]+),([0-9]+),([0-9]+)[^0-9,][^0-9][^0-9]([0-9]+),([0-9]+),([0-9]+),([0-9]+)', 7)
                     THEN 4 END
           END AS mm_rank
    FROM parsed AS p
),
shaped AS (
    -- a batched matmul A [N, X, Y] x B [N, Y, Z] as (mm_n, mm_x, mm_y, mm_z); NULL when the inputs are not one
    SELECT run_id, name, dims, s_b, s_h, s_q, s_k,
           CASE WHEN mm_rank = 3 THEN CAST(regexp_extract(m3, '^[^0-9][^0-9]([0-9]+)', 1) AS BIGINT)
                WHEN mm_rank = 4 THEN CAST(regexp_extract(m4, '^[^0-9][^0-9]([0-9]+)', 1) AS BIGINT)
                                      * CAST(regexp_extract(m4, '^[^0-9][^0-9]([0-9]+),([0-9]+)', 2) AS BIGINT) END AS mm_n,
           CASE WHEN mm_rank = 3 THEN CAST(regexp_extract(m3, '^[^0-9][^0-9]([0-9]+),([0-9]+)', 2) AS BIGINT)
                WHEN mm_rank = 4 THEN CAST(regexp_extract(m4, '^[^0-9][^0-9]([0-9]+),([0-9]+),([0-9]+)', 3) AS BIGINT) END AS mm_x,
           CASE WHEN mm_rank = 3 THEN CAST(regexp_extract(m3, '^[^0-9][^0-9]([0-9]+),([0-9]+),([0-9]+)', 3) AS BIGINT)
                WHEN mm_rank = 4 THEN CAST(regexp_extract(m4, '^[^0-9][^0-9]([0-9]+),([0-9]+),([0-9]+),([0-9]+)', 4) AS BIGINT) END AS mm_y,
           CASE WHEN mm_rank = 3 THEN CAST(regexp_extract(m3, '([0-9]+)[^0-9,]$', 1) AS BIGINT)
                WHEN mm_rank = 4 THEN CAST(regexp_extract(m4, '([0-9]+)[^0-9,]$', 1) AS BIGINT) END AS mm_z
    FROM matmuls
),
scores AS (
    -- the run's attention score tensors [B, H, Sq, Sk]: input 0 of the ops that a `scores` rule matches
    SELECT DISTINCT s.run_id, s.s_b AS b, s.s_h AS h, s.s_q AS sq, s.s_k AS sk
    FROM shaped AS s
    JOIN name_rules AS n ON n.name = s.name AND n.op_shape = 'scores'
    WHERE s.s_b IS NOT NULL
),
on_scores_keys AS (
    SELECT DISTINCT k.run_id, k.name, k.dims
    FROM shaped AS k
    JOIN scores AS s ON s.run_id = k.run_id AND s.b = k.s_b AND s.h = k.s_h AND s.sq = k.s_q AND s.sk = k.s_k
),
matmul_keys AS (
    SELECT DISTINCT k.run_id, k.name, k.dims
    FROM shaped AS k
    JOIN scores AS s ON s.run_id = k.run_id AND s.b * s.h = k.mm_n
        AND ((s.sq = k.mm_x AND (s.sk = k.mm_y OR s.sk = k.mm_z))
          OR (s.sk = k.mm_x AND (s.sq = k.mm_y OR s.sq = k.mm_z)))
),
key_hits AS (
    -- (run, op name, dims) that satisfy an op rule: op_pattern and op_shape
    SELECT k.run_id, k.name, k.dims, n.rule_order
    FROM shaped AS k
    JOIN name_rules AS n ON n.name = k.name
    LEFT JOIN on_scores_keys AS o ON o.run_id = k.run_id AND o.name = k.name AND o.dims = k.dims
    LEFT JOIN matmul_keys AS m ON m.run_id = k.run_id AND m.name = k.name AND m.dims = k.dims
    WHERE n.op_shape IS NULL
       OR (n.op_shape = 'scores' AND k.s_b IS NOT NULL)
       OR (n.op_shape = 'on_scores' AND o.name IS NOT NULL)
       OR (n.op_shape = 'scores_matmul' AND m.name IS NOT NULL)
),
d0 AS (
    SELECT r.run_id, r.rank, r.op_id, h.rule_order
    FROM roots_raw AS r
    JOIN key_hits AS h ON h.run_id = r.run_id AND h.name = r.name AND h.dims = r.dims
),
-- the host ranges below a matching op, level by level (cpu_ops.parent_op_id), 4 levels down
d1 AS (
    SELECT c.run_id, c.rank, c.op_id, d.rule_order
    FROM cpu_ops AS c JOIN d0 AS d ON d.run_id = c.run_id AND d.rank = c.rank AND d.op_id = c.parent_op_id
),
d2 AS (
    SELECT c.run_id, c.rank, c.op_id, d.rule_order
    FROM cpu_ops AS c JOIN d1 AS d ON d.run_id = c.run_id AND d.rank = c.rank AND d.op_id = c.parent_op_id
),
d3 AS (
    SELECT c.run_id, c.rank, c.op_id, d.rule_order
    FROM cpu_ops AS c JOIN d2 AS d ON d.run_id = c.run_id AND d.rank = c.rank AND d.op_id = c.parent_op_id
),
d4 AS (
    SELECT c.run_id, c.rank, c.op_id, d.rule_order
    FROM cpu_ops AS c JOIN d3 AS d ON d.run_id = c.run_id AND d.rank = c.rank AND d.op_id = c.parent_op_id
),
under AS (
    SELECT DISTINCT run_id, rank, op_id, rule_order
    FROM (SELECT * FROM d0 UNION ALL SELECT * FROM d1 UNION ALL SELECT * FROM d2
          UNION ALL SELECT * FROM d3 UNION ALL SELECT * FROM d4) AS levels
),
hit_activities AS (
    SELECT k.run_id, k.rank, k.kernel_id, k.name, k.kind, u.rule_order
    FROM kernels AS k
    JOIN under AS u ON u.run_id = k.run_id AND u.rank = k.rank AND u.op_id = k.cpu_op_id
    WHERE k.kind NOT IN ('memcpy', 'memset')
),
hit_names AS (
    -- the op rule's name pattern, tried once per distinct (name, kind, rule)
    SELECT h.name, h.kind, h.rule_order
    FROM (SELECT DISTINCT name, kind, rule_order FROM hit_activities) AS h
    JOIN op_rules AS r ON r.rule_order = h.rule_order
    WHERE regexp_matches(h.name, r.pattern)
),
best_op AS (
    SELECT a.run_id, a.rank, a.kernel_id, min(a.rule_order) AS rule_order
    FROM hit_activities AS a
    JOIN hit_names AS n ON n.name = a.name AND n.kind = a.kind AND n.rule_order = a.rule_order
    GROUP BY a.run_id, a.rank, a.kernel_id
)
SELECT
    k.run_id,
    k.rank,
    k.kernel_id,
    CASE WHEN r.rule_order IS NOT NULL THEN r.category ELSE coalesce(c.category, 'other') END AS category,
    CASE WHEN r.rule_order IS NOT NULL THEN r.rule_name ELSE coalesce(c.rule_name, 'unmatched') END AS rule_name,
    r.rule_order IS NOT NULL AS by_op
FROM kernels AS k
LEFT JOIN kernel_category AS c ON c.name = k.name AND c.kind = k.kind
LEFT JOIN best_op AS b ON b.run_id = k.run_id AND b.rank = k.rank AND b.kernel_id = k.kernel_id
LEFT JOIN op_rules AS r ON r.rule_order = b.rule_order AND (c.rule_order IS NULL OR b.rule_order < c.rule_order);

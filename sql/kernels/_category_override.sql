-- _category_override: helper of activity_category. One row per GPU activity whose category a rule with an
-- op_pattern or a module_pattern decides (the first matching rule, by rule_order, is an op rule): few rows, so that views
-- that already join kernel_category by name add the per-activity decision with a small join (a view
-- reading every activity joins `kernels` -> kernel_category by name, then this by kernel id:
-- category = coalesce(o.category, c.category, 'other')). How the op rules match: activity_category.
-- Columns:
--   run_id, rank, kernel_id  VARCHAR, INTEGER, BIGINT  the activity
--   category, rule_name      VARCHAR  the op rule that decides it
CREATE OR REPLACE VIEW _category_override AS
WITH op_rules AS (
    SELECT rule_order, rule_name, category, pattern, op_pattern, op_pattern_literals, op_shape
    FROM category_rules
    WHERE op_pattern IS NOT NULL
),
ops AS (
    -- the host ranges' nesting (narrow), read by each level of the walk below
    SELECT run_id, rank, op_id, parent_op_id FROM cpu_ops
),
frames AS (
    SELECT run_id, rank, frame_id, parent_frame_id, name, name LIKE 'nn.Module: %' AS is_module FROM python_frames
),
op_names AS (
    SELECT DISTINCT name FROM cpu_ops WHERE cat = 'cpu_op'
),
name_rules AS (
    -- every (op name, op rule) whose op_pattern matches the op's name
    SELECT n.name, r.rule_order, r.op_shape
    FROM op_names AS n
    JOIN op_rules AS r
        ON CASE WHEN coalesce(array_length(r.op_pattern_literals), 0) = 0
              OR list_bool_or(list_transform(r.op_pattern_literals, lambda l: contains(lower(n.name), l)))
             THEN regexp_matches(n.name, r.op_pattern) ELSE false END
),
keyed AS (
    -- per (run, op name, dims, op rule) of the ops an op rule's op_pattern matches
    SELECT DISTINCT o.run_id, o.name, coalesce(replace(o.input_dims, ' ', ''), '') AS dims, n.rule_order, n.op_shape
    FROM cpu_ops AS o
    JOIN name_rules AS n ON n.name = o.name
    WHERE o.cat = 'cpu_op'
),
parsed AS (
    -- input 0 as 4-D (s_*) and as 3-D (t_*), and the first two inputs as a batched matmul of 3-D or 4-D
    -- tensors (m*_*; baddbmm's first input, the added mask, is skipped: batch1 x batch2 is the product)
    SELECT run_id, name, dims, rule_order, op_shape,
           CAST(nullif(regexp_extract(dims, '^[^0-9][^0-9]([0-9]+),([0-9]+),([0-9]+)[^0-9,]', 1), '') AS BIGINT) AS t_n,
           CAST(nullif(regexp_extract(dims, '^[^0-9][^0-9]([0-9]+),([0-9]+),([0-9]+)[^0-9,]', 2), '') AS BIGINT) AS t_x,
           CAST(nullif(regexp_extract(dims, '^[^0-9][^0-9]([0-9]+),([0-9]+),([0-9]+)[^0-9,]', 3), '') AS BIGINT) AS t_y,
           CAST(nullif(regexp_extract(dims, '^[^0-9][^0-9]([0-9]+),([0-9]+),([0-9]+),([0-9]+)[^0-9,]', 1), '') AS BIGINT) AS s_b,
           CAST(nullif(regexp_extract(dims, '^[^0-9][^0-9]([0-9]+),([0-9]+),([0-9]+),([0-9]+)[^0-9,]', 2), '') AS BIGINT) AS s_h,
           CAST(nullif(regexp_extract(dims, '^[^0-9][^0-9]([0-9]+),([0-9]+),([0-9]+),([0-9]+)[^0-9,]', 3), '') AS BIGINT) AS s_q,
           CAST(nullif(regexp_extract(dims, '^[^0-9][^0-9]([0-9]+),([0-9]+),([0-9]+),([0-9]+)[^0-9,]', 4), '') AS BIGINT) AS s_k,
           regexp_extract(mm_dims, '^[^0-9][^0-9]([0-9]+),([0-9]+),([0-9]+)[^0-9,][^0-9][^0-9]([0-9]+),([0-9]+),([0-9]+)[^0-9,]', 0) AS m3,
           regexp_extract(mm_dims, '^[^0-9][^0-9]([0-9]+),([0-9]+),([0-9]+),([0-9]+)[^0-9,][^0-9][^0-9]([0-9]+),([0-9]+),([0-9]+),([0-9]+)[^0-9,]', 0) AS m4
    FROM (SELECT *, CASE WHEN name LIKE 'aten::baddbmm%' THEN regexp_replace(dims, '^\[\[[0-9,]*\],', '[')
                         ELSE dims END AS mm_dims
          FROM keyed) AS k
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
    SELECT run_id, name, dims, rule_order, op_shape, s_b, s_h, s_q, s_k, t_n, t_x, t_y,
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
    -- the run's attention score tensors [B, H, Sq, Sk]: input 0 of the ops that a `scores` rule matches,
    -- 4-D; or 3-D [N, Sq, Sk] (kept as B = N, H = 1) when a batched matmul that a `scores_matmul` rule
    -- matches produces exactly that shape (QK^T: [N, Sq, d] x [N, d, Sk]), as CLIP-style attention and
    -- nn.MultiheadAttention compute them; a 3-D softmax that no such product feeds (logits) is no score.
    -- One read of `shaped` for both (a row of the two-row table `three` for each: 4-D, 3-D)
    SELECT DISTINCT s.run_id,
           CASE WHEN v.three THEN s.t_n ELSE s.s_b END AS b,
           CASE WHEN v.three THEN 1 ELSE s.s_h END AS h,
           CASE WHEN v.three THEN s.t_x ELSE s.s_q END AS sq,
           CASE WHEN v.three THEN s.t_y ELSE s.s_k END AS sk
    FROM shaped AS s
    LEFT JOIN shaped AS m
        ON m.op_shape = 'scores_matmul' AND m.run_id = s.run_id AND m.mm_n = s.t_n AND m.mm_x = s.t_x AND m.mm_z = s.t_y
    JOIN (VALUES (false), (true)) AS v (three)
        ON CASE WHEN v.three THEN m.run_id IS NOT NULL ELSE s.s_b IS NOT NULL END
    WHERE s.op_shape = 'scores'
),
key_hits AS (
    -- (run, op name, dims, op rule) that satisfy the rule: op_pattern and op_shape, against the run's score
    -- tensors (one pass): input 0 is a 3-D score tensor (is_scores_3d); a 4-D tensor of a score's shape, or
    -- the 4-D view [B, H, Sq, Sk] of a 3-D one with N = B * H (on_scores_4d); a batched matmul over a score
    -- tensor, B*H = N and {Sq, Sk} = {X, Z} or {X, Y} (is_scores_matmul)
    SELECT run_id, name, dims, rule_order
    FROM (
        SELECT k.run_id, k.name, k.dims, k.rule_order, k.op_shape, k.s_b,
               coalesce(bool_or(s.h = 1 AND s.b = k.t_n AND s.sq = k.t_x AND s.sk = k.t_y), false) AS is_scores_3d,
               coalesce(bool_or(s.sq = k.s_q AND s.sk = k.s_k
                                AND ((s.b = k.s_b AND s.h = k.s_h) OR (s.h = 1 AND s.b = k.s_b * k.s_h))), false)
                   AS on_scores_4d,
               coalesce(bool_or(s.b * s.h = k.mm_n
                                AND ((s.sq = k.mm_x AND (s.sk = k.mm_y OR s.sk = k.mm_z))
                                  OR (s.sk = k.mm_x AND (s.sq = k.mm_y OR s.sq = k.mm_z)))), false)
                   AS is_scores_matmul
        FROM shaped AS k
        LEFT JOIN scores AS s ON s.run_id = k.run_id
        GROUP BY k.run_id, k.name, k.dims, k.rule_order, k.op_shape, k.s_b
    ) AS f
    WHERE op_shape IS NULL
       OR (op_shape = 'scores' AND (s_b IS NOT NULL OR is_scores_3d))
       OR (op_shape = 'on_scores' AND (on_scores_4d OR is_scores_3d))
       OR (op_shape = 'scores_matmul' AND is_scores_matmul)
),
-- The walks below read each level once, and every CTE from here down is read once: Spark copies a CTE's
-- plan at each reference, so a level read by the next level and again by a union of the levels would double
-- the plan at each level. A level holds every (op, rule) found so far, `fresh` on those it found; the next
-- level keeps them and adds the children of the fresh ones (a LEFT JOIN, then a row for the parent and a
-- row for each child from the two-row table `down`).
w0 AS (
    SELECT o.run_id, o.rank, o.op_id, h.rule_order, true AS fresh
    FROM cpu_ops AS o
    JOIN key_hits AS h
        ON h.run_id = o.run_id AND h.name = o.name AND h.dims = coalesce(replace(o.input_dims, ' ', ''), '')
    WHERE o.cat = 'cpu_op' AND o.name IN (SELECT name FROM name_rules)  -- the dims cleaned of these ops only
),
-- the host ranges below a matching op, level by level (cpu_ops.parent_op_id), 4 levels down
w1 AS (
    SELECT DISTINCT d.run_id, d.rank, CASE WHEN s.down THEN c.op_id ELSE d.op_id END AS op_id, d.rule_order,
           s.down AS fresh
    FROM w0 AS d
    LEFT JOIN ops AS c ON d.fresh AND c.run_id = d.run_id AND c.rank = d.rank AND c.parent_op_id = d.op_id
    JOIN (VALUES (false), (true)) AS s (down) ON NOT s.down OR c.op_id IS NOT NULL
),
w2 AS (
    SELECT DISTINCT d.run_id, d.rank, CASE WHEN s.down THEN c.op_id ELSE d.op_id END AS op_id, d.rule_order,
           s.down AS fresh
    FROM w1 AS d
    LEFT JOIN ops AS c ON d.fresh AND c.run_id = d.run_id AND c.rank = d.rank AND c.parent_op_id = d.op_id
    JOIN (VALUES (false), (true)) AS s (down) ON NOT s.down OR c.op_id IS NOT NULL
),
w3 AS (
    SELECT DISTINCT d.run_id, d.rank, CASE WHEN s.down THEN c.op_id ELSE d.op_id END AS op_id, d.rule_order,
           s.down AS fresh
    FROM w2 AS d
    LEFT JOIN ops AS c ON d.fresh AND c.run_id = d.run_id AND c.rank = d.rank AND c.parent_op_id = d.op_id
    JOIN (VALUES (false), (true)) AS s (down) ON NOT s.down OR c.op_id IS NOT NULL
),
w4 AS (
    SELECT DISTINCT d.run_id, d.rank, CASE WHEN s.down THEN c.op_id ELSE d.op_id END AS op_id, d.rule_order,
           s.down AS fresh
    FROM w3 AS d
    LEFT JOIN ops AS c ON d.fresh AND c.run_id = d.run_id AND c.rank = d.rank AND c.parent_op_id = d.op_id
    JOIN (VALUES (false), (true)) AS s (down) ON NOT s.down OR c.op_id IS NOT NULL
),
-- module rules: the innermost nn.Module frame around the launch (python_frames), reached by walking down
-- from the matching module frames through frames that are not modules themselves, 6 levels
mod_rules AS (
    SELECT rule_order, module_pattern, module_pattern_literals FROM category_rules WHERE module_pattern IS NOT NULL
),
mod_names AS (
    SELECT n.name, r.rule_order
    FROM (SELECT DISTINCT name FROM frames WHERE is_module) AS n
    JOIN mod_rules AS r
        ON CASE WHEN coalesce(array_length(r.module_pattern_literals), 0) = 0
              OR list_bool_or(list_transform(r.module_pattern_literals, lambda l: contains(lower(n.name), l)))
             THEN regexp_matches(n.name, r.module_pattern) ELSE false END
),
m0 AS (
    SELECT f.run_id, f.rank, f.frame_id, m.rule_order, true AS fresh
    FROM frames AS f JOIN mod_names AS m ON m.name = f.name
),
m1 AS (
    SELECT DISTINCT d.run_id, d.rank, CASE WHEN s.down THEN c.frame_id ELSE d.frame_id END AS frame_id,
           d.rule_order, s.down AS fresh
    FROM m0 AS d
    LEFT JOIN frames AS c
        ON d.fresh AND c.run_id = d.run_id AND c.rank = d.rank AND c.parent_frame_id = d.frame_id AND NOT c.is_module
    JOIN (VALUES (false), (true)) AS s (down) ON NOT s.down OR c.frame_id IS NOT NULL
),
m2 AS (
    SELECT DISTINCT d.run_id, d.rank, CASE WHEN s.down THEN c.frame_id ELSE d.frame_id END AS frame_id,
           d.rule_order, s.down AS fresh
    FROM m1 AS d
    LEFT JOIN frames AS c
        ON d.fresh AND c.run_id = d.run_id AND c.rank = d.rank AND c.parent_frame_id = d.frame_id AND NOT c.is_module
    JOIN (VALUES (false), (true)) AS s (down) ON NOT s.down OR c.frame_id IS NOT NULL
),
m3 AS (
    SELECT DISTINCT d.run_id, d.rank, CASE WHEN s.down THEN c.frame_id ELSE d.frame_id END AS frame_id,
           d.rule_order, s.down AS fresh
    FROM m2 AS d
    LEFT JOIN frames AS c
        ON d.fresh AND c.run_id = d.run_id AND c.rank = d.rank AND c.parent_frame_id = d.frame_id AND NOT c.is_module
    JOIN (VALUES (false), (true)) AS s (down) ON NOT s.down OR c.frame_id IS NOT NULL
),
m4 AS (
    SELECT DISTINCT d.run_id, d.rank, CASE WHEN s.down THEN c.frame_id ELSE d.frame_id END AS frame_id,
           d.rule_order, s.down AS fresh
    FROM m3 AS d
    LEFT JOIN frames AS c
        ON d.fresh AND c.run_id = d.run_id AND c.rank = d.rank AND c.parent_frame_id = d.frame_id AND NOT c.is_module
    JOIN (VALUES (false), (true)) AS s (down) ON NOT s.down OR c.frame_id IS NOT NULL
),
m5 AS (
    SELECT DISTINCT d.run_id, d.rank, CASE WHEN s.down THEN c.frame_id ELSE d.frame_id END AS frame_id,
           d.rule_order, s.down AS fresh
    FROM m4 AS d
    LEFT JOIN frames AS c
        ON d.fresh AND c.run_id = d.run_id AND c.rank = d.rank AND c.parent_frame_id = d.frame_id AND NOT c.is_module
    JOIN (VALUES (false), (true)) AS s (down) ON NOT s.down OR c.frame_id IS NOT NULL
),
m6 AS (
    SELECT DISTINCT d.run_id, d.rank, CASE WHEN s.down THEN c.frame_id ELSE d.frame_id END AS frame_id,
           d.rule_order, s.down AS fresh
    FROM m5 AS d
    LEFT JOIN frames AS c
        ON d.fresh AND c.run_id = d.run_id AND c.rank = d.rank AND c.parent_frame_id = d.frame_id AND NOT c.is_module
    JOIN (VALUES (false), (true)) AS s (down) ON NOT s.down OR c.frame_id IS NOT NULL
),
hit_activities AS (
    -- (activity, rule) for every op rule reaching the activity's launch: through its launching op, or its
    -- innermost Python frame (the same pair may come twice)
    SELECT k.run_id, k.rank, k.kernel_id, k.name, k.kind, u.rule_order
    FROM kernels AS k
    JOIN (SELECT DISTINCT run_id, rank, op_id, rule_order FROM w4) AS u
        ON u.run_id = k.run_id AND u.rank = k.rank AND u.op_id = k.cpu_op_id
    WHERE k.kind NOT IN ('memcpy', 'memset')
    UNION ALL
    SELECT k.run_id, k.rank, k.kernel_id, k.name, k.kind, m.rule_order
    FROM kernels AS k
    JOIN (SELECT DISTINCT run_id, rank, frame_id, rule_order FROM m6) AS m
        ON m.run_id = k.run_id AND m.rank = k.rank AND m.frame_id = k.python_frame_id
    WHERE k.kind NOT IN ('memcpy', 'memset')
),
-- A name's pattern is tried on the first row of each distinct name (a window's row_number) and its answer
-- given to the name's other rows by a window, rather than by a DISTINCT of the names joined back (a second
-- read of everything above)
hit_names AS (
    -- the op rule's name pattern, tried once per distinct (name, kind, rule)
    SELECT a.run_id, a.rank, a.kernel_id, a.name, a.kind, a.rule_order,
           bool_or(CASE WHEN a.nth = 1 THEN
                   CASE WHEN coalesce(array_length(r.pattern_literals), 0) = 0
                         OR list_bool_or(list_transform(r.pattern_literals, lambda l: contains(lower(a.name), l)))
                        THEN regexp_matches(a.name, r.pattern) ELSE false END
               END) OVER (PARTITION BY a.name, a.kind, a.rule_order) AS name_ok
    FROM (SELECT *, row_number() OVER (PARTITION BY name, kind, rule_order ORDER BY run_id, rank, kernel_id) AS nth
          FROM hit_activities) AS a
    JOIN category_rules AS r ON r.rule_order = a.rule_order
),
best_op AS (
    SELECT run_id, rank, kernel_id, name, kind, min(rule_order) AS rule_order
    FROM hit_names
    WHERE name_ok
    GROUP BY run_id, rank, kernel_id, name, kind
),
plain AS (
    -- the rule_order kernel_category gives these names (its first name-only rule), for the few names here
    -- (not a join with kernel_category, which would list every name of the run again), tried once per
    -- distinct (name, kind): name_order
    SELECT b.run_id, b.rank, b.kernel_id, b.rule_order,
           min(min(r.rule_order)) OVER (PARTITION BY b.name, b.kind) AS name_order
    FROM (SELECT *, row_number() OVER (PARTITION BY name, kind ORDER BY run_id, rank, kernel_id) AS nth
          FROM best_op) AS b
    LEFT JOIN category_rules AS r
        ON b.nth = 1 AND r.op_pattern IS NULL AND r.module_pattern IS NULL
        AND CASE WHEN coalesce(array_length(r.pattern_literals), 0) = 0
              OR list_bool_or(list_transform(r.pattern_literals, lambda l: contains(lower(b.name), l)))
             THEN regexp_matches(b.name, r.pattern) ELSE false END
    GROUP BY b.run_id, b.rank, b.kernel_id, b.name, b.kind, b.rule_order
)
SELECT p.run_id, p.rank, p.kernel_id, r.category, r.rule_name
FROM plain AS p
JOIN category_rules AS r ON r.rule_order = p.rule_order
WHERE p.name_order IS NULL OR p.rule_order < p.name_order;

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
--                      (scaling, masking, dropout, casts of the scores);
--   * if it has a `module_pattern` (instead of an op_pattern): the innermost `nn.Module: Name_N` Python frame
--     around the launch (traces recorded with with_stack=True) matches it: the launch's innermost frame
--     (kernels.python_frame_id) is that module frame or lies at most 6 frames below it without a nested
--     nn.Module frame in between (an nn.Linear inside a norm module is the Linear's). Used for modules whose
--     every kernel is one operation in eager mode: an RMSNorm module's to/pow/mean/rsqrt/mul kernels are
--     the norm, not elementwise work.
-- Memcpy and memset activities are `memory` by their kind, before any rule. Activities that no op rule
-- matches take their name's category from kernel_category (the name-only rules); a name no rule matches is
-- `other`. So a kernel name is `attention` under an attention-shaped aten::bmm and `gemm` under aten::mm.
-- Method (narrow joins, no regex per activity; the op part is the helper _category_override): op_pattern is tried once per distinct cpu_op name; the dims
-- are parsed once per distinct (run, op name, dims) of the ops it matches; the ops that satisfy a rule and
-- their descendants (4 levels, joins on op ids) give the launching ops a rule applies to; the activities
-- launched from those ops are then tested against the rule's name pattern once per distinct name.
-- Columns:
--   run_id, rank, kernel_id  VARCHAR, INTEGER, BIGINT  the activity (kernels)
--   category                 VARCHAR  its category (the vocabulary of kernel_category)
--   rule_name                VARCHAR  the rule that decided (kernel_category.rule_name for name decisions)
--   by_op                    BOOLEAN  TRUE when a rule with an op_pattern or module_pattern decided (the
--                            launching op or module mattered)
CREATE OR REPLACE VIEW activity_category AS
SELECT
    k.run_id,
    k.rank,
    k.kernel_id,
    coalesce(o.category, c.category, 'other') AS category,
    coalesce(o.rule_name, c.rule_name, 'unmatched') AS rule_name,
    o.rule_name IS NOT NULL AS by_op
FROM kernels AS k
LEFT JOIN kernel_category AS c ON c.name = k.name AND c.kind = k.kind
LEFT JOIN _category_override AS o ON o.run_id = k.run_id AND o.rank = k.rank AND o.kernel_id = k.kernel_id;

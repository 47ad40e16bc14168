-- _op_work: helper of kernel_roofline. One row per (launching op, op) pair where the op (cpu_op) launched GPU kernels and its
-- work the trace's shapes determine: its FLOPs and the bytes it must move, from `Input Dims` and
-- `Input type` (recorded with record_shapes=True). The op is the kernel's launching op (kernels.cpu_op_id,
-- the innermost cpu_op around the launch) or, when that one has no formula, its parent or grandparent
-- (aten::linear around a bias-less aten::mm is the mm's; SDPA around its backend is the backend's).
-- Formulas (elt = bytes per element of the input's dtype; dims as recorded):
--   gemm  aten::mm [M,K]x[K,N], aten::addmm [bias],[M,K],[K,N], aten::_scaled_mm / scaled_mm (FP8),
--              aten::bmm / aten::baddbmm [B,M,K]x[B,K,N], aten::linear [..,K]x[N,K] (M = product of the
--              leading dims): flops = 2·B·M·N·K; bytes = B·(M·K·elt_A + K·N·elt_B + M·N·elt_out), elt_out =
--              elt_A (2 bytes for an FP8 _scaled_mm, whose output is BF16/FP16): each matrix moved once, the
--              least any kernel can move
--   attention  SDPA and its backends with 4-D inputs: aten::_flash_attention_forward /
--              _efficient_attention_forward ([B,S,H,D]), aten::scaled_dot_product_attention /
--              _scaled_dot_product_{flash,efficient,cudnn}_attention ([B,H,S,D]):
--              flops = 4·B·H·Sq·Sk·D (QK^T and PV over the full score matrix: the is_causal flag is not
--              recorded in Input Dims, so a causal kernel does about half of it);
--              bytes = (2·B·H·Sq·D + 2·B·Hkv·Sk·D)·elt (Q, O, K, V once)
--              varlen / paged attention (flash_attn_varlen, mha_varlen, mha_batch_prefill, paged_attention,
--              unified_attention, *decode_attention, *extend_attention) with input 0 [T,H,D]: from the
--              step's batch composition (steps.sum_q_kv, kv_tokens, both stated by detailed annotations):
--              flops = 4·H·D·Σ(N_Q·N_KV); bytes = (2·T·H·D + 2·Hkv·D·Σ N_KV)·elt, Hkv from input 1's
--              second dim; NULL without a detailed annotation
--   norm, elementwise  (bytes only) aten elementwise ops (add, sub, mul, div, silu, gelu, relu, sigmoid,
--              tanh, exp, pow, rsqrt, neg, where, clamp, copy_ and their in-place forms) and norms
--              (layer_norm, native_layer_norm, rms_norm, group_norm, aiter/vllm/sgl rmsnorm ops): bytes = Σ
--              over tensor inputs of numel·elt (each read once) + numel(input 0)·elt(input 0) (an output of
--              input 0's shape written once; copy_ writes its input 0, counted already; an out= variant (a
--              tensor after the functional form's arguments: mul.out [[a],[],[a]]) and a custom (non-aten) op
--              are given their output buffer as an input: Σ inputs only): more than the traffic when an input
--              broadcasts (a stride-0 view is read once, its dims show the full shape; kernel_roofline leaves
--              a rate over the peak out), less when an op works in place
-- A dtype without a known element size (or an op whose dims are missing) gets no row: silent, not guessed.
-- Columns:
--   run_id, rank, op_id   VARCHAR, INTEGER, BIGINT  the op whose work it is (cpu_ops)
--   launch_op_id          BIGINT  the kernels' launching op (kernels.cpu_op_id): op_id itself or an op inside
--                            it
--   op_name               VARCHAR  its name
--   family                VARCHAR  gemm, attention, norm, elementwise
--   dtype                 VARCHAR  input 0's type as recorded (c10::BFloat16, float, c10::Float8_e4m3fn ...)
--   precision             VARCHAR  the peak it is held to: bf16 (FP16/BF16), fp8, fp4, fp32, or NULL (bytes
--                            only)
--   flops                 DOUBLE  floating-point operations (NULL: bytes-only family)
--   bytes                 DOUBLE  bytes the op must move to and from memory
--   dims                  VARCHAR  the Input Dims text
CREATE OR REPLACE VIEW _op_work AS
WITH launched AS (
    SELECT DISTINCT run_id, rank, cpu_op_id AS op_id FROM kernels WHERE kind = 'kernel' AND cpu_op_id IS NOT NULL
),
chain AS (
    -- the launching op and up to two ops around it, nearest first
    SELECT l.run_id, l.rank, l.op_id AS launch_op_id, o.op_id, o.name, o.input_dims, o.input_types, 0 AS up
    FROM launched AS l JOIN cpu_ops AS o ON o.run_id = l.run_id AND o.rank = l.rank AND o.op_id = l.op_id
    UNION ALL
    SELECT l.run_id, l.rank, l.op_id, p.op_id, p.name, p.input_dims, p.input_types, 1
    FROM launched AS l
    JOIN cpu_ops AS o ON o.run_id = l.run_id AND o.rank = l.rank AND o.op_id = l.op_id
    JOIN cpu_ops AS p ON p.run_id = o.run_id AND p.rank = o.rank AND p.op_id = o.parent_op_id
    UNION ALL
    SELECT l.run_id, l.rank, l.op_id, g.op_id, g.name, g.input_dims, g.input_types, 2
    FROM launched AS l
    JOIN cpu_ops AS o ON o.run_id = l.run_id AND o.rank = l.rank AND o.op_id = l.op_id
    JOIN cpu_ops AS p ON p.run_id = o.run_id AND p.rank = o.rank AND p.op_id = o.parent_op_id
    JOIN cpu_ops AS g ON g.run_id = p.run_id AND g.rank = p.rank AND g.op_id = p.parent_op_id
),
parsed AS (
    SELECT *,
           TRY_CAST(json(input_dims) AS BIGINT[][]) AS d,
           TRY_CAST(json(input_types) AS VARCHAR[]) AS t,
           CASE WHEN regexp_matches(name, '^aten::(mm|addmm|_scaled_mm|bmm|baddbmm|linear|matmul)$|^(vllm|sgl_kernel|_C)::.*scaled_mm') THEN 'gemm'
                WHEN regexp_matches(name, '^aten::(_flash_attention_forward|_efficient_attention_forward)$') THEN 'attention_bshd'
                WHEN regexp_matches(name, '^aten::(scaled_dot_product_attention|_scaled_dot_product_(flash|efficient|cudnn)_attention)$') THEN 'attention_bhsd'
                WHEN regexp_matches(name, '(?i)(flash_attn_varlen|mha_varlen|mha_batch_prefill|paged_attention|unified_attention|decode_attention|extend_attention)') THEN 'attention_varlen'
                WHEN regexp_matches(name, '(?i)^aten::(native_)?(layer_norm|group_norm|rms_norm)$|^(aiter|vllm|sgl_kernel|_C)::.*(rms_?norm|layer_?norm)') THEN 'norm'
                WHEN regexp_matches(name, '^aten::(add|sub|mul|div|silu|gelu|relu|sigmoid|tanh|exp|pow|rsqrt|neg|where|clamp|copy)_?$') THEN 'elementwise'
           END AS formula
    FROM chain
),
picked AS (
    -- the nearest op of the chain that has a formula
    SELECT * FROM (
        SELECT *, ROW_NUMBER() OVER (PARTITION BY run_id, rank, launch_op_id ORDER BY up) AS rn
        FROM parsed WHERE formula IS NOT NULL AND d IS NOT NULL AND t IS NOT NULL
    ) WHERE rn = 1
),
typed AS (
    SELECT p.*,
           list_transform(t, lambda x: CASE
               WHEN x IN ('c10::BFloat16', 'c10::Half') THEN 2
               WHEN x = 'float' THEN 4 WHEN x = 'double' THEN 8
               WHEN x LIKE 'c10::Float8%' THEN 1
               WHEN x = 'long int' THEN 8 WHEN x = 'int' THEN 4
               WHEN x IN ('bool', 'unsigned char', 'signed char', 'c10::Float4_e2m1fn_x2') THEN 1 END) AS elt,
           list_transform(d, lambda x: CASE WHEN array_length(x) = 0 THEN 0 ELSE list_reduce(x, lambda a, b: a * b) END) AS numel,
           CASE WHEN t[1] IN ('c10::BFloat16', 'c10::Half') THEN 'bf16' WHEN t[1] LIKE 'c10::Float8%' THEN 'fp8'
                WHEN t[1] = 'c10::Float4_e2m1fn_x2' THEN 'fp4' WHEN t[1] = 'float' THEN 'fp32' END AS prec
    FROM picked AS p
),
gemm AS (
    -- (b, m, k, n, A index, B index) of each gemm form
    SELECT *,
           CASE WHEN name IN ('aten::addmm') AND array_length(d) >= 3 AND array_length(d[2]) = 2 AND array_length(d[3]) = 2 AND d[2][2] = d[3][1] THEN [1, d[2][1], d[2][2], d[3][2], 2, 3]
                WHEN name = 'aten::baddbmm' AND array_length(d) >= 3 AND array_length(d[2]) = 3 AND array_length(d[3]) = 3 AND d[2][3] = d[3][2] THEN [d[2][1], d[2][2], d[2][3], d[3][3], 2, 3]
                WHEN name IN ('aten::bmm', 'aten::matmul') AND array_length(d) >= 2 AND array_length(d[1]) = 3 AND array_length(d[2]) = 3
                     AND d[1][1] = d[2][1] AND d[1][3] = d[2][2] THEN [d[1][1], d[1][2], d[1][3], d[2][3], 1, 2]
                WHEN name = 'aten::linear' AND array_length(d) >= 2 AND array_length(d[1]) >= 2 AND array_length(d[2]) = 2 AND d[1][-1] = d[2][2]
                     THEN [1, list_reduce(d[1][1:-2], lambda a, b: a * b, 1::BIGINT), d[2][2], d[2][1], 1, 2]
                WHEN array_length(d) >= 2 AND array_length(d[1]) = 2 AND array_length(d[2]) = 2 AND d[1][2] = d[2][1] THEN [1, d[1][1], d[1][2], d[2][2], 1, 2]
           END AS g
    FROM typed WHERE formula = 'gemm'
),
gemm_work AS (
    SELECT run_id, rank, launch_op_id, op_id, name, 'gemm' AS family, t[1] AS dtype, prec, input_dims,
           2.0 * g[1] * g[2] * g[3] * g[4] AS flops,
           CAST(g[1] AS DOUBLE) * (g[2] * g[3] * elt[g[5]] + g[3] * g[4] * elt[g[6]]
                                   + g[2] * g[4] * CASE WHEN prec = 'fp8' THEN 2 ELSE elt[g[5]] END) AS bytes
    FROM gemm WHERE g IS NOT NULL AND elt[g[5]] IS NOT NULL AND elt[g[6]] IS NOT NULL
),
attn_dense AS (
    SELECT run_id, rank, launch_op_id, op_id, name, 'attention' AS family, t[1] AS dtype, prec, input_dims,
           4.0 * b * h * sq * sk * hd AS flops,
           (2.0 * b * h * sq * hd + 2.0 * b * hkv * sk * hd) * elt[1] AS bytes
    FROM (
        SELECT *,
               d[1][1] AS b,
               CASE WHEN formula = 'attention_bshd' THEN d[1][3] ELSE d[1][2] END AS h,
               CASE WHEN formula = 'attention_bshd' THEN d[1][2] ELSE d[1][3] END AS sq,
               CASE WHEN formula = 'attention_bshd' THEN d[2][2] ELSE d[2][3] END AS sk,
               CASE WHEN formula = 'attention_bshd' THEN d[2][3] ELSE d[2][2] END AS hkv,
               d[1][4] AS hd
        FROM typed
        WHERE formula IN ('attention_bshd', 'attention_bhsd') AND array_length(d) >= 3 AND array_length(d[1]) = 4 AND array_length(d[2]) = 4
              AND d[1][4] = d[2][4] AND d[1][1] = d[2][1]
    ) WHERE elt[1] IS NOT NULL
),
op_step AS (
    -- the step of a varlen attention op: that of its kernels
    SELECT run_id, rank, cpu_op_id AS op_id, any_value(step) AS step
    FROM kernels WHERE kind = 'kernel' AND step IS NOT NULL
    GROUP BY run_id, rank, cpu_op_id
),
attn_varlen AS (
    SELECT v.run_id, v.rank, v.launch_op_id, v.op_id, v.name, 'attention' AS family, v.t[1] AS dtype, v.prec, v.input_dims,
           4.0 * v.d[1][2] * v.d[1][3] * s.sum_q_kv AS flops,
           (2.0 * v.d[1][1] * v.d[1][2] * v.d[1][3] + 2.0 * v.d[2][2] * v.d[1][3] * s.kv_tokens) * v.elt[1] AS bytes
    FROM typed AS v
    JOIN op_step AS os ON os.run_id = v.run_id AND os.rank = v.rank AND os.op_id = v.launch_op_id
    JOIN steps AS s ON s.run_id = v.run_id AND s.rank = v.rank AND s.step = os.step
    WHERE v.formula = 'attention_varlen' AND array_length(v.d) >= 2 AND array_length(v.d[1]) = 3 AND array_length(v.d[2]) = 3
          AND v.d[1][3] = v.d[2][3] AND v.d[1][1] = s.tokens AND s.sum_q_kv IS NOT NULL AND s.kv_tokens IS NOT NULL
          AND v.elt[1] IS NOT NULL
),
memory_bound AS (
    SELECT run_id, rank, launch_op_id, op_id, name, family, t[1] AS dtype, NULL AS prec, input_dims, CAST(NULL AS DOUBLE) AS flops,
           CAST(list_sum(list_transform(list_zip(numel, elt), lambda x: x[1] * x[2])) AS DOUBLE)
             + CASE WHEN name = 'aten::copy_' OR name NOT LIKE 'aten::%' OR has_out THEN 0 ELSE numel[1] * elt[1] END AS bytes
    FROM (
        SELECT *, coalesce(array_length(d) > slots AND array_length(d[slots + 1]) > 0, false) AS has_out
        FROM (
            SELECT *, CASE WHEN formula = 'norm' THEN 'norm' ELSE 'elementwise' END AS family,
                   -- the functional form has this many arguments: a tensor after them is the out= buffer of the op
                   CASE regexp_replace(name, '_$', '')
                        WHEN 'aten::add' THEN 3 WHEN 'aten::sub' THEN 3 WHEN 'aten::where' THEN 3
                        WHEN 'aten::clamp' THEN 3 WHEN 'aten::mul' THEN 2 WHEN 'aten::div' THEN 2
                        WHEN 'aten::pow' THEN 2 WHEN 'aten::gelu' THEN 2 WHEN 'aten::copy' THEN 3 ELSE 1 END AS slots
            FROM typed
            WHERE formula IN ('norm', 'elementwise') AND array_length(d) >= 1 AND array_length(d[1]) > 0
        )
    ) AS m
    -- every tensor input has a known element size
    WHERE list_bool_and(list_transform(list_zip(numel, elt), lambda x: x[1] = 0 OR x[2] IS NOT NULL))
),
work AS (
    SELECT * FROM gemm_work UNION ALL SELECT * FROM attn_dense UNION ALL SELECT * FROM attn_varlen
    UNION ALL SELECT * FROM memory_bound
)
SELECT run_id, rank, launch_op_id, op_id, name AS op_name, family, dtype, prec AS precision, flops, bytes, input_dims AS dims
FROM work
WHERE bytes > 0;

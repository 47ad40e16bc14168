-- _batch_annotation: helper of steps. One row per host annotation (user_annotation) that states a serving
-- step's batch composition, with what it states parsed. The formats (as the frameworks write them):
--   SGLang   step[DECODE bs=64]  step[EXTEND bs=2 toks=14721]  step[MIXED bs=5 c=2 g=3 ...]; with its
--            roofline annotations the group terms c_sq c_sk c_sqsq c_sqsk / g_sq g_sk g_sqsq g_sqsk
--   vLLM     execute_context_<c>(<Σq>)_generation_<g>(<Σq>)                        (native)
--            execute_<tokens>_context_<c>(sq<Σq>sk<Σkv>sqsq<Σq²>sqsk<Σq·kv>)_generation_<g>(...)
--            (detailed; SGLang's roofline annotations write the same text around its step)
--   ATOM     prefill[bs=2 tok=14721 ctx=[..] sqsq=.. sqsk=.. sk=..]
--            decode[bs=117/128 tok=117 p=0 d=117 spec=3 sqsq=.. sqsk=.. sk=..] (bs=real/padded graph size)
-- q is a request's query (new) tokens in the step, kv its attended (KV) tokens; Σ over the requests of
-- the group. "context" / EXTEND / prefill requests are prefill, "generation" / DECODE are decode.
-- A figure the text does not state is NULL (never guessed): step[DECODE bs=64] says 64 decode requests
-- and, one query token each, 64 decode tokens; step[MIXED bs=2] says 2 requests and no split.
-- Columns:
--   run_id, rank, op_id  VARCHAR, INTEGER, BIGINT  the annotation (cpu_ops)
--   name                 VARCHAR  its text
--   start_ns, end_ns     BIGINT  its host window
--   batch_format         VARCHAR  sglang, sglang_roofline, vllm, vllm_detailed, atom, atom_detailed
--   detailed             BOOLEAN  true when it states the attention terms (Σq², Σq·kv)
--   batch_size           BIGINT  requests (sequences) in the step: SGLang/ATOM bs (the real one, not the
--                        padded graph size), vLLM context + generation requests
--   prefill_requests, decode_requests   BIGINT  requests of each group (NULL: not stated)
--   prefill_tokens, decode_tokens       BIGINT  Σq of each group (NULL: not stated)
--   tokens               BIGINT  query tokens of the step: the stated total (vLLM's leading number, SGLang
--                        toks, ATOM tok), else prefill_tokens + decode_tokens
--   kv_tokens            BIGINT  Σkv over the step's requests (detailed only)
--   sum_q_sq, sum_q_kv   BIGINT  Σq² and Σq·kv over the step's requests (detailed only): the attention terms
CREATE OR REPLACE VIEW _batch_annotation AS
WITH ann AS (
    SELECT run_id, rank, op_id, name, start_ns, start_ns + dur_ns AS end_ns
    FROM cpu_ops
    WHERE lower(cat) = 'user_annotation'
      AND (name LIKE 'step[%' OR name LIKE 'execute\_%' ESCAPE '\' OR name LIKE 'prefill[%' OR name LIKE 'decode[%')
),
kv AS (
    -- key=value fields of SGLang and ATOM texts (absent: NULL)
    SELECT *,
           TRY_CAST(nullif(regexp_extract(name, '[\[ ]bs=([0-9]+)', 1), '') AS BIGINT) AS f_bs,
           TRY_CAST(nullif(regexp_extract(name, '[\[ ]toks?=([0-9]+)', 1), '') AS BIGINT) AS f_tok,
           TRY_CAST(nullif(regexp_extract(name, '[\[ ]c=([0-9]+)', 1), '') AS BIGINT) AS f_c,
           TRY_CAST(nullif(regexp_extract(name, '[\[ ]g=([0-9]+)', 1), '') AS BIGINT) AS f_g,
           TRY_CAST(nullif(regexp_extract(name, '[\[ ]p=([0-9]+)', 1), '') AS BIGINT) AS f_p,
           TRY_CAST(nullif(regexp_extract(name, '[\[ ]d=([0-9]+)', 1), '') AS BIGINT) AS f_d,
           TRY_CAST(nullif(regexp_extract(name, '[\[ ]c_sq=([0-9]+)', 1), '') AS BIGINT) AS f_c_sq,
           TRY_CAST(nullif(regexp_extract(name, '[\[ ]c_sk=([0-9]+)', 1), '') AS BIGINT) AS f_c_sk,
           TRY_CAST(nullif(regexp_extract(name, '[\[ ]c_sqsq=([0-9]+)', 1), '') AS BIGINT) AS f_c_sqsq,
           TRY_CAST(nullif(regexp_extract(name, '[\[ ]c_sqsk=([0-9]+)', 1), '') AS BIGINT) AS f_c_sqsk,
           TRY_CAST(nullif(regexp_extract(name, '[\[ ]g_sq=([0-9]+)', 1), '') AS BIGINT) AS f_g_sq,
           TRY_CAST(nullif(regexp_extract(name, '[\[ ]g_sk=([0-9]+)', 1), '') AS BIGINT) AS f_g_sk,
           TRY_CAST(nullif(regexp_extract(name, '[\[ ]g_sqsq=([0-9]+)', 1), '') AS BIGINT) AS f_g_sqsq,
           TRY_CAST(nullif(regexp_extract(name, '[\[ ]g_sqsk=([0-9]+)', 1), '') AS BIGINT) AS f_g_sqsk,
           TRY_CAST(nullif(regexp_extract(name, '[\[ ]sk=([0-9]+)', 1), '') AS BIGINT) AS f_sk,
           TRY_CAST(nullif(regexp_extract(name, '[\[ ]sqsq=([0-9]+)', 1), '') AS BIGINT) AS f_sqsq,
           TRY_CAST(nullif(regexp_extract(name, '[\[ ]sqsk=([0-9]+)', 1), '') AS BIGINT) AS f_sqsk,
           upper(regexp_extract(name, '^step\[\s*([A-Za-z]+)', 1)) AS sgl_mode
    FROM ann
),
sglang AS (
    SELECT run_id, rank, op_id, name, start_ns, end_ns,
           CASE WHEN f_c_sqsq IS NOT NULL OR f_g_sqsq IS NOT NULL THEN 'sglang_roofline' ELSE 'sglang' END AS batch_format,
           f_bs AS batch_size,
           CASE WHEN sgl_mode IN ('EXTEND', 'PREFILL') THEN coalesce(f_c, f_bs) WHEN sgl_mode = 'DECODE' THEN 0
                ELSE f_c END AS prefill_requests,
           CASE WHEN sgl_mode = 'DECODE' THEN coalesce(f_g, f_bs) WHEN sgl_mode IN ('EXTEND', 'PREFILL') THEN 0
                ELSE f_g END AS decode_requests,
           CASE WHEN sgl_mode IN ('EXTEND', 'PREFILL') THEN coalesce(f_c_sq, f_tok) WHEN sgl_mode = 'DECODE' THEN 0
                ELSE f_c_sq END AS prefill_tokens,
           -- a plain decode step: one query token per request (speculative decoding states g_sq)
           CASE WHEN sgl_mode = 'DECODE' THEN coalesce(f_g_sq, f_bs) WHEN sgl_mode IN ('EXTEND', 'PREFILL') THEN 0
                ELSE f_g_sq END AS decode_tokens,
           f_tok AS stated_tokens,
           CASE WHEN f_c_sk IS NOT NULL OR f_g_sk IS NOT NULL THEN coalesce(f_c_sk, 0) + coalesce(f_g_sk, 0) END AS kv_tokens,
           CASE WHEN f_c_sqsq IS NOT NULL OR f_g_sqsq IS NOT NULL THEN coalesce(f_c_sqsq, 0) + coalesce(f_g_sqsq, 0) END AS sum_q_sq,
           CASE WHEN f_c_sqsk IS NOT NULL OR f_g_sqsk IS NOT NULL THEN coalesce(f_c_sqsk, 0) + coalesce(f_g_sqsk, 0) END AS sum_q_kv
    FROM kv
    WHERE name LIKE 'step[%'
),
vllm_detailed AS (
    SELECT run_id, rank, op_id, name, start_ns, end_ns, 'vllm_detailed' AS batch_format,
           c + g AS batch_size, c AS prefill_requests, g AS decode_requests,
           c_sq AS prefill_tokens, g_sq AS decode_tokens, tok AS stated_tokens,
           c_sk + g_sk AS kv_tokens, c_sqsq + g_sqsq AS sum_q_sq, c_sqsk + g_sqsk AS sum_q_kv
    FROM (
        SELECT *,
               CAST(regexp_extract(name, '^execute_([0-9]+)_context_', 1) AS BIGINT) AS tok,
               CAST(regexp_extract(name, '_context_([0-9]+)\(sq([0-9]+)sk([0-9]+)sqsq([0-9]+)sqsk([0-9]+)\)', 1) AS BIGINT) AS c,
               CAST(regexp_extract(name, '_context_([0-9]+)\(sq([0-9]+)sk([0-9]+)sqsq([0-9]+)sqsk([0-9]+)\)', 2) AS BIGINT) AS c_sq,
               CAST(regexp_extract(name, '_context_([0-9]+)\(sq([0-9]+)sk([0-9]+)sqsq([0-9]+)sqsk([0-9]+)\)', 3) AS BIGINT) AS c_sk,
               CAST(regexp_extract(name, '_context_([0-9]+)\(sq([0-9]+)sk([0-9]+)sqsq([0-9]+)sqsk([0-9]+)\)', 4) AS BIGINT) AS c_sqsq,
               CAST(regexp_extract(name, '_context_([0-9]+)\(sq([0-9]+)sk([0-9]+)sqsq([0-9]+)sqsk([0-9]+)\)', 5) AS BIGINT) AS c_sqsk,
               CAST(regexp_extract(name, '_generation_([0-9]+)\(sq([0-9]+)sk([0-9]+)sqsq([0-9]+)sqsk([0-9]+)\)', 1) AS BIGINT) AS g,
               CAST(regexp_extract(name, '_generation_([0-9]+)\(sq([0-9]+)sk([0-9]+)sqsq([0-9]+)sqsk([0-9]+)\)', 2) AS BIGINT) AS g_sq,
               CAST(regexp_extract(name, '_generation_([0-9]+)\(sq([0-9]+)sk([0-9]+)sqsq([0-9]+)sqsk([0-9]+)\)', 3) AS BIGINT) AS g_sk,
               CAST(regexp_extract(name, '_generation_([0-9]+)\(sq([0-9]+)sk([0-9]+)sqsq([0-9]+)sqsk([0-9]+)\)', 4) AS BIGINT) AS g_sqsq,
               CAST(regexp_extract(name, '_generation_([0-9]+)\(sq([0-9]+)sk([0-9]+)sqsq([0-9]+)sqsk([0-9]+)\)', 5) AS BIGINT) AS g_sqsk
        FROM ann
        WHERE regexp_matches(name, '^execute_([0-9]+)_context_([0-9]+)\(sq([0-9]+)sk([0-9]+)sqsq([0-9]+)sqsk([0-9]+)\)_generation_([0-9]+)\(sq([0-9]+)sk([0-9]+)sqsq([0-9]+)sqsk([0-9]+)\)')
    )
),
vllm_native AS (
    -- execute_[<tokens>_]context_<c>(<Σq>[_...])_generation_<g>(<Σq>[_...])
    SELECT run_id, rank, op_id, name, start_ns, end_ns, 'vllm' AS batch_format,
           c + g AS batch_size, c AS prefill_requests, g AS decode_requests,
           c_q AS prefill_tokens, g_q AS decode_tokens, tok AS stated_tokens,
           CAST(NULL AS BIGINT) AS kv_tokens, CAST(NULL AS BIGINT) AS sum_q_sq, CAST(NULL AS BIGINT) AS sum_q_kv
    FROM (
        SELECT *,
               TRY_CAST(nullif(regexp_extract(name, '^execute_([0-9]+)_context_', 1), '') AS BIGINT) AS tok,
               TRY_CAST(regexp_extract(name, 'context_([0-9]+)\(([0-9]+)', 1) AS BIGINT) AS c,
               TRY_CAST(regexp_extract(name, 'context_([0-9]+)\(([0-9]+)', 2) AS BIGINT) AS c_q,
               TRY_CAST(regexp_extract(name, 'generation_([0-9]+)\(([0-9]+)', 1) AS BIGINT) AS g,
               TRY_CAST(regexp_extract(name, 'generation_([0-9]+)\(([0-9]+)', 2) AS BIGINT) AS g_q
        FROM ann
        WHERE regexp_matches(name, '^execute_([0-9]+_)?context_[0-9]+\([0-9]+[^)]*\)_generation_[0-9]+\([0-9]+')
    )
),
atom AS (
    SELECT run_id, rank, op_id, name, start_ns, end_ns,
           CASE WHEN f_sqsq IS NOT NULL THEN 'atom_detailed' ELSE 'atom' END AS batch_format,
           f_bs AS batch_size,
           CASE WHEN name LIKE 'prefill[%' THEN f_bs ELSE coalesce(f_p, 0) END AS prefill_requests,
           CASE WHEN name LIKE 'prefill[%' THEN 0 ELSE coalesce(f_d, f_bs - coalesce(f_p, 0)) END AS decode_requests,
           -- a decode[] step that also carries prefill requests (p>0) states only the total tokens
           CASE WHEN name LIKE 'prefill[%' THEN f_tok WHEN coalesce(f_p, 0) = 0 THEN 0 END AS prefill_tokens,
           CASE WHEN name LIKE 'prefill[%' THEN 0 WHEN coalesce(f_p, 0) = 0 THEN f_tok END AS decode_tokens,
           f_tok AS stated_tokens, f_sk AS kv_tokens, f_sqsq AS sum_q_sq, f_sqsk AS sum_q_kv
    FROM kv
    WHERE name LIKE 'prefill[%' OR name LIKE 'decode[%'
)
SELECT run_id, rank, op_id, name, start_ns, end_ns, batch_format,
       sum_q_sq IS NOT NULL AND sum_q_kv IS NOT NULL AS detailed,
       batch_size, prefill_requests, decode_requests, prefill_tokens, decode_tokens,
       coalesce(stated_tokens, prefill_tokens + decode_tokens) AS tokens,
       kv_tokens, sum_q_sq, sum_q_kv
FROM (
    SELECT * FROM sglang
    UNION ALL SELECT * FROM vllm_detailed
    UNION ALL SELECT * FROM vllm_native
    UNION ALL SELECT * FROM atom
) AS parsed
WHERE batch_size IS NOT NULL OR coalesce(stated_tokens, prefill_tokens + decode_tokens) IS NOT NULL;

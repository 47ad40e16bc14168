-- request_cost: one row per (run_id, request_id): what each request cost the GPUs over the steps of the run
-- that name it (request_step_cost, whose header states the split rule: a step's GPU time is split over its
-- requests by tokens, attention by tokens x kv_tokens, never charged in full to each). GPU time is summed over
-- the ranks (all of the run's GPUs); tokens are counted once per step (a step's request has the same tokens
-- on every rank: the largest stated on any rank).
-- A request whose prefill happened before the trace began has no prefill rows: prefill_gpu_ns 0 says only
-- what the trace holds.
-- Columns:
--   run_id, request_id       VARCHAR  the request
--   ranks                    BIGINT  ranks whose steps name it
--   steps                    BIGINT  distinct steps that name it
--   prefill_steps, decode_steps   BIGINT  of those, the steps where it was in prefill / in decode
--   first_step, last_step    BIGINT  its first and last step
--   prefill_tokens           HUGEINT  query tokens of its prefill steps (its prompt, as far as the trace saw
--                            it)
--   decode_tokens            HUGEINT  query tokens of its decode steps (tokens it generated, 1 a plain decode
--                            step)
--   max_kv_tokens            BIGINT  the most KV tokens it attended in one step (its longest context seen)
--   prefill_gpu_ns           BIGINT  GPU time of its prefill steps (the TTFT side), summed over ranks
--   decode_gpu_ns            BIGINT  GPU time of its decode steps, summed over ranks
--   unknown_gpu_ns           BIGINT  GPU time of steps where its phase is not known (neither stated nor
--                            inferable)
--   gpu_ns                   BIGINT  all of its GPU time: prefill + decode + unknown
--   attention_gpu_ns         BIGINT  the part of gpu_ns that is attention
--   decode_gpu_ns_per_token  DOUBLE  decode_gpu_ns / decode_tokens (NULL without decode tokens)
-- materialized: per_run   rows kept per run (warehouse/derived.py: `tracehouse derive`; a new requests file
--                          forgets them): the report and the diff read it (13 s a query on a 1 GB run)
CREATE OR REPLACE VIEW request_cost AS
-- each view it reads is read once (a CTE): DuckDB binds a view again at every reference
WITH all_request_step_cost AS (SELECT * FROM request_step_cost),
per_step AS (
    SELECT run_id, request_id, step,
           arg_min(phase, rank) AS phase,  -- the lowest rank's (ranks agree but for a stated per-rank phase)
           max(tokens) AS tokens, max(kv_tokens) AS kv_tokens,
           sum(gpu_ns) AS gpu_ns, sum(attention_ns) AS attention_ns,
           sum(gpu_ns) FILTER (WHERE phase = 'prefill') AS prefill_gpu_ns,
           sum(gpu_ns) FILTER (WHERE phase = 'decode') AS decode_gpu_ns,
           sum(gpu_ns) FILTER (WHERE phase NOT IN ('prefill', 'decode')) AS unknown_gpu_ns
    FROM all_request_step_cost
    GROUP BY run_id, request_id, step
),
ranks AS (
    SELECT run_id, request_id, count(DISTINCT rank) AS ranks FROM all_request_step_cost GROUP BY run_id, request_id
)
SELECT p.run_id, p.request_id, any_value(k.ranks) AS ranks,
       count(*) AS steps,
       count(*) FILTER (WHERE p.phase = 'prefill') AS prefill_steps,
       count(*) FILTER (WHERE p.phase = 'decode') AS decode_steps,
       min(p.step) AS first_step, max(p.step) AS last_step,
       coalesce(sum(p.tokens) FILTER (WHERE p.phase = 'prefill'), 0) AS prefill_tokens,
       coalesce(sum(p.tokens) FILTER (WHERE p.phase = 'decode'), 0) AS decode_tokens,
       max(p.kv_tokens) AS max_kv_tokens,
       CAST(coalesce(sum(p.prefill_gpu_ns), 0) AS BIGINT) AS prefill_gpu_ns,
       CAST(coalesce(sum(p.decode_gpu_ns), 0) AS BIGINT) AS decode_gpu_ns,
       CAST(coalesce(sum(p.unknown_gpu_ns), 0) AS BIGINT) AS unknown_gpu_ns,
       CAST(sum(p.gpu_ns) AS BIGINT) AS gpu_ns,
       CAST(sum(p.attention_ns) AS BIGINT) AS attention_gpu_ns,
       CAST(coalesce(sum(p.decode_gpu_ns), 0) AS DOUBLE)
           / nullif(sum(p.tokens) FILTER (WHERE p.phase = 'decode'), 0) AS decode_gpu_ns_per_token
FROM per_step AS p
JOIN ranks AS k ON k.run_id = p.run_id AND k.request_id = p.request_id
GROUP BY p.run_id, p.request_id;

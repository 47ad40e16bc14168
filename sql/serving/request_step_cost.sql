-- request_step_cost: one row per (run_id, rank, step, request_id): the share of the step's GPU time that the
-- request is charged, for the steps whose requests are known (_step_request: a requests file given at ingest,
-- or request[...] annotations).
-- The split rule. A step's GPU time is the sum of the durations of its GPU activities (_kernel_facts.step:
-- kernels, copies, collectives; the same time as steps' per-category columns), in two parts:
--   * attention time (activities of category attention) is split in proportion to tokens x kv_tokens (the
--     Σ N_Q·N_KV term of attention work) when every request of the step states both; else as the rest;
--   * all other time is split in proportion to tokens when every request of the step states them (and
--     they are not all 0); else equally over the step's requests.
-- Shared work is split, never charged in full to each request: the shares of a step add up to its GPU time
-- exactly. Shares are whole ns by the largest-remainder rule: each request gets floor(T·w/W), and the ns
-- left over go one each to the largest remainders (ties: request_id order).
-- A step's GPU time is per rank: under tensor parallelism each rank's share is charged on that rank, and
-- request_cost sums over ranks.
-- Columns:
--   run_id, rank, step, request_id   VARCHAR, INTEGER, BIGINT, VARCHAR  the request in the step
--   phase                    VARCHAR  prefill or decode (or unknown): the request's phase in the step
--                            (_step_request)
--   tokens, kv_tokens        BIGINT  its query tokens and attended KV tokens in the step (NULL: not stated)
--   requests_in_step         BIGINT  requests of the step
--   attention_ns             BIGINT  its share of the step's attention time
--   other_ns                 BIGINT  its share of the step's other GPU time
--   gpu_ns                   BIGINT  attention_ns + other_ns
--   step_gpu_ns              BIGINT  the step's GPU time (sum of its activities' durations), all requests
--                            together
--   attention_split          VARCHAR  how attention time was split: 'tokens_x_kv', 'tokens' or 'equal'
--   other_split              VARCHAR  how the other time was split: 'tokens' or 'equal'
--   source                   VARCHAR  'file' or 'annotation'
CREATE OR REPLACE VIEW request_step_cost AS
WITH work AS (
    SELECT run_id, rank, step,
           coalesce(sum(dur_ns) FILTER (WHERE category = 'attention'), 0) AS attention_total,
           coalesce(sum(dur_ns) FILTER (WHERE category <> 'attention'), 0) AS other_total
    FROM _kernel_facts
    WHERE step IS NOT NULL
    GROUP BY run_id, rank, step
),
members AS (
    SELECT r.*,
           count(*) OVER step_w AS requests_in_step,
           bool_and(r.tokens IS NOT NULL) OVER step_w AND sum(r.tokens) OVER step_w > 0 AS by_tokens,
           bool_and(r.tokens IS NOT NULL AND r.kv_tokens IS NOT NULL) OVER step_w
               AND sum(r.tokens * r.kv_tokens) OVER step_w > 0 AS by_q_kv,
           coalesce(w.attention_total, 0) AS attention_total, coalesce(w.other_total, 0) AS other_total
    FROM _step_request AS r
    LEFT JOIN work AS w ON w.run_id = r.run_id AND w.rank = r.rank AND w.step = r.step
    WINDOW step_w AS (PARTITION BY r.run_id, r.rank, r.step)
),
weighted AS (
    SELECT *,
           CAST(CASE WHEN by_q_kv THEN tokens * kv_tokens WHEN by_tokens THEN tokens ELSE 1 END AS HUGEINT) AS w_attn,
           CAST(CASE WHEN by_tokens THEN tokens ELSE 1 END AS HUGEINT) AS w_other
    FROM members
),
floors AS (
    SELECT *,
           attention_total * w_attn // sum(w_attn) OVER step_w AS attn_floor,
           attention_total * w_attn % sum(w_attn) OVER step_w AS attn_rem,
           other_total * w_other // sum(w_other) OVER step_w AS other_floor,
           other_total * w_other % sum(w_other) OVER step_w AS other_rem
    FROM weighted
    WINDOW step_w AS (PARTITION BY run_id, rank, step)
),
leftover AS (
    SELECT *,
           attention_total - sum(attn_floor) OVER step_w AS attn_left,
           other_total - sum(other_floor) OVER step_w AS other_left,
           ROW_NUMBER() OVER (PARTITION BY run_id, rank, step ORDER BY attn_rem DESC, request_id) AS attn_place,
           ROW_NUMBER() OVER (PARTITION BY run_id, rank, step ORDER BY other_rem DESC, request_id) AS other_place
    FROM floors
    WINDOW step_w AS (PARTITION BY run_id, rank, step)
)
SELECT run_id, rank, step, request_id, phase, tokens, kv_tokens, requests_in_step,
       CAST(attn_floor + CASE WHEN attn_place <= attn_left THEN 1 ELSE 0 END AS BIGINT) AS attention_ns,
       CAST(other_floor + CASE WHEN other_place <= other_left THEN 1 ELSE 0 END AS BIGINT) AS other_ns,
       CAST(attn_floor + other_floor + CASE WHEN attn_place <= attn_left THEN 1 ELSE 0 END
            + CASE WHEN other_place <= other_left THEN 1 ELSE 0 END AS BIGINT) AS gpu_ns,
       CAST(attention_total + other_total AS BIGINT) AS step_gpu_ns,
       CASE WHEN by_q_kv THEN 'tokens_x_kv' WHEN by_tokens THEN 'tokens' ELSE 'equal' END AS attention_split,
       CASE WHEN by_tokens THEN 'tokens' ELSE 'equal' END AS other_split,
       source
FROM leftover;

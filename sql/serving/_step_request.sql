-- _step_request: helper. One row per (run_id, rank, step, request_id): a request that ran in a step, with
-- its tokens there. Two sources:
--   * the requests file given at ingest (table step_requests; a row without a rank stands for every rank
--     that has the step), source 'file';
--   * request annotations in the trace: a user_annotation `request[id=<id> tokens=<n> kv=<n> phase=<p>]`
--     (record_function around a request's part of the step; only id is required) inside the step's host
--     window (the tightest step that contains it), source 'annotation'.
--   Where both name a request in a step, the file's row is kept; two annotations of one request in one step
--   count as one (the first).
-- Columns:
--   run_id, rank, step      VARCHAR, INTEGER, BIGINT  the step (step_spans)
--   request_id              VARCHAR  the request
--   tokens                  BIGINT  its query (new) tokens in the step (NULL: not stated)
--   kv_tokens               BIGINT  the KV tokens its attention read in the step (NULL: not stated)
--   phase                   VARCHAR  prefill or decode: as stated; else the step's phase when that is prefill
--                           or decode; else decode when tokens = 1, prefill when tokens > 1; else unknown
--   source                  VARCHAR  'file' or 'annotation'
CREATE OR REPLACE VIEW _step_request AS
WITH from_file AS (
    SELECT s.run_id, s.rank, s.step, r.request_id, r.tokens, r.kv_tokens, r.phase AS stated_phase,
           s.phase AS step_phase, 'file' AS source, 0 AS pick_order, r.line AS seq
    FROM step_requests AS r
    JOIN step_spans AS s ON s.run_id = r.run_id AND s.step = r.step AND (r.rank IS NULL OR r.rank = s.rank)
),
annotation AS (
    SELECT run_id, rank, op_id, start_ns, start_ns + dur_ns AS end_ns,
           nullif(regexp_extract(name, '[\[ ]id=([^\s\]]+)', 1), '') AS request_id,
           TRY_CAST(nullif(regexp_extract(name, '[\[ ]tokens=([0-9]+)', 1), '') AS BIGINT) AS tokens,
           TRY_CAST(nullif(regexp_extract(name, '[\[ ]kv=([0-9]+)', 1), '') AS BIGINT) AS kv_tokens,
           nullif(lower(regexp_extract(name, '[\[ ]phase=(prefill|decode)\b', 1)), '') AS stated_phase
    FROM cpu_ops
    WHERE lower(cat) = 'user_annotation' AND name LIKE 'request[%'
),
annotated AS (
    SELECT s.run_id, s.rank, s.step, a.request_id, a.tokens, a.kv_tokens, a.stated_phase, s.phase AS step_phase,
           'annotation' AS source, 1 AS pick_order, a.op_id AS seq,
           ROW_NUMBER() OVER (PARTITION BY a.run_id, a.rank, a.op_id
                              ORDER BY s.end_ns - s.start_ns, s.step) AS tightest
    FROM annotation AS a
    JOIN step_spans AS s
      ON s.run_id = a.run_id AND s.rank = a.rank AND a.start_ns >= s.start_ns AND a.end_ns <= s.end_ns
    WHERE a.request_id IS NOT NULL
),
both_sources AS (
    SELECT run_id, rank, step, request_id, tokens, kv_tokens, stated_phase, step_phase, source, pick_order, seq
    FROM from_file
    UNION ALL
    SELECT run_id, rank, step, request_id, tokens, kv_tokens, stated_phase, step_phase, source, pick_order, seq
    FROM annotated WHERE tightest = 1
),
picked AS (
    SELECT *, ROW_NUMBER() OVER (PARTITION BY run_id, rank, step, request_id ORDER BY pick_order, seq) AS pick
    FROM both_sources
)
SELECT run_id, rank, step, request_id, tokens, kv_tokens,
       coalesce(stated_phase,
                CASE WHEN step_phase IN ('prefill', 'decode') THEN step_phase END,
                CASE WHEN tokens = 1 THEN 'decode' WHEN tokens > 1 THEN 'prefill' END,
                'unknown') AS phase,
       source
FROM picked
WHERE pick = 1;

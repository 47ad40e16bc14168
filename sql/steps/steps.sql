-- steps: one row per (run_id, rank, step): the step's host window, its GPU work and where it went.
-- Columns:
--   run_id, rank, step       VARCHAR, INTEGER, BIGINT  the step (step_spans; 0 is the whole rank when the
--                            trace shows no steps)
--   name, source             VARCHAR  the marker that defines it (ProfilerStep#N, step[...], execute_model, a
--                            host burst, ...) and which rule found it (ingest/sql/60_steps.sql)
--   phase                    VARCHAR  prefill, decode, mixed or unknown
--   host_start_ns, host_end_ns, wall_ns   BIGINT  the host window of the step and its length
--   gpu_start_ns, gpu_end_ns, gpu_span_ns BIGINT  first GPU start / last GPU end of its activities (NULL:
--                            none)
--   gpu_busy_ns, compute_ns, exposed_comm_ns, exposed_memory_ns, idle_ns   HUGEINT
--                            gpu_timeline (exact) of the step, summed over the rank's devices
--   gpu_window_start_ns      BIGINT  start of the step's GPU window, which ends at gpu_end_ns: the end of the
--                            previous step's GPU work (the latest gpu_end_ns of the rank's earlier steps,
--                            in step order) when the step's host window began before that end (the host
--                            ran ahead: an async engine enqueues a step while the GPU runs the one
--                            before), else the step's own gpu_start_ns (the device was idle when the
--                            step began, or no step came before). The windows of a rank do not overlap,
--                            and the launch-ahead of the host is never counted as GPU idle
--   gpu_window_ns            BIGINT  gpu_end_ns - gpu_window_start_ns (0 when an earlier step's work ran past
--                            this step's end)
--   gpu_window_busy_ns       HUGEINT  the device's busy time (any activity, of any step) inside the GPU
--                            window, summed over the rank's devices
--   gpu_busy_pct             DOUBLE  busy % of the step, THE definition of GPU busy % that run_metrics, the
--                            report's cards and step_breakdown use: 100 x gpu_window_busy_ns /
--                            (gpu_window_ns x the rank's devices with GPU activity); NULL when the window
--                            is empty
--   activities               HUGEINT  GPU activities of the step
--   gemm_ns, attention_ns, moe_ns, communication_ns, norm_ns   HUGEINT  GPU time (sum of durations) of the
--                            step's activities in that category
--   activation_ns, rope_ns, quantize_ns, sampling_ns, elementwise_ns   HUGEINT
--                            the same, for these categories
--   reduction_ns, memory_ns, convolution_ns, embedding_ns, other_ns    HUGEINT
--                            the same, for these categories
-- Batch composition (NULL where neither the trace nor a label states it; never guessed). From the serving
-- annotation of the step (_batch_annotation: SGLang step[...] and its roofline annotation, vLLM
-- execute_..., ATOM prefill[...]/decode[...]): of the annotations whose host window contains the step's
-- (the step's own included), the one that states the attention terms, then the tightest; else the only
-- one inside the step (a ProfilerStep around one forward). Without one, the run's labels given at
-- ingest (--label batch_size=N, prefill_tokens=N, decode_tokens=N, prefill_requests=N, decode_requests=N)
-- stand for every step of the run.
--   batch_size               BIGINT  requests (sequences) in the step (SGLang/ATOM bs, vLLM context +
--                            generation requests; not vLLM's leading number, which counts tokens)
--   prefill_requests, decode_requests   BIGINT  requests of each group
--   prefill_tokens, decode_tokens       BIGINT  query (new) tokens of each group
--   tokens                   BIGINT  query tokens of the step (the stated total, else the sum of both groups)
--   kv_tokens                BIGINT  Σ over requests of the attended KV tokens (detailed annotations)
--   sum_q_sq, sum_q_kv       BIGINT  Σ N_Q² and Σ N_Q·N_KV over requests (detailed annotations): attention
--                            work
--   batch_source             VARCHAR  the annotation format (sglang, sglang_roofline, vllm, vllm_detailed,
--                            atom, atom_detailed), 'label', or NULL
-- materialized: per_run   rows kept per run (warehouse/derived.py: `tracehouse derive`): step_latency,
--                          request_cost and data_quality read it (18 s a query on a 1 GB run, computed)
CREATE OR REPLACE VIEW steps AS
-- each view it reads is read once (a CTE): DuckDB binds a view again at every reference
WITH all_batch_annotation AS (SELECT * FROM _batch_annotation),
timeline AS (
    SELECT run_id, rank, step, min(first_start_ns) AS gpu_start_ns, max(last_end_ns) AS gpu_end_ns,
           sum(busy_ns) AS gpu_busy_ns, sum(compute_ns) AS compute_ns, sum(exposed_comm_ns) AS exposed_comm_ns,
           sum(exposed_memory_ns) AS exposed_memory_ns, sum(idle_ns) AS idle_ns, sum(activities) AS activities
    FROM gpu_timeline
    WHERE variant = 'exact' AND step IS NOT NULL
    GROUP BY run_id, rank, step
),
ordered AS (
    -- the end of the GPU work of the rank's earlier steps (step order), to place the step's GPU window
    SELECT s.run_id, s.rank, s.step, s.start_ns AS host_start_ns, t.gpu_start_ns, t.gpu_end_ns,
           max(t.gpu_end_ns) OVER (PARTITION BY s.run_id, s.rank ORDER BY s.start_ns, s.step
                                   ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_gpu_end_ns
    FROM step_spans AS s
    JOIN timeline AS t ON t.run_id = s.run_id AND t.rank = s.rank AND t.step = s.step
),
gpu_window AS (
    SELECT run_id, rank, step, gpu_end_ns,
           CASE WHEN prev_gpu_end_ns IS NULL OR prev_gpu_end_ns <= host_start_ns THEN gpu_start_ns
                ELSE least(prev_gpu_end_ns, gpu_end_ns) END AS window_start_ns
    FROM ordered
),
device_islands AS (
    -- busy islands of each device (activities of any step that touch or overlap), with the busy time before each
    SELECT run_id, rank, device, island_start_ns AS i_start, island_end_ns AS i_end, busy_before_ns AS i_before
    FROM _busy_islands
    WHERE scope = 'device'
),
rank_devices AS (
    SELECT run_id, rank, count(DISTINCT device) AS devices FROM device_islands GROUP BY run_id, rank
),
window_ends AS (
    -- B(t), the device's busy time before t, at each end of each window (which: 0 start, 1 end): an
    -- ordered pass over the islands' starts and the ends (as step_breakdown's device_busy)
    SELECT run_id, rank, step, which, coalesce(i_before + least(t, i_end) - i_start, 0) AS busy_ns
    FROM (
        SELECT run_id, rank, step, which, t, is_end,
               last_value(i_start IGNORE NULLS) OVER latest AS i_start,
               last_value(i_end IGNORE NULLS) OVER latest AS i_end,
               last_value(i_before IGNORE NULLS) OVER latest AS i_before
        FROM (
            SELECT w.run_id, w.rank, d.device, w.step, 0 AS which, w.window_start_ns AS t, 1 AS is_end,
                   NULL::BIGINT AS i_start, NULL::BIGINT AS i_end, NULL::BIGINT AS i_before
            FROM gpu_window AS w
            JOIN (SELECT DISTINCT run_id, rank, device FROM device_islands) AS d ON d.run_id = w.run_id AND d.rank = w.rank
            UNION ALL
            SELECT w.run_id, w.rank, d.device, w.step, 1, w.gpu_end_ns, 1, NULL, NULL, NULL
            FROM gpu_window AS w
            JOIN (SELECT DISTINCT run_id, rank, device FROM device_islands) AS d ON d.run_id = w.run_id AND d.rank = w.rank
            UNION ALL
            SELECT run_id, rank, device, NULL, NULL, i_start, 0, i_start, i_end, i_before FROM device_islands
        ) AS marks
        WINDOW latest AS (PARTITION BY run_id, rank, device ORDER BY t, is_end ROWS UNBOUNDED PRECEDING)
    ) AS swept
    WHERE is_end = 1
),
window_busy AS (
    SELECT w.run_id, w.rank, w.step, w.window_start_ns, w.gpu_end_ns - w.window_start_ns AS window_ns,
           sum(CASE WHEN e.which = 1 THEN e.busy_ns ELSE -e.busy_ns END) AS busy_ns
    FROM gpu_window AS w
    JOIN window_ends AS e ON e.run_id = w.run_id AND e.rank = w.rank AND e.step = w.step
    GROUP BY w.run_id, w.rank, w.step, w.window_start_ns, w.gpu_end_ns
),
per_category AS (
    SELECT run_id, rank, step,
           -- generated: per category
           sum(dur_ns) FILTER (WHERE category = 'gemm') AS gemm_ns,
           sum(dur_ns) FILTER (WHERE category = 'attention') AS attention_ns,
           sum(dur_ns) FILTER (WHERE category = 'moe') AS moe_ns,
           sum(dur_ns) FILTER (WHERE category = 'communication') AS communication_ns,
           sum(dur_ns) FILTER (WHERE category = 'norm') AS norm_ns,
           sum(dur_ns) FILTER (WHERE category = 'activation') AS activation_ns,
           sum(dur_ns) FILTER (WHERE category = 'rope') AS rope_ns,
           sum(dur_ns) FILTER (WHERE category = 'quantize') AS quantize_ns,
           sum(dur_ns) FILTER (WHERE category = 'sampling') AS sampling_ns,
           sum(dur_ns) FILTER (WHERE category = 'elementwise') AS elementwise_ns,
           sum(dur_ns) FILTER (WHERE category = 'reduction') AS reduction_ns,
           sum(dur_ns) FILTER (WHERE category = 'memory') AS memory_ns,
           sum(dur_ns) FILTER (WHERE category = 'convolution') AS convolution_ns,
           sum(dur_ns) FILTER (WHERE category = 'embedding') AS embedding_ns,
           sum(dur_ns) FILTER (WHERE category = 'other') AS other_ns
           -- end generated
    FROM _kernel_facts
    WHERE step IS NOT NULL
    GROUP BY run_id, rank, step
),
around AS (
    -- batch annotations whose window contains the step's: detailed first, then the tightest
    SELECT s.run_id, s.rank, s.step, a.batch_format, a.batch_size, a.prefill_requests, a.decode_requests,
           a.prefill_tokens, a.decode_tokens, a.tokens, a.kv_tokens, a.sum_q_sq, a.sum_q_kv,
           ROW_NUMBER() OVER (PARTITION BY s.run_id, s.rank, s.step
                              ORDER BY a.detailed DESC, a.end_ns - a.start_ns, a.op_id) AS pick
    FROM step_spans AS s
    JOIN all_batch_annotation AS a
      ON a.run_id = s.run_id AND a.rank = s.rank AND a.start_ns <= s.start_ns AND a.end_ns >= s.end_ns
),
inside AS (
    -- the one batch annotation inside the step, when there is exactly one
    SELECT s.run_id, s.rank, s.step, any_value(a.op_id) AS op_id
    FROM step_spans AS s
    JOIN all_batch_annotation AS a
      ON a.run_id = s.run_id AND a.rank = s.rank AND a.start_ns >= s.start_ns AND a.end_ns <= s.end_ns
    GROUP BY s.run_id, s.rank, s.step
    HAVING count(*) = 1
),
batch AS (
    SELECT run_id, rank, step, batch_format, batch_size, prefill_requests, decode_requests, prefill_tokens,
           decode_tokens, tokens, kv_tokens, sum_q_sq, sum_q_kv
    FROM around WHERE pick = 1
    UNION ALL
    SELECT i.run_id, i.rank, i.step, a.batch_format, a.batch_size, a.prefill_requests, a.decode_requests,
           a.prefill_tokens, a.decode_tokens, a.tokens, a.kv_tokens, a.sum_q_sq, a.sum_q_kv
    FROM inside AS i
    JOIN all_batch_annotation AS a ON a.run_id = i.run_id AND a.rank = i.rank AND a.op_id = i.op_id
    WHERE NOT EXISTS (SELECT 1 FROM around AS o WHERE o.run_id = i.run_id AND o.rank = i.rank AND o.step = i.step)
)
SELECT
    s.run_id, s.rank, s.step, s.name, s.source, s.phase,
    s.start_ns AS host_start_ns, s.end_ns AS host_end_ns, s.end_ns - s.start_ns AS wall_ns,
    t.gpu_start_ns, t.gpu_end_ns, t.gpu_end_ns - t.gpu_start_ns AS gpu_span_ns,
    coalesce(t.gpu_busy_ns, 0) AS gpu_busy_ns, coalesce(t.compute_ns, 0) AS compute_ns,
    coalesce(t.exposed_comm_ns, 0) AS exposed_comm_ns, coalesce(t.exposed_memory_ns, 0) AS exposed_memory_ns,
    coalesce(t.idle_ns, 0) AS idle_ns, coalesce(t.activities, 0) AS activities,
    wb.window_start_ns AS gpu_window_start_ns, wb.window_ns AS gpu_window_ns, wb.busy_ns AS gpu_window_busy_ns,
    CASE WHEN wb.window_ns > 0 THEN 100.0 * wb.busy_ns / (wb.window_ns * rd.devices) END AS gpu_busy_pct,
    -- generated: category columns
    coalesce(c.gemm_ns, 0) AS gemm_ns, coalesce(c.attention_ns, 0) AS attention_ns,
    coalesce(c.moe_ns, 0) AS moe_ns, coalesce(c.communication_ns, 0) AS communication_ns,
    coalesce(c.norm_ns, 0) AS norm_ns, coalesce(c.activation_ns, 0) AS activation_ns,
    coalesce(c.rope_ns, 0) AS rope_ns, coalesce(c.quantize_ns, 0) AS quantize_ns,
    coalesce(c.sampling_ns, 0) AS sampling_ns, coalesce(c.elementwise_ns, 0) AS elementwise_ns,
    coalesce(c.reduction_ns, 0) AS reduction_ns, coalesce(c.memory_ns, 0) AS memory_ns,
    coalesce(c.convolution_ns, 0) AS convolution_ns, coalesce(c.embedding_ns, 0) AS embedding_ns,
    coalesce(c.other_ns, 0) AS other_ns,
    -- end generated
    coalesce(b.batch_size, TRY_CAST(r.labels['batch_size'] AS BIGINT)) AS batch_size,
    coalesce(b.prefill_requests, CASE WHEN b.batch_format IS NULL THEN TRY_CAST(r.labels['prefill_requests'] AS BIGINT) END) AS prefill_requests,
    coalesce(b.decode_requests, CASE WHEN b.batch_format IS NULL THEN TRY_CAST(r.labels['decode_requests'] AS BIGINT) END) AS decode_requests,
    coalesce(b.prefill_tokens, CASE WHEN b.batch_format IS NULL THEN TRY_CAST(r.labels['prefill_tokens'] AS BIGINT) END) AS prefill_tokens,
    coalesce(b.decode_tokens, CASE WHEN b.batch_format IS NULL THEN TRY_CAST(r.labels['decode_tokens'] AS BIGINT) END) AS decode_tokens,
    coalesce(b.tokens, CASE WHEN b.batch_format IS NULL THEN
        coalesce(TRY_CAST(r.labels['tokens'] AS BIGINT),
                 TRY_CAST(r.labels['prefill_tokens'] AS BIGINT) + TRY_CAST(r.labels['decode_tokens'] AS BIGINT)) END) AS tokens,
    b.kv_tokens, b.sum_q_sq, b.sum_q_kv,
    coalesce(b.batch_format,
             CASE WHEN r.labels['batch_size'] IS NOT NULL OR r.labels['prefill_tokens'] IS NOT NULL
                       OR r.labels['decode_tokens'] IS NOT NULL OR r.labels['tokens'] IS NOT NULL THEN 'label' END) AS batch_source
FROM step_spans AS s
LEFT JOIN timeline AS t ON t.run_id = s.run_id AND t.rank = s.rank AND t.step = s.step
LEFT JOIN window_busy AS wb ON wb.run_id = s.run_id AND wb.rank = s.rank AND wb.step = s.step
LEFT JOIN rank_devices AS rd ON rd.run_id = s.run_id AND rd.rank = s.rank
LEFT JOIN per_category AS c ON c.run_id = s.run_id AND c.rank = s.rank AND c.step = s.step
LEFT JOIN batch AS b ON b.run_id = s.run_id AND b.rank = s.rank AND b.step = s.step
LEFT JOIN runs AS r ON r.run_id = s.run_id;

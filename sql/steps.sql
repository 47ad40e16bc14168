-- steps: one row per (run_id, rank, step): the step's host window, its GPU work and where it went.
-- Columns:
--   run_id, rank, step       the step (step_spans; 0 is the whole rank when the trace shows no steps)
--   name, source             the annotation or call that defines it (ProfilerStep#N, step[...], a graph
--                            launch, ...) and which rule found it
--   phase                    prefill, decode, mixed or unknown
--   host_start_ns, host_end_ns, wall_ns   the host window of the step and its length
--   gpu_start_ns, gpu_end_ns, gpu_span_ns first GPU start / last GPU end of its activities (NULL: none)
--   gpu_busy_ns, compute_ns, exposed_comm_ns, exposed_memory_ns, idle_ns   gpu_timeline (exact) of the
--                            step, summed over the rank's devices
--   activities               GPU activities of the step
--   gemm_ns, attention_ns, moe_ns, communication_ns, norm_ns   GPU time (sum of durations) of the step's
--                            activities in that category
--   activation_ns, rope_ns, quantize_ns, sampling_ns, elementwise_ns   the same, for these categories
--   reduction_ns, memory_ns, convolution_ns, embedding_ns, other_ns    the same, for these categories
CREATE OR REPLACE VIEW steps AS
WITH timeline AS (
    SELECT run_id, rank, step, min(first_start_ns) AS gpu_start_ns, max(last_end_ns) AS gpu_end_ns,
           sum(busy_ns) AS gpu_busy_ns, sum(compute_ns) AS compute_ns, sum(exposed_comm_ns) AS exposed_comm_ns,
           sum(exposed_memory_ns) AS exposed_memory_ns, sum(idle_ns) AS idle_ns, sum(activities) AS activities
    FROM gpu_timeline
    WHERE variant = 'exact' AND step IS NOT NULL
    GROUP BY run_id, rank, step
),
per_category AS (
    SELECT run_id, rank, step,
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
    FROM _kernel_facts
    WHERE step IS NOT NULL
    GROUP BY run_id, rank, step
)
SELECT
    s.run_id, s.rank, s.step, s.name, s.source, s.phase,
    s.start_ns AS host_start_ns, s.end_ns AS host_end_ns, s.end_ns - s.start_ns AS wall_ns,
    t.gpu_start_ns, t.gpu_end_ns, t.gpu_end_ns - t.gpu_start_ns AS gpu_span_ns,
    coalesce(t.gpu_busy_ns, 0) AS gpu_busy_ns, coalesce(t.compute_ns, 0) AS compute_ns,
    coalesce(t.exposed_comm_ns, 0) AS exposed_comm_ns, coalesce(t.exposed_memory_ns, 0) AS exposed_memory_ns,
    coalesce(t.idle_ns, 0) AS idle_ns, coalesce(t.activities, 0) AS activities,
    coalesce(c.gemm_ns, 0) AS gemm_ns, coalesce(c.attention_ns, 0) AS attention_ns,
    coalesce(c.moe_ns, 0) AS moe_ns, coalesce(c.communication_ns, 0) AS communication_ns,
    coalesce(c.norm_ns, 0) AS norm_ns, coalesce(c.activation_ns, 0) AS activation_ns,
    coalesce(c.rope_ns, 0) AS rope_ns, coalesce(c.quantize_ns, 0) AS quantize_ns,
    coalesce(c.sampling_ns, 0) AS sampling_ns, coalesce(c.elementwise_ns, 0) AS elementwise_ns,
    coalesce(c.reduction_ns, 0) AS reduction_ns, coalesce(c.memory_ns, 0) AS memory_ns,
    coalesce(c.convolution_ns, 0) AS convolution_ns, coalesce(c.embedding_ns, 0) AS embedding_ns,
    coalesce(c.other_ns, 0) AS other_ns
FROM step_spans AS s
LEFT JOIN timeline AS t ON t.run_id = s.run_id AND t.rank = s.rank AND t.step = s.step
LEFT JOIN per_category AS c ON c.run_id = s.run_id AND c.rank = s.rank AND c.step = s.step;

-- step_latency: one row per (run_id, phase, batch_size): how the step time grows with the batch. Steps of
-- every rank pool (a rank's step is one sample); steps whose batch size is not known (steps.batch_size NULL)
-- form the row with batch_size NULL.
-- Step time is the GPU span of the step (first GPU start to last GPU end: steps.gpu_span_ns), else its
-- host window (wall_ns) when it ran nothing on the GPU, as run_metrics' step_time_* are.
-- Medians and p90 are discrete quantiles (quantile_disc: an actual step's value, exact ns; for an even
-- count the median is the lower of the middle two).
-- Columns:
--   run_id, phase          VARCHAR  the run and the steps' phase
--   batch_size             BIGINT  requests in the step (steps.batch_size)
--   steps                  BIGINT  rank-steps in the row
--   ranks                  BIGINT  distinct ranks among them
--   median_tokens          BIGINT  median query tokens per step (steps.tokens)
--   median_step_ns, p90_step_ns   BIGINT  step time (above)
--   median_wall_ns         BIGINT  median host window of the step
--   median_gpu_busy_ns     HUGEINT  median union of the step's GPU activities
--   gpu_busy_ns            HUGEINT  GPU busy time summed over the row's steps
--   gemm_ns, attention_ns, moe_ns, communication_ns, norm_ns, elementwise_ns, other_ns   HUGEINT  GPU time
--                          (sum of durations) of these categories summed over the row's steps; other_ns
--                          holds every category not listed (activation, rope, quantize, sampling,
--                          reduction, memory, convolution, embedding, other)
-- materialized: per_run   rows kept per run (warehouse/derived.py: `tracehouse derive`): the diff and the report
CREATE OR REPLACE VIEW step_latency AS
SELECT run_id, coalesce(phase, 'unknown') AS phase, batch_size,
       count(*) AS steps, count(DISTINCT rank) AS ranks,
       quantile_disc(tokens, 0.5) AS median_tokens,
       quantile_disc(coalesce(gpu_span_ns, wall_ns), 0.5) AS median_step_ns,
       quantile_disc(coalesce(gpu_span_ns, wall_ns), 0.9) AS p90_step_ns,
       quantile_disc(wall_ns, 0.5) AS median_wall_ns,
       quantile_disc(gpu_busy_ns, 0.5) AS median_gpu_busy_ns,
       sum(gpu_busy_ns) AS gpu_busy_ns,
       -- generated: category columns
       sum(gemm_ns) AS gemm_ns, sum(attention_ns) AS attention_ns, sum(moe_ns) AS moe_ns,
       sum(communication_ns) AS communication_ns, sum(norm_ns) AS norm_ns,
       sum(elementwise_ns) AS elementwise_ns,
       sum(activation_ns + rope_ns + quantize_ns + sampling_ns + reduction_ns + memory_ns +
           convolution_ns + embedding_ns + other_ns) AS other_ns
       -- end generated
FROM steps
GROUP BY run_id, coalesce(phase, 'unknown'), batch_size;

-- export_layers: one row per layer of the repeating block on the main stream of a step, per (run_id, rank,
-- step, layer): the layer boundaries that `tracehouse export` draws on its analysis track. Layer j of a step
-- is the main stream's activities with ordinal start_ordinal + j × period .. start_ordinal + (j + 1) × period
-- − 1 (layer_pattern_summary: ordinal = row number by (start_ns, kernel_id) within the stream and step), for
-- j = 0 .. repeats − 1 (the repeating block; work before and after it is no layer).
-- Columns:
--   run_id, rank, step, device, stream   VARCHAR, INTEGER, BIGINT, INTEGER, BIGINT
--                            the step and its main stream (layer_pattern_summary.is_main_stream)
--   layer        BIGINT  0 .. repeats − 1
--   period       BIGINT  activities per layer on this stream
--   start_ns     BIGINT  start of the layer's first activity (its position 0)
--   end_ns       BIGINT  latest end among the layer's activities
--   activities   BIGINT  activities of the layer (= period)
CREATE OR REPLACE VIEW export_layers AS
WITH blocks AS (
    SELECT run_id, rank, step, device, stream, period, repeats, start_ordinal
    FROM layer_pattern_summary
    WHERE is_main_stream AND period IS NOT NULL AND repeats > 0
),
numbered AS (
    SELECT f.run_id, f.rank, f.step, f.device, f.stream, f.start_ns, f.end_ns,
           row_number() OVER (PARTITION BY f.run_id, f.rank, f.step, f.device, f.stream
                              ORDER BY f.start_ns, f.kernel_id) - 1 AS ordinal
    FROM _kernel_facts AS f
    WHERE f.step IS NOT NULL
),
in_layers AS (
    SELECT n.run_id, n.rank, n.step, n.device, n.stream, b.period, n.start_ns, n.end_ns, n.ordinal,
           (n.ordinal - b.start_ordinal) // b.period AS layer
    FROM numbered AS n
    JOIN blocks AS b USING (run_id, rank, step, device, stream)
    WHERE n.ordinal >= b.start_ordinal AND n.ordinal < b.start_ordinal + b.period * b.repeats
)
SELECT run_id, rank, step, device, stream, layer, any_value(period) AS period,
       arg_min(start_ns, ordinal) AS start_ns, max(end_ns) AS end_ns, count(*) AS activities
FROM in_layers
GROUP BY run_id, rank, step, device, stream, layer

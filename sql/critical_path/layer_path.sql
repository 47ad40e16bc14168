-- layer_path: one row per (run_id, rank, step, device, stream, layer) of a stream with a layer pattern
-- (layer_pattern_summary with a period): each layer of the repeating block on that stream, its time, and
-- how much of it the step's critical path runs through. Layer j of a stream holds the activities with
-- ordinal start_ordinal + j × period .. start_ordinal + (j + 1) × period − 1 (ordinal: rank by start time,
-- then kernel_id, within the stream and step; the numbering of layer_pattern_summary and layer_pattern).
-- Columns:
--   run_id, rank, step   VARCHAR, INTEGER, BIGINT  the step
--   device, stream       INTEGER, BIGINT  the stream
--   is_main_stream       BOOLEAN  layer_pattern_summary.is_main_stream
--   with_main            BOOLEAN  the stream repeats its layer as often as the main stream does (repeats
--                        equal; the main stream itself: true): the streams whose periods
--                        step_layer_period adds up, one layer of the model each. False for a side stream
--                        whose "layer" is one recurring copy or collective, and on every stream when the
--                        main stream has no pattern
--   layer                BIGINT  0 .. repeats − 1, in time order
--   activities           BIGINT  the layer's activities on the stream (= period)
--   start_ns, end_ns     BIGINT  first start and last end of those activities
--   span_ns              BIGINT  end_ns − start_ns: the layer's wall time on this stream
--   gpu_ns               BIGINT  sum of their durations
--   path_ns              BIGINT  the part of gpu_ns on the critical path (sum of dur_ns of the `gpu` segments
--                        of these activities; NULL: the step has no path)
--   path_share           DOUBLE  path_ns / gpu_ns (NULL when gpu_ns is 0 or there is no path)
-- materialized: per_run   rows kept per run (warehouse/derived.py: `tracehouse derive`): the report's step section (reports/step_path.py)
CREATE OR REPLACE VIEW layer_path AS
WITH all_path AS (SELECT * FROM critical_path),
seq AS (
    SELECT run_id, rank, step, device, stream, kernel_id, start_ns, end_ns, dur_ns,
           row_number() OVER (PARTITION BY run_id, rank, step, device, stream ORDER BY start_ns, kernel_id) - 1
               AS ordinal
    FROM _kernel_facts
    WHERE step IS NOT NULL
),
patterns AS (
    SELECT run_id, rank, step, device, stream, is_main_stream, period, repeats, start_ordinal,
           coalesce(repeats = max(CASE WHEN is_main_stream THEN repeats END)
                                  OVER (PARTITION BY run_id, rank, step), false) AS with_main
    FROM layer_pattern_summary
),
placed AS (
    SELECT s.run_id, s.rank, s.step, s.device, s.stream, p.is_main_stream, p.with_main, s.kernel_id, s.start_ns, s.end_ns,
           s.dur_ns, CAST(floor((s.ordinal - p.start_ordinal) / p.period) AS BIGINT) AS layer
    FROM seq AS s
    JOIN patterns AS p
      ON p.run_id = s.run_id AND p.rank = s.rank AND p.step = s.step AND p.device = s.device
     AND p.stream = s.stream
    WHERE p.period IS NOT NULL
      AND s.ordinal >= p.start_ordinal AND s.ordinal < p.start_ordinal + p.period * p.repeats
),
on_path AS (
    SELECT run_id, rank, step, kernel_id, sum(dur_ns) AS path_ns
    FROM all_path
    WHERE kind = 'gpu'
    GROUP BY run_id, rank, step, kernel_id
),
has_path AS (
    SELECT DISTINCT run_id, rank, step FROM all_path
),
layers AS (
    SELECT a.run_id, a.rank, a.step, a.device, a.stream, any_value(a.is_main_stream) AS is_main_stream,
           any_value(a.with_main) AS with_main, a.layer,
           count(*) AS activities, min(a.start_ns) AS start_ns, max(a.end_ns) AS end_ns, sum(a.dur_ns) AS gpu_ns,
           sum(coalesce(o.path_ns, 0)) AS path_ns
    FROM placed AS a
    LEFT JOIN on_path AS o
      ON o.run_id = a.run_id AND o.rank = a.rank AND o.step = a.step AND o.kernel_id = a.kernel_id
    GROUP BY a.run_id, a.rank, a.step, a.device, a.stream, a.layer
)
SELECT l.run_id, l.rank, l.step, l.device, l.stream, l.is_main_stream, l.with_main, l.layer,
       CAST(l.activities AS BIGINT) AS activities, l.start_ns, l.end_ns, l.end_ns - l.start_ns AS span_ns,
       CAST(l.gpu_ns AS BIGINT) AS gpu_ns,
       CASE WHEN h.step IS NOT NULL THEN CAST(l.path_ns AS BIGINT) END AS path_ns,
       CASE WHEN h.step IS NOT NULL AND l.gpu_ns > 0 THEN l.path_ns / CAST(l.gpu_ns AS DOUBLE) END AS path_share
FROM layers AS l
LEFT JOIN has_path AS h ON h.run_id = l.run_id AND h.rank = l.rank AND h.step = l.step

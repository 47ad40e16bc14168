-- layer_pattern: one row per (run_id, rank, step, device, stream, position) of a stream that has a repeating
-- kernel sequence (layer_pattern_summary with a period): position k of the layer, over the `repeats` full
-- layers of the block, i.e. the activities with ordinal start_ordinal + j × period + k (j = 0 .. repeats − 1;
-- ordinal = rank of the activity by start time within the stream and step, as in layer_pattern_summary).
-- Reports read the main stream (is_main_stream); the other streams' layers are here too.
-- Each part reads the one before it once, partitioned by (run_id, rank, step, ...), so that a query for one
-- step computes that step only.
-- Columns:
--   run_id, rank, step, phase, device, stream, is_main_stream   VARCHAR, INTEGER, BIGINT, VARCHAR, INTEGER, BIGINT, BOOLEAN
--                            the stream (as in layer_pattern_summary)
--   period, repeats          BIGINT  the layer's length on this stream and the full layers it is taken over
--   position                 BIGINT  0 .. period − 1, in start order within the layer
--   name                     VARCHAR  the kernel at this position in most layers (ties: the smallest name)
--   kind                     VARCHAR  kernel, memcpy or memset
--   category                 VARCHAR  its category (kernel_category; a name's category can depend on its
--                            launching op: where that name's activities here have several, the smallest;
--                            kind likewise)
--   name_share               DOUBLE  share of the layers whose activity at this position has that name (1.0 =
--                            all)
--   median_ns, mean_ns, min_ns, max_ns   DOUBLE, DOUBLE, BIGINT, BIGINT  duration over the layers (all
--                            activities at this position; median: continuous quantile)
--   total_ns                 BIGINT  sum of the durations at this position over the layers
--   share_of_layer           DOUBLE  median_ns / Σ median_ns over the positions of the layer
-- materialized: per_run   rows kept per run (warehouse/derived.py: `tracehouse derive`): the report's step section
--   median_offset_ns         DOUBLE  median over the layers of (start − the layer's first start): where in
--                            the layer it runs
CREATE OR REPLACE VIEW layer_pattern AS
WITH seq AS (
    -- the same numbering as layer_pattern_summary; name_key numbers the names of a step in their order, so
    -- that the windows below carry a number, not the name (~250 characters: at 4 GB, ~5M activities through
    -- three windows ran out of 640MB with the names); the names are joined back to the positions at the end
    SELECT run_id, rank, step, device, stream, kernel_id, name, kind, category, start_ns, dur_ns,
           row_number() OVER (PARTITION BY run_id, rank, step, device, stream ORDER BY start_ns, kernel_id) - 1 AS ordinal,
           dense_rank() OVER (PARTITION BY run_id, rank, step ORDER BY name) AS name_key
    FROM _kernel_facts
    WHERE step IS NOT NULL
),
names AS (
    -- the names of each step by their number
    SELECT DISTINCT run_id, rank, step, name_key, name FROM seq
),
patterns AS (
    SELECT run_id, rank, step, phase, device, stream, is_main_stream, period, repeats, start_ordinal
    FROM layer_pattern_summary
    WHERE period IS NOT NULL
),
placed AS (
    SELECT p.run_id, p.rank, p.step, p.phase, p.device, p.stream, p.is_main_stream, p.period, p.repeats,
           CAST(floor((s.ordinal - p.start_ordinal) / p.period) AS BIGINT) AS layer,
           (s.ordinal - p.start_ordinal) % p.period AS position,
           s.name_key AS name, s.kind, s.category, s.start_ns, s.dur_ns
    FROM seq AS s
    JOIN patterns AS p
      ON p.run_id = s.run_id AND p.rank = s.rank AND p.step = s.step AND p.device = s.device AND p.stream = s.stream
    WHERE s.ordinal >= p.start_ordinal AND s.ordinal < p.start_ordinal + p.period * p.repeats
),
counted AS (
    -- where each activity starts in its layer, and how many layers have its name at its position
    SELECT *,
           start_ns - min(start_ns) OVER (PARTITION BY run_id, rank, step, device, stream, layer) AS offset_ns,
           count(*) OVER (PARTITION BY run_id, rank, step, device, stream, position, name) AS n_named
    FROM placed
),
-- the most common name at each position (ties: the smallest name)
ranked AS (
    SELECT *,
           first_value(name) OVER (PARTITION BY run_id, rank, step, device, stream, position
                                   ORDER BY n_named DESC, name) AS top_name
    FROM counted
),
stats AS (
    SELECT run_id, rank, step, any_value(phase) AS phase, device, stream, any_value(is_main_stream) AS is_main_stream,
           any_value(period) AS period, any_value(repeats) AS repeats, position,
           any_value(top_name) AS name,
           min(kind) FILTER (WHERE name = top_name) AS kind,
           min(category) FILTER (WHERE name = top_name) AS category,
           count(*) FILTER (WHERE name = top_name) AS n_named,
           quantile_cont(dur_ns, 0.5) AS median_ns, avg(dur_ns) AS mean_ns, min(dur_ns) AS min_ns,
           max(dur_ns) AS max_ns, CAST(sum(dur_ns) AS BIGINT) AS total_ns, quantile_cont(offset_ns, 0.5) AS median_offset_ns,
           count(*) AS n_layers
    FROM ranked
    GROUP BY run_id, rank, step, device, stream, position
)
SELECT st.run_id, st.rank, st.step, st.phase, st.device, st.stream, st.is_main_stream, st.period, st.repeats,
       st.position, n.name, st.kind, st.category, st.n_named / CAST(st.n_layers AS DOUBLE) AS name_share,
       st.median_ns, st.mean_ns, st.min_ns, st.max_ns, st.total_ns,
       st.median_ns / sum(st.median_ns) OVER (PARTITION BY st.run_id, st.rank, st.step, st.device, st.stream)
           AS share_of_layer,
       st.median_offset_ns
FROM stats AS st
LEFT JOIN names AS n ON n.run_id = st.run_id AND n.rank = st.rank AND n.step = st.step AND n.name_key = st.name;

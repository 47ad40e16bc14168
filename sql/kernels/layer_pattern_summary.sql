-- layer_pattern_summary: one row per (run_id, rank, step, device, stream) with at least 4 GPU activities in
-- the step: the repeating kernel sequence on that stream (one transformer layer), found by self-similarity.
-- Algorithm, per stream of a step (activities numbered 0.. by start time: the ordinal):
--   1. for every lag p (1 ≤ p ≤ n/2, p ≤ 1024), count the positions i with name[i] = name[i+p]
--      (a self-join on equal names within 1024 positions: the ordinals are cut into blocks of 256 and each
--      activity meets the same name in its own block and the next four only, so the work is about
--      n × 1280 / (distinct names), not Σ count(name)²);
--   2. match_ratio(p) = matches / (n − p) and coverage(p) = matches / n; a lag is a candidate with
--      ratio ≥ 0.6 and at least p matches (so that at least two layers repeat); the period is the
--      smallest candidate whose coverage is at least 0.75 × the best candidate's coverage, otherwise there
--      is no pattern (period NULL). Multiples of the layer score as well as the layer, and a whole forward
--      pass repeated per image (N images × L layers) scores a ratio near 1 at its own length F while the
--      layer's ratio is only about (L − 1) / L (the layers do not continue across the embedding and head
--      between two images); coverage weighs each lag by what it explains, (n − F) / n for the forward pass
--      against about (L − 1) / L for the layer, so the shortest period that repeats (the layer) wins;
--   3. the matched positions of that p form islands (runs of matched i, bridging gaps of up to
--      max(2, p/8) unmatched positions, so that one odd kernel in one layer does not split the block);
--      the island with the most matched positions is the repeating block. It starts at its first matched
--      position (so leading non-layer work, e.g. embedding, or a few layers of another shape, e.g. the 3
--      dense layers before 58 MoE layers of DeepSeek-R1, stay outside) and ends p after its last one.
--      Work after the last full layer (final norm, lm_head, sampling) is outside the block. Every island of
--      at least p matched positions is a block (blocks, total_layers: one block per image when the forward
--      pass repeats per image); insertions or deletions inside the block (a layer one kernel shorter) cut
--      it: see block_layers.
--   4. the start of the layer (layer_start): see the step where it is computed (module, norm or match);
--      repeats = ⌊(block end − start) / p⌋.
-- The layer is reported per stream. `is_main_stream` marks the stream with the most activities of the step
-- (the row that reports and tests read: "activities per layer on the main stream"); `step_layer_period`
-- adds up the periods of the streams of the step that repeat as often as the main stream, i.e. the
-- activities per layer over all streams (e.g. 16 on the main stream + 4 routed-expert kernels on a side
-- stream = 20).
-- Every part of the computation is partitioned by (run_id, rank, step), and each part reads its own copy
-- of the numbered sequence (DuckDB computes a CTE that is read twice once for all rows, which would stop
-- a filter on the step from reaching the scans): a query for one step computes that step only.
-- Columns:
--   run_id, rank, step, phase      VARCHAR, INTEGER, BIGINT, VARCHAR  the step (phase from step_spans:
--                            prefill, decode, mixed, unknown)
--   device, stream                 INTEGER, BIGINT  the stream
--   is_main_stream                 BOOLEAN  true for the stream with the most activities in the step (ties:
--                            lowest device, stream)
--   activities                     BIGINT  GPU activities of the step on this stream (n)
--   period                         BIGINT  activities per layer on this stream (NULL: no repeating sequence)
--   repeats                        BIGINT  full layers in the repeating block (NULL when period is NULL)
--   start_ordinal                  BIGINT  ordinal of the block's first activity (= layer 0, position 0)
--   end_ordinal                    BIGINT  ordinal just after the block's last full layer (start + period ×
--                            repeats)
--   match_ratio                    DOUBLE  share of positions i < n − period with name[i] = name[i + period]
--   block_layers                   DOUBLE  (block length) / period as a fraction: the layers the matched
--                                  block spans, counting a partial one (a first or last layer one kernel
--                                  shorter than the others still shows, e.g. 11.94 where repeats says 11)
--   coverage                       DOUBLE  period × repeats / activities: share of the stream's activities
--                            inside the block
--   layer_gpu_ns                   DOUBLE  median over the layers of the block of the sum of their durations
--   layer_wall_ns                  DOUBLE  median over the layers of (next layer's first start − this layer's
--                                  first start); the last layer uses the end of its last activity
--   layer_span_ns                  DOUBLE  median over the layers of (last end − first start) of the layer's
--                                  activities on this stream: a layer's wall time on the GPU
--   layer_span_min_ns, layer_span_max_ns   BIGINT  the shortest and longest of those spans
--   layer_start                    VARCHAR  how the first layer's start was found: 'module' (an nn.Module
--                                  layer boundary), 'norm' (a norm kernel that repeats one period later),
--                                  'match' (the first position of the repetition); NULL without a period
--   blocks                         BIGINT  contiguous blocks of at least two layers at this period (NULL: no
--                            period)
--   total_layers                   BIGINT  layers over all those blocks, each block rounded to whole layers
--                                  (a first layer one kernel shorter counts; N images × L layers gives N × L
--                                  while repeats counts the L of the biggest block)
--   step_layer_period              BIGINT  Σ period over the streams of the step whose repeats equal the main
--                                  stream's (the same on every row of the step; NULL without a main pattern)
-- materialized: per_run   rows kept per run (warehouse/derived.py: `tracehouse derive`): the report's step section
CREATE OR REPLACE VIEW layer_pattern_summary AS
-- each view it reads is read once (a CTE): DuckDB binds a view again at every reference
WITH all_kernel_facts AS (SELECT * FROM _kernel_facts),
seq_a AS (
    SELECT run_id, rank, step, device, stream, name,
           row_number() OVER (PARTITION BY run_id, rank, step, device, stream
                              ORDER BY start_ns, kernel_id) - 1 AS ordinal,
           count(*) OVER (PARTITION BY run_id, rank, step, device, stream) AS n
    FROM all_kernel_facts
    WHERE step IS NOT NULL
),
seq_b AS (
    SELECT run_id, rank, step, device, stream, name,
           row_number() OVER (PARTITION BY run_id, rank, step, device, stream
                              ORDER BY start_ns, kernel_id) - 1 AS ordinal
    FROM all_kernel_facts
    WHERE step IS NOT NULL
),
-- step 1: every (i, p) with name[i] = name[i + p], 1 <= p <= min(n / 2, 1024): i meets the same name in its
-- block of 256 ordinals and the next four blocks
lag_matches AS (
    SELECT a.run_id, a.rank, a.step, a.device, a.stream, a.n, a.ordinal AS i, b.ordinal - a.ordinal AS p
    FROM seq_a AS a
    CROSS JOIN (VALUES (0), (1), (2), (3), (4)) AS o(k)
    JOIN seq_b AS b
      ON b.run_id = a.run_id AND b.rank = a.rank AND b.step = a.step AND b.device = a.device
     AND b.stream = a.stream AND b.name = a.name
     AND CAST(floor(b.ordinal / 256) AS BIGINT) = CAST(floor(a.ordinal / 256) AS BIGINT) + o.k
    WHERE a.n >= 4 AND b.ordinal > a.ordinal AND 2 * (b.ordinal - a.ordinal) <= a.n AND b.ordinal - a.ordinal <= 1024
),
-- step 2: the score of every lag, then the period
lag_scores AS (
    SELECT run_id, rank, step, device, stream, p, max(n) AS n, count(*) AS matches,
           count(*) / CAST(max(n) - p AS DOUBLE) AS ratio
    FROM lag_matches
    GROUP BY run_id, rank, step, device, stream, p
),
eligible AS (
    -- coverage(p) = matches / n: the share of the stream's activities that repeat p later
    SELECT *, max(matches / CAST(n AS DOUBLE)) OVER (PARTITION BY run_id, rank, step, device, stream) AS best_coverage
    FROM lag_scores
    WHERE matches >= p AND ratio >= 0.6
),
chosen AS (
    SELECT run_id, rank, step, device, stream, p AS period, ratio AS match_ratio
    FROM (
        SELECT *, row_number() OVER (PARTITION BY run_id, rank, step, device, stream ORDER BY p) AS pick
        FROM eligible
        WHERE matches / CAST(n AS DOUBLE) >= 0.75 * best_coverage
    ) AS candidates
    WHERE pick = 1
),
-- step 3: islands of matched positions at the chosen lag (gaps-and-islands with a tolerance)
seq_c AS (
    SELECT run_id, rank, step, device, stream, name,
           row_number() OVER (PARTITION BY run_id, rank, step, device, stream
                              ORDER BY start_ns, kernel_id) - 1 AS ordinal
    FROM all_kernel_facts
    WHERE step IS NOT NULL
),
seq_d AS (
    SELECT run_id, rank, step, device, stream, name,
           row_number() OVER (PARTITION BY run_id, rank, step, device, stream
                              ORDER BY start_ns, kernel_id) - 1 AS ordinal
    FROM all_kernel_facts
    WHERE step IS NOT NULL
),
matched AS (
    SELECT c.run_id, c.rank, c.step, c.device, c.stream, c.period, c.match_ratio, a.ordinal AS i,
           a.ordinal - lag(a.ordinal) OVER (PARTITION BY c.run_id, c.rank, c.step, c.device, c.stream
                                            ORDER BY a.ordinal) AS gap
    FROM chosen AS c
    JOIN seq_c AS a
      ON a.run_id = c.run_id AND a.rank = c.rank AND a.step = c.step AND a.device = c.device AND a.stream = c.stream
    JOIN seq_d AS b
      ON b.run_id = c.run_id AND b.rank = c.rank AND b.step = c.step AND b.device = c.device AND b.stream = c.stream
     AND b.ordinal = a.ordinal + c.period AND b.name = a.name
),
islands AS (
    SELECT *,
           sum(CASE WHEN gap IS NULL OR gap > 1 + greatest(2, CAST(floor(period / 8) AS BIGINT)) THEN 1 ELSE 0 END)
               OVER (PARTITION BY run_id, rank, step, device, stream ORDER BY i
                     ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS island
    FROM matched
),
island_sizes AS (
    SELECT run_id, rank, step, device, stream, island, any_value(period) AS period,
           any_value(match_ratio) AS match_ratio, min(i) AS first_i, max(i) AS last_i, count(*) AS matched_positions
    FROM islands
    GROUP BY run_id, rank, step, device, stream, island
),
-- every island of at least two layers is a block of layers (a forward pass repeated per image gives one
-- block per image); the biggest is the block the layer is read from
blocks AS (
    SELECT run_id, rank, step, device, stream, count(*) AS blocks,
           CAST(sum(round((last_i + period + 1 - first_i) / CAST(period AS DOUBLE))) AS BIGINT) AS total_layers
    FROM island_sizes
    WHERE matched_positions >= period
    GROUP BY run_id, rank, step, device, stream
),
regions AS (
    SELECT run_id, rank, step, device, stream, period, match_ratio, first_i, last_i + period + 1 AS region_end,
           (last_i + period + 1 - first_i) / CAST(period AS DOUBLE) AS block_layers
    FROM (
        SELECT *, row_number() OVER (PARTITION BY run_id, rank, step, device, stream
                                     ORDER BY matched_positions DESC, first_i) AS pick
        FROM island_sizes
    ) AS ranked
    WHERE pick = 1
),
-- step 4: where the layer starts. The matched block starts where the repetition starts, which need not be
-- a layer boundary (layer 0's first kernel often differs from the others', e.g. an RMSNorm without the
-- residual add, so the block starts one kernel into the layer). Candidates lie within one period either
-- side of the block's first matched position:
--   module: where the kernel's layer module changes. The layer module of a kernel is the component of its
--           nn.Module path (_kernel_facts.module_path) of the layer class: of the module classes with
--           two or more instances in the step (at one depth of the path), the one around the most kernels,
--           the outermost on a tie (Qwen3DecoderLayer_0 .. _35, ViTLayer_0 .. _11; not BERT's three
--           Embedding_N, nor the Linear_N inside each layer);
--   norm:   a `norm` kernel that has a `norm` kernel one period later (pre-norm layers begin with their norm);
-- the earliest module candidate wins, else the earliest norm candidate, else the block's first position.
-- repeats = ⌊(block end − start) / period⌋ full layers from there.
module_paths AS (
    -- _kernel_facts' module_path: kernel_launch_site's, which a join here would compute again for the whole
    -- run (every activity's stack; no filter on the step reaches it)
    SELECT run_id, rank, step, device, stream, kernel_id, module_path
    FROM all_kernel_facts
    WHERE step IS NOT NULL AND module_path IS NOT NULL
),
mod_parts AS (
    SELECT run_id, rank, step, device, stream, kernel_id, u.part, u.depth,
           regexp_replace(u.part, '_[0-9]+$', '') AS cls
    FROM module_paths, unnest(string_split(module_path, '.')) WITH ORDINALITY AS u(part, depth)
),
repeated_classes AS (
    SELECT run_id, rank, step, device, stream, depth, cls, count(*) AS kernels
    FROM mod_parts
    GROUP BY run_id, rank, step, device, stream, depth, cls
    HAVING count(DISTINCT part) >= 2
),
layer_level AS (
    -- the layer class: the repeated class around the most kernels, the outermost on a tie (a layer's
    -- Linear_N modules repeat too, but around fewer kernels than the layers that hold them)
    SELECT run_id, rank, step, device, stream, depth, cls
    FROM (SELECT *, row_number() OVER (PARTITION BY run_id, rank, step, device, stream
                                       ORDER BY kernels DESC, depth, cls) AS pick
          FROM repeated_classes) AS ranked
    WHERE pick = 1
),
layer_of AS (
    SELECT m.run_id, m.rank, m.step, m.device, m.stream, m.kernel_id, m.part AS layer_module
    FROM mod_parts AS m
    JOIN layer_level AS l
      ON l.run_id = m.run_id AND l.rank = m.rank AND l.step = m.step AND l.device = m.device
     AND l.stream = m.stream AND l.depth = m.depth AND l.cls = m.cls
),
seq_e AS (
    SELECT f.run_id, f.rank, f.step, f.device, f.stream, f.category, f.start_ns, f.end_ns, f.dur_ns,
           lo.layer_module,
           row_number() OVER (PARTITION BY f.run_id, f.rank, f.step, f.device, f.stream
                              ORDER BY f.start_ns, f.kernel_id) - 1 AS ordinal
    FROM all_kernel_facts AS f
    LEFT JOIN layer_of AS lo
      ON lo.run_id = f.run_id AND lo.rank = f.rank AND lo.step = f.step AND lo.device = f.device
     AND lo.stream = f.stream AND lo.kernel_id = f.kernel_id
    WHERE f.step IS NOT NULL
),
seq_g AS (
    SELECT *, lag(layer_module) OVER (PARTITION BY run_id, rank, step, device, stream ORDER BY ordinal) AS prev_module
    FROM seq_e
),
starts AS (
    SELECT r.run_id, r.rank, r.step, r.device, r.stream, r.period, r.match_ratio, r.first_i, r.region_end,
           r.block_layers,
           min(a.ordinal) FILTER (WHERE a.layer_module IS NOT NULL AND a.layer_module IS DISTINCT FROM a.prev_module)
               AS module_start,
           min(a.ordinal) FILTER (WHERE a.category = 'norm' AND b.category = 'norm') AS norm_start
    FROM regions AS r
    JOIN seq_g AS a
      ON a.run_id = r.run_id AND a.rank = r.rank AND a.step = r.step AND a.device = r.device AND a.stream = r.stream
     AND a.ordinal >= r.first_i - r.period + 1 AND a.ordinal <= r.first_i + r.period - 1
     AND a.ordinal + r.period <= r.region_end
    LEFT JOIN seq_g AS b
      ON b.run_id = a.run_id AND b.rank = a.rank AND b.step = a.step AND b.device = a.device AND b.stream = a.stream
     AND b.ordinal = a.ordinal + r.period
    GROUP BY r.run_id, r.rank, r.step, r.device, r.stream, r.period, r.match_ratio, r.first_i, r.region_end,
             r.block_layers
),
started AS (
    SELECT *,
           coalesce(module_start, norm_start, first_i) AS start_ordinal,
           CASE WHEN module_start IS NOT NULL THEN 'module' WHEN norm_start IS NOT NULL THEN 'norm' ELSE 'match' END
               AS layer_start,
           CAST(floor((region_end - coalesce(module_start, norm_start, first_i)) / period) AS BIGINT) AS repeats
    FROM starts
),
in_region AS (
    SELECT r.run_id, r.rank, r.step, r.device, r.stream, r.period, r.repeats, r.block_layers, r.match_ratio,
           r.start_ordinal, r.layer_start, s.ordinal, s.start_ns, s.end_ns, s.dur_ns
    FROM started AS r
    JOIN seq_e AS s
      ON s.run_id = r.run_id AND s.rank = r.rank AND s.step = r.step AND s.device = r.device AND s.stream = r.stream
    WHERE s.ordinal >= r.start_ordinal AND s.ordinal < r.start_ordinal + r.period * r.repeats
),
-- per layer of the block: its GPU time and its wall time on this stream
layers AS (
    SELECT run_id, rank, step, device, stream,
           CAST(floor((ordinal - start_ordinal) / period) AS BIGINT) AS layer,
           any_value(period) AS period, any_value(repeats) AS repeats, any_value(block_layers) AS block_layers,
           any_value(match_ratio) AS match_ratio, any_value(start_ordinal) AS start_ordinal,
           any_value(layer_start) AS layer_start,
           CAST(sum(dur_ns) AS BIGINT) AS gpu_ns, min(start_ns) AS first_start_ns, max(end_ns) AS last_end_ns
    FROM in_region
    GROUP BY 1, 2, 3, 4, 5, 6
),
layer_times AS (
    SELECT run_id, rank, step, device, stream,
           any_value(period) AS period, any_value(repeats) AS repeats, any_value(block_layers) AS block_layers,
           any_value(match_ratio) AS match_ratio, any_value(start_ordinal) AS start_ordinal,
           any_value(layer_start) AS layer_start,
           quantile_cont(gpu_ns, 0.5) AS layer_gpu_ns,
           quantile_cont(coalesce(next_start_ns, last_end_ns) - first_start_ns, 0.5) AS layer_wall_ns,
           quantile_cont(last_end_ns - first_start_ns, 0.5) AS layer_span_ns,
           min(last_end_ns - first_start_ns) AS layer_span_min_ns,
           max(last_end_ns - first_start_ns) AS layer_span_max_ns
    FROM (
        SELECT *, lead(first_start_ns) OVER (PARTITION BY run_id, rank, step, device, stream ORDER BY layer) AS next_start_ns
        FROM layers
    ) AS l
    GROUP BY run_id, rank, step, device, stream
),
seq_f AS (
    SELECT DISTINCT run_id, rank, step, device, stream,
           count(*) OVER (PARTITION BY run_id, rank, step, device, stream) AS n
    FROM all_kernel_facts
    WHERE step IS NOT NULL
),
stream_sizes AS (
    SELECT run_id, rank, step, device, stream, n,
           row_number() OVER (PARTITION BY run_id, rank, step ORDER BY n DESC, device, stream) = 1 AS is_main_stream
    FROM seq_f
    WHERE n >= 4
),
summary AS (
    SELECT z.run_id, z.rank, z.step, sp.phase, z.device, z.stream, z.is_main_stream, z.n AS activities,
           t.period, t.repeats, t.start_ordinal, t.start_ordinal + t.period * t.repeats AS end_ordinal,
           t.match_ratio, t.block_layers, t.period * t.repeats / CAST(z.n AS DOUBLE) AS coverage,
           t.layer_gpu_ns, t.layer_wall_ns, t.layer_span_ns, t.layer_span_min_ns, t.layer_span_max_ns,
           t.layer_start, b.blocks, b.total_layers
    FROM stream_sizes AS z
    LEFT JOIN layer_times AS t
      ON t.run_id = z.run_id AND t.rank = z.rank AND t.step = z.step AND t.device = z.device AND t.stream = z.stream
    LEFT JOIN blocks AS b
      ON b.run_id = t.run_id AND b.rank = t.rank AND b.step = t.step AND b.device = t.device AND b.stream = t.stream
    LEFT JOIN step_spans AS sp
      ON sp.run_id = z.run_id AND sp.rank = z.rank AND sp.step = z.step
)
-- Σ period over the streams of the step that repeat as often as the main stream
SELECT run_id, rank, step, phase, device, stream, is_main_stream, activities, period, repeats, start_ordinal,
       end_ordinal, match_ratio, block_layers, coverage, layer_gpu_ns, layer_wall_ns, layer_span_ns,
       layer_span_min_ns, layer_span_max_ns, layer_start, blocks, total_layers,
       CAST(sum(CASE WHEN repeats = main_repeats THEN period END)
                OVER (PARTITION BY run_id, rank, step) AS BIGINT) AS step_layer_period
FROM (
    SELECT *, max(CASE WHEN is_main_stream THEN repeats END) OVER (PARTITION BY run_id, rank, step) AS main_repeats
    FROM summary
) AS s

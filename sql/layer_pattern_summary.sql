-- layer_pattern_summary: one row per (run_id, rank, step, device, stream) with at least 4 GPU activities in
-- the step: the repeating kernel sequence on that stream (one transformer layer), found by self-similarity.
-- Algorithm, per stream of a step (activities numbered 0.. by start time: the ordinal):
--   1. for every lag p (1 ≤ p ≤ n/2, p ≤ 1024), count the positions i with name[i] = name[i+p]
--      (a self-join on equal names, so the work is Σ count(name)², not n²);
--   2. match_ratio(p) = matches / (n − p); the period is the smallest p whose ratio is at least 0.9 × the
--      best ratio (multiples of the period score as well as the period itself), with ratio ≥ 0.6 and at
--      least p matches (so that at least two layers repeat); otherwise there is no pattern (period NULL);
--   3. the matched positions of that p form islands (runs of matched i, bridging gaps of up to
--      max(2, p/8) unmatched positions, so that one odd kernel in one layer does not split the block);
--      the island with the most matched positions is the repeating block. It starts at its first matched
--      position (so leading non-layer work, e.g. embedding, or a few layers of another shape, e.g. the 3
--      dense layers before 58 MoE layers of DeepSeek-R1, stay outside) and ends p after its last one.
--      repeats = ⌊block length / p⌋. Work after the last full layer (final norm, lm_head, sampling) is
--      outside the block. When the block is longer than repeats × p, several rotations of the layer fit;
--      the first one that starts with a `norm` kernel is taken (pre-norm layers begin with their norm).
--      Insertions or deletions inside the block (a layer one kernel shorter) cut it: see block_layers.
-- The layer is reported per stream. `is_main_stream` marks the stream with the most activities of the step
-- (the row that reports and tests read: "activities per layer on the main stream"); `step_layer_period`
-- adds up the periods of the streams of the step that repeat as often as the main stream, i.e. the
-- activities per layer over all streams (e.g. 16 on the main stream + 4 routed-expert kernels on a side
-- stream = 20).
-- Columns:
--   run_id, rank, step, phase      the step (phase from step_spans: prefill, decode, mixed, unknown)
--   device, stream                 the stream
--   is_main_stream                 true for the stream with the most activities in the step (ties: lowest device, stream)
--   activities                     GPU activities of the step on this stream (n)
--   period                         activities per layer on this stream (NULL: no repeating sequence)
--   repeats                        full layers in the repeating block (NULL when period is NULL)
--   start_ordinal                  ordinal of the block's first activity (= layer 0, position 0)
--   end_ordinal                    ordinal just after the block's last full layer (start + period × repeats)
--   match_ratio                    share of positions i < n − period with name[i] = name[i + period]
--   block_layers                   (block length) / period as a fraction: the layers the matched block spans,
--                                  counting a partial one (a first or last layer one kernel shorter than
--                                  the others still shows, e.g. 11.94 where repeats says 11)
--   coverage                       period × repeats / activities: share of the stream's activities inside the block
--   layer_gpu_ns                   median over the layers of the block of the sum of their durations
--   layer_wall_ns                  median over the layers of (next layer's first start − this layer's first
--                                  start); the last layer uses the end of its last activity
--   step_layer_period              Σ period over the streams of the step whose repeats equal the main
--                                  stream's (the same on every row of the step; NULL without a main pattern)
CREATE OR REPLACE VIEW layer_pattern_summary AS
WITH acts AS (
    SELECT run_id, rank, step, device, stream, kernel_id, name, category, start_ns, end_ns, dur_ns
    FROM _kernel_facts
    WHERE step IS NOT NULL
),
seq AS (
    SELECT *,
           row_number() OVER (PARTITION BY run_id, rank, step, device, stream ORDER BY start_ns, kernel_id) - 1 AS ordinal,
           count(*) OVER (PARTITION BY run_id, rank, step, device, stream) AS n
    FROM acts
),
stream_sizes AS (
    SELECT run_id, rank, step, device, stream, n,
           row_number() OVER (PARTITION BY run_id, rank, step ORDER BY n DESC, device, stream) = 1 AS is_main_stream
    FROM (SELECT DISTINCT run_id, rank, step, device, stream, n FROM seq) AS s
    WHERE n >= 4
),
-- step 1: every (i, p) with name[i] = name[i + p]
lag_matches AS (
    SELECT a.run_id, a.rank, a.step, a.device, a.stream, a.ordinal AS i, b.ordinal - a.ordinal AS p
    FROM seq AS a
    JOIN seq AS b
      ON b.run_id = a.run_id AND b.rank = a.rank AND b.step = a.step AND b.device = a.device
     AND b.stream = a.stream AND b.name = a.name
     AND b.ordinal > a.ordinal AND 2 * (b.ordinal - a.ordinal) <= a.n AND b.ordinal - a.ordinal <= 1024
    WHERE a.n >= 4
),
-- step 2: the score of every lag, then the period
lag_scores AS (
    SELECT m.run_id, m.rank, m.step, m.device, m.stream, m.p, count(*) AS matches,
           count(*) / CAST(max(z.n) - m.p AS DOUBLE) AS ratio
    FROM lag_matches AS m
    JOIN stream_sizes AS z
      ON z.run_id = m.run_id AND z.rank = m.rank AND z.step = m.step AND z.device = m.device AND z.stream = m.stream
    GROUP BY m.run_id, m.rank, m.step, m.device, m.stream, m.p
),
eligible AS (
    SELECT *, max(ratio) OVER (PARTITION BY run_id, rank, step, device, stream) AS best_ratio
    FROM lag_scores
    WHERE matches >= p
),
periods AS (
    SELECT run_id, rank, step, device, stream, min(p) AS period
    FROM eligible
    WHERE best_ratio >= 0.6 AND ratio >= 0.9 * best_ratio
    GROUP BY run_id, rank, step, device, stream
),
chosen AS (
    SELECT e.run_id, e.rank, e.step, e.device, e.stream, e.p AS period, e.ratio AS match_ratio
    FROM eligible AS e
    JOIN periods AS q
      ON q.run_id = e.run_id AND q.rank = e.rank AND q.step = e.step AND q.device = e.device
     AND q.stream = e.stream AND q.period = e.p
),
-- step 3: islands of matched positions at the chosen lag (gaps-and-islands with a tolerance)
matched AS (
    SELECT m.run_id, m.rank, m.step, m.device, m.stream, m.i, c.period,
           m.i - lag(m.i) OVER (PARTITION BY m.run_id, m.rank, m.step, m.device, m.stream ORDER BY m.i) AS gap
    FROM lag_matches AS m
    JOIN chosen AS c
      ON c.run_id = m.run_id AND c.rank = m.rank AND c.step = m.step AND c.device = m.device
     AND c.stream = m.stream AND c.period = m.p
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
           min(i) AS first_i, max(i) AS last_i, count(*) AS matched_positions
    FROM islands
    GROUP BY run_id, rank, step, device, stream, island
),
regions AS (
    SELECT run_id, rank, step, device, stream, period, first_i, last_i + period + 1 AS region_end,
           CAST(floor((last_i + period + 1 - first_i) / period) AS BIGINT) AS repeats,
           (last_i + period + 1 - first_i) / CAST(period AS DOUBLE) AS block_layers
    FROM (
        SELECT *, row_number() OVER (PARTITION BY run_id, rank, step, device, stream
                                     ORDER BY matched_positions DESC, first_i) AS pick
        FROM island_sizes
    ) AS ranked
    WHERE pick = 1
),
-- the rotation: any start in [first_i, region_end − repeats × period] gives the same full layers (e.g. when
-- the kernel before the block, the all-reduce that ends the last dense layer, equals the one that ends each
-- MoE layer). Pre-norm transformer layers begin with a norm, so take the first norm in that range, else first_i.
norm_starts AS (
    SELECT r.run_id, r.rank, r.step, r.device, r.stream, min(s.ordinal) AS norm_start
    FROM regions AS r
    JOIN seq AS s
      ON s.run_id = r.run_id AND s.rank = r.rank AND s.step = r.step AND s.device = r.device AND s.stream = r.stream
    WHERE s.category = 'norm' AND s.ordinal >= r.first_i AND s.ordinal <= r.region_end - r.repeats * r.period
    GROUP BY r.run_id, r.rank, r.step, r.device, r.stream
),
blocks AS (
    SELECT r.run_id, r.rank, r.step, r.device, r.stream, r.period, r.repeats, r.block_layers,
           coalesce(n.norm_start, r.first_i) AS start_ordinal
    FROM regions AS r
    LEFT JOIN norm_starts AS n
      ON n.run_id = r.run_id AND n.rank = r.rank AND n.step = r.step AND n.device = r.device AND n.stream = r.stream
),
-- per layer of the block: its GPU time and its wall time on this stream
layers AS (
    SELECT s.run_id, s.rank, s.step, s.device, s.stream,
           CAST(floor((s.ordinal - b.start_ordinal) / b.period) AS BIGINT) AS layer,
           CAST(sum(s.dur_ns) AS BIGINT) AS gpu_ns, min(s.start_ns) AS first_start_ns, max(s.end_ns) AS last_end_ns
    FROM seq AS s
    JOIN blocks AS b
      ON b.run_id = s.run_id AND b.rank = s.rank AND b.step = s.step AND b.device = s.device AND b.stream = s.stream
    WHERE s.ordinal >= b.start_ordinal AND s.ordinal < b.start_ordinal + b.period * b.repeats
    GROUP BY 1, 2, 3, 4, 5, 6
),
layer_times AS (
    SELECT run_id, rank, step, device, stream,
           quantile_cont(gpu_ns, 0.5) AS layer_gpu_ns,
           quantile_cont(coalesce(next_start_ns, last_end_ns) - first_start_ns, 0.5) AS layer_wall_ns
    FROM (
        SELECT *, lead(first_start_ns) OVER (PARTITION BY run_id, rank, step, device, stream ORDER BY layer) AS next_start_ns
        FROM layers
    ) AS l
    GROUP BY run_id, rank, step, device, stream
),
summary AS (
    SELECT z.run_id, z.rank, z.step, sp.phase, z.device, z.stream, z.is_main_stream, z.n AS activities,
           b.period, b.repeats, b.start_ordinal, b.start_ordinal + b.period * b.repeats AS end_ordinal,
           c.match_ratio, b.block_layers, b.period * b.repeats / CAST(z.n AS DOUBLE) AS coverage,
           t.layer_gpu_ns, t.layer_wall_ns
    FROM stream_sizes AS z
    LEFT JOIN blocks AS b
      ON b.run_id = z.run_id AND b.rank = z.rank AND b.step = z.step AND b.device = z.device AND b.stream = z.stream
    LEFT JOIN chosen AS c
      ON c.run_id = z.run_id AND c.rank = z.rank AND c.step = z.step AND c.device = z.device AND c.stream = z.stream
    LEFT JOIN layer_times AS t
      ON t.run_id = z.run_id AND t.rank = z.rank AND t.step = z.step AND t.device = z.device AND t.stream = z.stream
    LEFT JOIN step_spans AS sp
      ON sp.run_id = z.run_id AND sp.rank = z.rank AND sp.step = z.step
),
step_periods AS (
    SELECT o.run_id, o.rank, o.step, CAST(sum(o.period) AS BIGINT) AS step_layer_period
    FROM summary AS o
    JOIN summary AS m
      ON m.run_id = o.run_id AND m.rank = o.rank AND m.step = o.step AND m.is_main_stream
    WHERE o.repeats = m.repeats
    GROUP BY o.run_id, o.rank, o.step
)
SELECT s.*, p.step_layer_period
FROM summary AS s
LEFT JOIN step_periods AS p ON p.run_id = s.run_id AND p.rank = s.rank AND p.step = s.step;

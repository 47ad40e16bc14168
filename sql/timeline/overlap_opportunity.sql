-- overlap_opportunity: one row per (run_id, phase, kernel name): could this kernel's time be hidden under
-- work on another stream, and what to do about it. Every kernel is kept; `reportable` marks the rows
-- that the report shows as overlap recommendations.
-- Formal signal (from kernel_overlap, summed over the kernel's activities on all ranks and streams):
-- exclusive time ran while no other stream of the device was busy; hidden time ran under another stream.
-- Overlap needs a second stream: on a device where only one stream ran work, every kernel is trivially
-- 100 % exclusive and "overlap it" is not a finding (nothing runs beside it to overlap with). Such a
-- kernel (peer_streams = 0: no device it ran on had another stream with GPU activity in the run) gets the
-- verdict `single-stream`, the recommendation `not applicable`, second_stream_needed = TRUE, and is not
-- reportable; a single-stream run has no overlap rows in the report. Its exclusive time is still here.
-- Verdict (the legend a report quotes):
--   single-stream   no other stream of its device ran work: overlapping it would first need a second
--                   stream (its exclusive 100 % carries no information)
--   headroom        gpu_time_ns >= 5000 (5 us in total) and exclusive_ratio >= 0.45: at least 45 % of its
--                   time nothing ran on another stream of the device, so moving it (or work around it)
--                   beside other streams' work could save up to its exclusive time
--   low-roi-hidden  hidden_ratio >= 0.65: at least 65 % of its time already ran under another stream's
--                   work; little left to gain (low return on investment)
--   neutral         neither (or under 5 us in total)
-- Priority, by share of the phase's GPU time (kernel_summary.share): P1 >= 10 %, P2 >= 5 %, P3 >= 2 %,
-- P4 >= 1 %, P5 below 1 %. P1 is the most worth looking at.
-- Dependency risk: how likely the kernel's neighbours depend on it (so it cannot simply run elsewhere),
-- from the activities just before and just after each activity on the same stream
-- (rank, device, stream, ordered by start time). A producer -> consumer pair is a category pair in which
-- the consumer reads the producer's output directly:
--   gemm -> activation, moe -> activation, activation -> gemm, activation -> moe, activation -> quantize,
--   quantize -> gemm, quantize -> moe, norm -> quantize, elementwise -> norm, rope -> attention,
--   attention -> quantize, gemm -> communication, communication -> norm
-- Per activity: high when (previous, this) or (this, next) is such a pair; low when neither is and every
-- neighbour it has is of another category (the stream switches to unrelated work around it, which
-- another stream could take); unclear otherwise (a neighbour of the same category, e.g. a chain of GEMMs,
-- or no neighbour at all). Per kernel: high when >= 50 % of its launches are high, else low when >= 50 %
-- are low, else unclear.
-- Recommendation (rule table, first match):
--   verdict single-stream                  -> not applicable (no recommendation: a second stream needed)
--   verdict headroom,       risk low      -> try overlap   (move it, or the work around it, to another stream)
--   verdict headroom,       risk high, a fusion row -> try fusion (its neighbour consumes its output, and a
--                                            fusion_match row names the fusion: fusion_pattern)
--   verdict headroom,       risk high, none         -> keep in order (its neighbour consumes its output and no
--                                            known fusion applies: neither overlap nor a catalogue fusion)
--   verdict headroom,       risk unclear  -> check deps    (read the data dependencies before moving it)
--   verdict low-roi-hidden, any risk      -> skip overlap  (already hidden)
--   verdict neutral,        priority P1/P2 -> manual check (large, but the signal is mixed)
--   verdict neutral,        otherwise     -> observe later
-- Fusion row: fusion_pattern_id / fusion_pattern name the fusion_match row (status Confirmed or Likely, same
--   run and phase) whose evidence chains (_fusion_chains) contain an activity of this kernel name; of several,
--   the one with the largest share (what it would remove), then the first pattern_id. "try fusion" is said
--   only with such a row.
-- Python scopes: python_site comes from kernel_summary of the same run ("formal" mode). Mapping mode
-- (`tracehouse report --mapping RUN`, a graph-off run of the same workload) is not a view: join this view to
-- kernel_summary of the mapping run on (phase, name) and take its python_site; scope_source says which.
-- Columns:
--   run_id, phase, name           VARCHAR  the kernel (phase 'unknown' when none)
--   category                      VARCHAR  its category (kernel_category)
--   launches, streams             BIGINT  activities, and distinct (rank, device, stream) they ran on
--   peer_streams                  BIGINT  the most other streams with GPU activity on any device it ran on
--                                 (0: it ran only on single-stream devices)
--   second_stream_needed          BOOLEAN  peer_streams = 0
--   gpu_time_ns                   HUGEINT  sum of durations
--   exclusive_ns, hidden_ns, hidden_under_compute_ns   HUGEINT  sums from kernel_overlap
--   exclusive_ratio, hidden_ratio DOUBLE  exclusive_ns / gpu_time_ns, hidden_ns / gpu_time_ns (NULL when 0)
--   exclusive_pct, hidden_pct     DOUBLE  the two ratios in percent
--   verdict                       VARCHAR  single-stream, headroom, low-roi-hidden or neutral
--   share                         DOUBLE  gpu_time_ns / the phase's GPU time (kernel_summary.share)
--   priority                      VARCHAR  P1 .. P5
--   dep_high_ratio, dep_low_ratio DOUBLE  share of its launches whose neighbours make the risk high / low
--   prev_category, next_category  VARCHAR  the most common category just before / after it on its stream
--   dependency_risk               VARCHAR  low, high or unclear
--   recommendation                VARCHAR  not applicable, try overlap, try fusion, keep in order, check deps,
--                                 skip overlap, manual check, observe later
--   reportable                    BOOLEAN  share >= report_params.report_bar (the 1 % reporting bar) and not
--                                 single-stream
--   python_site, python_site_share  VARCHAR, DOUBLE  top launch site and its share of the kernel's time
--                            (kernel_summary)
--   scope_source                  VARCHAR  'formal' (sites from this run)
--   fusion_pattern_id, fusion_pattern   VARCHAR  the fusion_match row whose chains hold this kernel (above),
--                                 its pattern_id and name; NULL: none
-- materialized: per_run   rows kept per run (warehouse/derived.py: `tracehouse derive`)
CREATE OR REPLACE VIEW overlap_opportunity AS
-- each view it reads is read once (a CTE): DuckDB binds a view again at every reference
WITH all_kernel_facts AS (SELECT * FROM _kernel_facts),
all_fusion_chains AS (SELECT * FROM _fusion_chains),
fusion_rows AS (
    SELECT run_id, phase, pattern_id, pattern_name, share
    FROM fusion_match WHERE status IN ('Confirmed', 'Likely')
),
fusion_kernels AS (
    -- per (run, phase, kernel name) the fusion row whose evidence chains hold it: the largest share first
    SELECT run_id, phase, name, pattern_id, pattern_name,
           row_number() OVER (PARTITION BY run_id, phase, name ORDER BY share DESC NULLS LAST, pattern_id) AS rn
    FROM (
        SELECT DISTINCT r.run_id, r.phase, m.name, r.pattern_id, r.pattern_name, r.share
        FROM fusion_rows AS r
        JOIN (
            -- each chain's step names, from one read of the chains (Spark inlines every reference)
            SELECT c.run_id, c.phase, c.pattern_id,
                   CASE s.i WHEN 1 THEN c.name_1 WHEN 2 THEN c.name_2 ELSE c.name_3 END AS name
            FROM all_fusion_chains AS c
            CROSS JOIN (VALUES (1), (2), (3)) AS s(i)
        ) AS m ON m.run_id = r.run_id AND m.phase = r.phase AND m.pattern_id = r.pattern_id AND m.name IS NOT NULL
    ) AS x
),
dep_pairs AS (
    SELECT * FROM (VALUES
        ('gemm', 'activation'), ('moe', 'activation'), ('activation', 'gemm'), ('activation', 'moe'),
        ('activation', 'quantize'), ('quantize', 'gemm'), ('quantize', 'moe'), ('norm', 'quantize'),
        ('elementwise', 'norm'), ('rope', 'attention'), ('attention', 'quantize'),
        ('gemm', 'communication'), ('communication', 'norm')
    ) AS t(producer, consumer)
),
neighbours AS (
    SELECT run_id, rank, kernel_id, phase_key AS phase, name, category,
           lag(category) OVER (PARTITION BY run_id, rank, device, stream ORDER BY start_ns, kernel_id) AS prev_category,
           lead(category) OVER (PARTITION BY run_id, rank, device, stream ORDER BY start_ns, kernel_id) AS next_category
    FROM all_kernel_facts
),
risk AS (
    SELECT n.run_id, n.phase, n.name, n.prev_category, n.next_category,
           CASE
               WHEN pp.producer IS NOT NULL OR np.producer IS NOT NULL THEN 'high'
               WHEN (n.prev_category IS NOT NULL OR n.next_category IS NOT NULL)
                    AND coalesce(n.prev_category <> n.category, TRUE)
                    AND coalesce(n.next_category <> n.category, TRUE) THEN 'low'
               ELSE 'unclear'
           END AS risk
    FROM neighbours AS n
    LEFT JOIN dep_pairs AS pp ON pp.producer = n.prev_category AND pp.consumer = n.category
    LEFT JOIN dep_pairs AS np ON np.producer = n.category AND np.consumer = n.next_category
),
risk_per_kernel AS (
    SELECT run_id, phase, name,
           avg(CASE WHEN risk = 'high' THEN 1.0 ELSE 0.0 END) AS dep_high_ratio,
           avg(CASE WHEN risk = 'low' THEN 1.0 ELSE 0.0 END) AS dep_low_ratio
    FROM risk
    GROUP BY run_id, phase, name
),
prev_ranked AS (
    SELECT run_id, phase, name, prev_category,
           row_number() OVER (PARTITION BY run_id, phase, name ORDER BY count(*) DESC, prev_category) AS rn
    FROM risk WHERE prev_category IS NOT NULL
    GROUP BY run_id, phase, name, prev_category
),
next_ranked AS (
    SELECT run_id, phase, name, next_category,
           row_number() OVER (PARTITION BY run_id, phase, name ORDER BY count(*) DESC, next_category) AS rn
    FROM risk WHERE next_category IS NOT NULL
    GROUP BY run_id, phase, name, next_category
),
device_streams AS (
    SELECT run_id, rank, device, count(DISTINCT stream) AS n_streams FROM all_kernel_facts GROUP BY run_id, rank, device
),
formal AS (
    SELECT o.run_id, o.phase, o.name, count(*) AS launches,
           count(DISTINCT CAST(o.rank AS VARCHAR) || ':' || CAST(o.device AS VARCHAR) || ':' || CAST(o.stream AS VARCHAR))
               AS streams,
           max(d.n_streams) - 1 AS peer_streams,
           sum(o.dur_ns) AS gpu_time_ns, sum(o.exclusive_ns) AS exclusive_ns, sum(o.hidden_ns) AS hidden_ns,
           sum(o.hidden_under_compute_ns) AS hidden_under_compute_ns
    FROM kernel_overlap AS o
    JOIN device_streams AS d ON d.run_id = o.run_id AND d.rank = o.rank AND d.device = o.device
    GROUP BY o.run_id, o.phase, o.name
),
judged AS (
    SELECT f.*,
           CASE WHEN f.gpu_time_ns > 0 THEN f.exclusive_ns / f.gpu_time_ns END AS exclusive_ratio,
           CASE WHEN f.gpu_time_ns > 0 THEN f.hidden_ns / f.gpu_time_ns END AS hidden_ratio,
           ks.category, ks.share, ks.python_site, ks.python_site_share,
           rk.dep_high_ratio, rk.dep_low_ratio
    FROM formal AS f
    JOIN kernel_summary AS ks ON ks.run_id = f.run_id AND ks.phase = f.phase AND ks.name = f.name
    LEFT JOIN risk_per_kernel AS rk ON rk.run_id = f.run_id AND rk.phase = f.phase AND rk.name = f.name
),
classified AS (
    SELECT j.*,
           CASE
               WHEN j.peer_streams = 0 THEN 'single-stream'
               WHEN j.gpu_time_ns >= 5000 AND j.exclusive_ratio >= 0.45 THEN 'headroom'
               WHEN j.hidden_ratio >= 0.65 THEN 'low-roi-hidden'
               ELSE 'neutral'
           END AS verdict,
           CASE
               WHEN j.share >= 0.10 THEN 'P1'
               WHEN j.share >= 0.05 THEN 'P2'
               WHEN j.share >= 0.02 THEN 'P3'
               WHEN j.share >= 0.01 THEN 'P4'
               ELSE 'P5'
           END AS priority,
           CASE
               WHEN j.dep_high_ratio >= 0.5 THEN 'high'
               WHEN j.dep_low_ratio >= 0.5 THEN 'low'
               ELSE 'unclear'
           END AS dependency_risk
    FROM judged AS j
)
SELECT
    c.run_id, c.phase, c.name, c.category, c.launches, c.streams, c.peer_streams,
    c.peer_streams = 0 AS second_stream_needed, c.gpu_time_ns,
    c.exclusive_ns, c.hidden_ns, c.hidden_under_compute_ns,
    c.exclusive_ratio, c.hidden_ratio,
    100.0 * c.exclusive_ratio AS exclusive_pct,
    100.0 * c.hidden_ratio AS hidden_pct,
    c.verdict,
    c.share,
    c.priority,
    c.dep_high_ratio,
    c.dep_low_ratio,
    pr.prev_category,
    nr.next_category,
    c.dependency_risk,
    CASE
        WHEN c.verdict = 'single-stream' THEN 'not applicable'
        WHEN c.verdict = 'headroom' AND c.dependency_risk = 'low' THEN 'try overlap'
        WHEN c.verdict = 'headroom' AND c.dependency_risk = 'high' AND fk.pattern_id IS NOT NULL THEN 'try fusion'
        WHEN c.verdict = 'headroom' AND c.dependency_risk = 'high' THEN 'keep in order'
        WHEN c.verdict = 'headroom' THEN 'check deps'
        WHEN c.verdict = 'low-roi-hidden' THEN 'skip overlap'
        WHEN c.priority IN ('P1', 'P2') THEN 'manual check'
        ELSE 'observe later'
    END AS recommendation,
    coalesce(c.share >= (SELECT report_bar FROM report_params), FALSE) AND c.verdict <> 'single-stream' AS reportable,
    c.python_site,
    c.python_site_share,
    'formal' AS scope_source,
    fk.pattern_id AS fusion_pattern_id,
    fk.pattern_name AS fusion_pattern
FROM classified AS c
LEFT JOIN prev_ranked AS pr ON pr.run_id = c.run_id AND pr.phase = c.phase AND pr.name = c.name AND pr.rn = 1
LEFT JOIN next_ranked AS nr ON nr.run_id = c.run_id AND nr.phase = c.phase AND nr.name = c.name AND nr.rn = 1
LEFT JOIN fusion_kernels AS fk ON fk.run_id = c.run_id AND fk.phase = c.phase AND fk.name = c.name AND fk.rn = 1

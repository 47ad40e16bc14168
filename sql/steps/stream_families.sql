-- stream_families: one row per (run_id, rank, step, device, stream, family): what a stream spent the step
-- on, by kernel family. A family is the kernel's normalized name (kernel_name_normalized: template
-- arguments, tile sizes, hashes and numeric suffixes taken out), so the tile variants of one GEMM are one
-- row (`nvjet_tst_64x8_64x16_4x1_v_bz_splitK_TNT` and `..._128x8_...` → `nvjet_tst_v_bz_splitK_TNT`).
-- Columns:
--   run_id, rank, step   VARCHAR, INTEGER, BIGINT  the step
--   device, stream       INTEGER, BIGINT  the stream
--   family               VARCHAR  kernel_name_normalized.normalized_name of its activities
--   category             VARCHAR  the category with the most of the family's time on the stream (ties: the
--                        smaller name); activity_category may file one family in two categories
--   calls                BIGINT  activities of the family on the stream in the step
--   time_ns              BIGINT  sum of their durations
--   share_of_wall        DOUBLE  time_ns / the step's wall (step_breakdown.wall_ns; NULL when 0)
--   share_of_stream      DOUBLE  time_ns / the stream's GPU time in the step (sum of its activities'
--                        durations: a stream runs one activity at a time, so this is its busy time); the
--                        families of a stream sum to 1 (NULL when the stream's time is 0)
--   rank_in_stream       BIGINT  1 for the family with the most time on the stream (ties: family name)
-- materialized: per_run   rows kept per run (warehouse/derived.py: `tracehouse derive`): the report's step section (reports/step_path.py)
CREATE OR REPLACE VIEW stream_families AS
WITH acts AS (
    SELECT f.run_id, f.rank, f.step, f.device, f.stream, coalesce(n.normalized_name, f.name) AS family,
           f.category, f.dur_ns
    FROM _kernel_facts AS f
    LEFT JOIN kernel_name_normalized AS n ON n.name = f.name AND n.kind = f.kind
    WHERE f.step IS NOT NULL
),
by_category AS (
    SELECT run_id, rank, step, device, stream, family, category, count(*) AS calls, sum(dur_ns) AS ns
    FROM acts
    GROUP BY run_id, rank, step, device, stream, family, category
),
families AS (
    SELECT run_id, rank, step, device, stream, family,
           max(CASE WHEN pick = 1 THEN category END) AS category,
           sum(calls) AS calls, sum(ns) AS time_ns
    FROM (
        SELECT *, row_number() OVER (PARTITION BY run_id, rank, step, device, stream, family
                                     ORDER BY ns DESC, category) AS pick
        FROM by_category
    ) AS c
    GROUP BY run_id, rank, step, device, stream, family
),
totals AS (
    SELECT *, sum(time_ns) OVER (PARTITION BY run_id, rank, step, device, stream) AS stream_ns
    FROM families
)
SELECT t.run_id, t.rank, t.step, t.device, t.stream, t.family, t.category,
       CAST(t.calls AS BIGINT) AS calls, CAST(t.time_ns AS BIGINT) AS time_ns,
       t.time_ns / CAST(nullif(b.wall_ns, 0) AS DOUBLE) AS share_of_wall,
       t.time_ns / CAST(nullif(t.stream_ns, 0) AS DOUBLE) AS share_of_stream,
       row_number() OVER (PARTITION BY t.run_id, t.rank, t.step, t.device, t.stream
                          ORDER BY t.time_ns DESC, t.family) AS rank_in_stream
FROM totals AS t
LEFT JOIN step_breakdown AS b ON b.run_id = t.run_id AND b.rank = t.rank AND b.step = t.step

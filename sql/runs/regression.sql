-- regression: one row per trend row (series, phase, metric, run), judged by the regression rule.
-- The core rule: flagged when the value is worse than the baseline (higher for `better = lower`,
-- lower for `higher`; the median of the previous k = 5 runs) by more than threshold_pct (3 %) AND by more
-- than noise_mult (3) × noise (1.4826 × MAD). Metrics with better = none are never flagged. Around that
-- core, what makes "3 × noise" mean a 3-sigma test when the noise itself is estimated from a few runs:
--   1. History: no flag before the line has min_history (5) earlier points in its noise window
--      (trend.n_history: the runs the noise is estimated from, up to noise_window = 20).
--   2. The band is band = t × noise × sqrt(1 + (π/2) / n_baseline), where
--      - sqrt(1 + (π/2) / n_baseline) makes it the noise of the difference value - baseline rather than of
--        the value alone: the median of n runs has a variance of about (π/2) σ² / n (×1.15 for n = 5);
--      - t is the Student-t quantile at the normal tail of noise_mult sigma (0.135 % for 3), with
--        ν = mad_efficiency × n_history degrees of freedom (0.3675: the MAD's efficiency at the normal, so a
--        MAD of 20 runs is as sure as a standard deviation with 7.35 degrees of freedom). It is noise_mult
--        once the noise is known, and wider while it is not: 1.5 × noise_mult for 20 runs of history,
--        2.5 × for 10, 6 × for 6. Without it, 3 × a MAD of 20 runs lets through 0.75 % of unchanged
--        runs, not 0.135 % (4 % at 6 runs): over 40 metrics × hundreds of runs, a stream of chance flags;
--        with it, about 0.08 % at every history length (normal noise, simulated).
--      t by Wallace's approximation (1959): w = noise_mult × (8ν + 3) / (8ν + 1),
--      t = sqrt(ν × (exp(w² / ν) - 1)) (within 1 % of the exact quantile from ν = 6, i.e. 16 runs; up to
--      7 % wider below, down to ν = 3; wider still, so more careful, for fewer runs).
--   3. Materiality: a time metric per step must move by at least min_step_share (0.5 %) of the run's
--      median step time; a percentage by at least min_pct_points (1 point).
-- The first commit of the shift: the earliest point of an unbroken run of points, ending at the flagged
-- one and reaching back at most k points (its baseline window), that all lie beyond the same band (the
-- flagged point's baseline ± threshold and band). So the two or three points that are flagged while the
-- baseline still lags a lasting shift all name the commit where it started.
-- Columns:
--   series, phase, metric, seq, run_id, commit, commit_time   VARCHAR, VARCHAR, VARCHAR, BIGINT, VARCHAR, VARCHAR, TIMESTAMP
--                            as in trend
--   value, baseline, noise, change_pct, better, n_history, n_baseline   DOUBLE, DOUBLE, DOUBLE, DOUBLE, VARCHAR, BIGINT, BIGINT
--                            as in trend
--   band          DOUBLE  the half-width of the noise band the value is judged against (rule 2; NULL
--                          before min_history runs of history: nothing to judge against)
--   worse_pct     DOUBLE  change_pct signed so that positive is worse (NULL for better = none)
--   flagged       BOOLEAN  the rule above (never NULL)
--   first_commit  VARCHAR  flagged rows: the commit where the shift first appears (else NULL)
--   first_run_id  VARCHAR  that point's run
--   shift_start   BOOLEAN  flagged and this run is itself the first of the shift
CREATE OR REPLACE VIEW regression AS
-- each view it reads is read once (a CTE): DuckDB binds a view again at every reference
WITH all_trend_params AS (SELECT * FROM trend_params),
t AS (
    SELECT * FROM trend
),
student AS (
    -- per history length n (from min_history on): the band's multiplier t (rule 2), from
    -- nu = mad_efficiency × n degrees of freedom and Wallace's corrected normal quantile w
    SELECT n_history, sqrt(nu * (exp(w * w / nu) - 1.0)) AS t_mult
    FROM (
        SELECT h.n_history, p.mad_efficiency * h.n_history AS nu,
               p.noise_mult * (8.0 * p.mad_efficiency * h.n_history + 3.0)
                   / (8.0 * p.mad_efficiency * h.n_history + 1.0) AS w
        FROM (SELECT DISTINCT n_history FROM t) AS h
        CROSS JOIN all_trend_params AS p
        WHERE h.n_history >= p.min_history AND h.n_history > 0
    ) AS q
),
widened AS (
    SELECT t.*, s.t_mult * t.noise * sqrt(1.0 + 1.5708 / t.n_baseline) AS band
    FROM t
    LEFT JOIN student AS s ON s.n_history = t.n_history
),
judged AS (
    SELECT t.*,
           CASE t.better WHEN 'lower' THEN t.change_pct WHEN 'higher' THEN -t.change_pct END AS worse_pct,
           coalesce(t.n_history >= p.min_history AND t.better IN ('lower', 'higher')
                    AND (CASE t.better WHEN 'lower' THEN t.change_pct ELSE -t.change_pct END) > p.threshold_pct
                    AND abs(t.value - t.baseline) > t.band
                    -- material: big enough to matter to the step (see trend_params)
                    AND (t.metric NOT LIKE '%\_ns\_per\_step' ESCAPE '\'
                         OR abs(t.value - t.baseline) >= p.min_step_share * coalesce(st.value, 0))
                    AND (t.metric NOT LIKE '%\_pct' ESCAPE '\' OR abs(t.value - t.baseline) >= p.min_pct_points),
                    FALSE) AS flagged
    FROM widened AS t
    CROSS JOIN all_trend_params AS p
    LEFT JOIN t AS st ON st.series = t.series AND st.phase = t.phase AND st.run_id = t.run_id
        AND st.metric = 'step_time_median_ns'
),
window_points AS (
    -- for each flagged point, the points of its baseline window, each marked beyond the band or not
    SELECT f.series, f.phase, f.metric, f.seq, h.seq AS h_seq,
           CASE WHEN (CASE f.better WHEN 'lower' THEN h.value - f.baseline ELSE f.baseline - h.value END)
                     > p.threshold_pct / 100.0 * abs(f.baseline)
                 AND abs(h.value - f.baseline) > f.band
                THEN 1 ELSE 0 END AS beyond
    FROM judged AS f
    CROSS JOIN all_trend_params AS p
    JOIN t AS h ON h.series = f.series AND h.phase = f.phase AND h.metric = f.metric
        AND h.seq < f.seq AND h.seq >= f.seq - p.k
    WHERE f.flagged
),
first_points AS (
    SELECT f.series, f.phase, f.metric, f.seq,
           coalesce(max(CASE WHEN w.beyond = 0 THEN w.h_seq END) + 1, min(w.h_seq), f.seq) AS first_seq
    FROM judged AS f
    LEFT JOIN window_points AS w ON w.series = f.series AND w.phase = f.phase AND w.metric = f.metric
        AND w.seq = f.seq
    WHERE f.flagged
    GROUP BY f.series, f.phase, f.metric, f.seq
)
SELECT j.series, j.phase, j.metric, j.seq, j.run_id, j.commit, j.commit_time, j.value, j.baseline, j.noise,
       j.change_pct, j.better, j.n_history, j.n_baseline, j.band, j.worse_pct, j.flagged,
       s.commit AS first_commit, s.run_id AS first_run_id,
       coalesce(j.flagged AND fp.first_seq = j.seq, FALSE) AS shift_start
FROM judged AS j
LEFT JOIN first_points AS fp ON fp.series = j.series AND fp.phase = j.phase AND fp.metric = j.metric AND fp.seq = j.seq
LEFT JOIN t AS s ON s.series = fp.series AND s.phase = fp.phase AND s.metric = fp.metric AND s.seq = fp.first_seq;

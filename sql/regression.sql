-- regression: one row per trend row (series, phase, metric, run), judged by the regression rule:
-- flagged when the value is worse than the baseline (higher for `better = lower`, lower for `higher`) by
-- more than threshold_pct % AND by more than noise_mult × noise × sqrt(1 + (π/2) / n_history), once the
-- line has min_history earlier points (trend_params: 3 %, 3 × noise, 5), and when the change is material
-- (a time metric per step: at least 0.5 % of the run's median step time; a percentage: at least 1 point).
-- The square root is the noise of
-- the difference value - baseline rather than of the value alone: the median of n runs has a variance of
-- about (π/2) σ² / n (×1.15 for n = 5). Metrics with better = none are never flagged.
-- The first commit of the shift: the earliest point of an unbroken run of points, ending at the flagged
-- one and reaching back at most k points (its baseline window), that all lie beyond the same band (the
-- flagged point's baseline ± threshold and noise). So the two or three points that are flagged while the
-- baseline still lags a lasting shift all name the commit where it started.
-- Columns:
--   series, phase, metric, seq, run_id, commit, commit_time   as in trend
--   value, baseline, noise, change_pct, better, n_history      as in trend
--   worse_pct     DOUBLE   change_pct signed so that positive is worse (NULL for better = none)
--   flagged       BOOLEAN  the rule above (never NULL)
--   first_commit  VARCHAR  flagged rows: the commit where the shift first appears (else NULL)
--   first_run_id  VARCHAR  that point's run
--   shift_start   BOOLEAN  flagged and this run is itself the first of the shift
CREATE OR REPLACE VIEW regression AS
WITH t AS (
    SELECT * FROM trend
),
judged AS (
    SELECT t.*,
           CASE t.better WHEN 'lower' THEN t.change_pct WHEN 'higher' THEN -t.change_pct END AS worse_pct,
           coalesce(t.n_history >= p.min_history AND t.better IN ('lower', 'higher')
                    AND (CASE t.better WHEN 'lower' THEN t.change_pct ELSE -t.change_pct END) > p.threshold_pct
                    AND abs(t.value - t.baseline) > p.noise_mult * t.noise * sqrt(1 + 1.5708 / t.n_history)
                    -- material: big enough to matter to the step (see trend_params)
                    AND (t.metric NOT LIKE '%\_ns\_per\_step' ESCAPE '\'
                         OR abs(t.value - t.baseline) >= p.min_step_share * coalesce(st.value, 0))
                    AND (t.metric NOT LIKE '%\_pct' ESCAPE '\' OR abs(t.value - t.baseline) >= p.min_pct_points),
                    FALSE) AS flagged
    FROM t
    CROSS JOIN trend_params AS p
    LEFT JOIN t AS st ON st.series = t.series AND st.phase = t.phase AND st.run_id = t.run_id
        AND st.metric = 'step_time_median_ns'
),
window_points AS (
    -- for each flagged point, the points of its baseline window, each marked beyond the band or not
    SELECT f.series, f.phase, f.metric, f.seq, h.seq AS h_seq,
           CASE WHEN (CASE f.better WHEN 'lower' THEN h.value - f.baseline ELSE f.baseline - h.value END)
                     > p.threshold_pct / 100.0 * abs(f.baseline)
                 AND abs(h.value - f.baseline) > p.noise_mult * f.noise * sqrt(1 + 1.5708 / f.n_history)
                THEN 1 ELSE 0 END AS beyond
    FROM judged AS f
    CROSS JOIN trend_params AS p
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
       j.change_pct, j.better, j.n_history, j.worse_pct, j.flagged,
       s.commit AS first_commit, s.run_id AS first_run_id,
       coalesce(j.flagged AND fp.first_seq = j.seq, FALSE) AS shift_start
FROM judged AS j
LEFT JOIN first_points AS fp ON fp.series = j.series AND fp.phase = j.phase AND fp.metric = j.metric AND fp.seq = j.seq
LEFT JOIN t AS s ON s.series = fp.series AND s.phase = fp.phase AND s.metric = fp.metric AND s.seq = fp.first_seq;

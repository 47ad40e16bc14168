-- trend: one row per (series, phase, metric, run): the run's value of a run_metrics metric (rank NULL,
-- i.e. aggregated over ranks) next to its baseline and noise, in series order.
-- Series: the run's `series` label, else framework/model/hardware/config ('?' for what is unknown);
-- phase is a key of its own (a run with prefill and decode steps has one point in each).
-- Order: commit_time (label, ISO 8601), else ingested_at; ties by run_id.
-- Constants: trend_params (k = 5, noise_window = 20). The rule that judges these rows is `regression`'s.
-- Columns:
--   series, phase, metric   VARCHAR  the line
--   seq          BIGINT  1, 2, ... along the line (runs without the metric are not on it)
--   run_id, commit          VARCHAR  the run and its commit label
--   commit_time  TIMESTAMP  the ordering time (commit_time, else ingested_at)
--   value        DOUBLE  run_metrics.value
--   better       VARCHAR  lower / higher / none (run_metrics)
--   n_history    BIGINT  earlier points in the noise window (0..noise_window): the history that the
--                           noise is estimated from, so the one that "enough history" is judged on
--   n_baseline   BIGINT  earlier points in the baseline window (0..k)
--   baseline     DOUBLE  median of the values of the previous k points (NULL without history)
--   noise        DOUBLE  greatest(mad_scale × MAD of the previous noise_window values (20; about their
--                           median), the run's own step-to-step spread (run_metrics.spread)); with no
--                           history: the spread alone. A MAD of only the k baseline values is too noisy
--                           to scale a band with; the spread floor keeps a few values that happen to
--                           agree from calling every wiggle a change
--   change_pct   DOUBLE  100 × (value - baseline) / |baseline| (NULL when baseline is NULL or 0)
CREATE OR REPLACE VIEW trend AS
-- each view it reads is read once (a CTE): DuckDB binds a view again at every reference
WITH all_trend_params AS (SELECT * FROM trend_params),
run_order AS (
    SELECT run_id, commit,
           coalesce(series, concat_ws('/', coalesce(framework, '?'), coalesce(model, '?'), coalesce(hardware, '?'),
                                      coalesce(labels['config'], '?'))) AS series,
           coalesce(TRY_CAST(commit_time AS TIMESTAMP), CAST(ingested_at AS TIMESTAMP)) AS commit_time
    FROM runs
),
points AS (
    -- `line` numbers the (series, phase, metric) lines: the self-join and the medians below key on
    -- (line, seq), two integers, rather than on three strings
    SELECT o.series, m.phase, m.metric, m.run_id, o.commit, o.commit_time, m.value, m.better, m.spread,
           row_number() OVER (PARTITION BY o.series, m.phase, m.metric ORDER BY o.commit_time, m.run_id) AS seq,
           dense_rank() OVER (ORDER BY o.series, m.phase, m.metric) AS line
    FROM run_metrics AS m
    JOIN run_order AS o ON o.run_id = m.run_id
    WHERE m.rank IS NULL AND m.value IS NOT NULL
),
history AS (
    -- the previous max(k, noise_window) points; `recent` marks the k of the baseline window, `in_noise`
    -- the noise_window of the noise (a session may set k above noise_window)
    SELECT c.line, c.seq, h.value AS hv, h.seq >= c.seq - p.k AS recent, h.seq >= c.seq - p.noise_window AS in_noise
    FROM points AS c
    CROSS JOIN all_trend_params AS p
    JOIN points AS h ON h.line = c.line AND h.seq < c.seq AND h.seq >= c.seq - greatest(p.k, p.noise_window)
),
stats AS (
    -- per point: the baseline (median of the k recent) and the centre of the noise window, in one pass
    SELECT line, seq, median(hv) FILTER (WHERE recent) AS baseline,
           count(*) FILTER (WHERE recent) AS n_baseline, median(hv) FILTER (WHERE in_noise) AS centre,
           count(*) FILTER (WHERE in_noise) AS n_history
    FROM history
    GROUP BY line, seq
),
mad AS (
    SELECT h.line, h.seq, median(abs(h.hv - c.centre)) AS mad
    FROM history AS h
    JOIN stats AS c ON c.line = h.line AND c.seq = h.seq
    WHERE h.in_noise
    GROUP BY h.line, h.seq
)
SELECT pt.series, pt.phase, pt.metric, pt.seq, pt.run_id, pt.commit, pt.commit_time, pt.value, pt.better,
       coalesce(b.n_history, 0) AS n_history, coalesce(b.n_baseline, 0) AS n_baseline, b.baseline,
       greatest(coalesce(p.mad_scale * d.mad, 0.0), coalesce(pt.spread, 0.0)) AS noise,
       CASE WHEN b.baseline <> 0 THEN 100.0 * (pt.value - b.baseline) / abs(b.baseline) END AS change_pct
FROM points AS pt
CROSS JOIN all_trend_params AS p
LEFT JOIN stats AS b ON b.line = pt.line AND b.seq = pt.seq
LEFT JOIN mad AS d ON d.line = pt.line AND d.seq = pt.seq;

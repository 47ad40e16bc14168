SELECT series, metric, run_id, band, worse_pct, flagged, first_commit, first_run_id, shift_start
FROM regression
ORDER BY series, metric

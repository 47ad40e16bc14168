SELECT series, phase, metric, seq, run_id, commit, commit_time, value, better, n_history, n_baseline, baseline,
       noise, change_pct
FROM trend
ORDER BY series, phase, metric, seq

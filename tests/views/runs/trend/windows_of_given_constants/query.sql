SELECT seq, value, n_history, n_baseline, baseline, noise, change_pct FROM trend ORDER BY seq

SELECT metric, seq, flagged, first_commit, first_run_id, shift_start FROM regression ORDER BY metric, seq

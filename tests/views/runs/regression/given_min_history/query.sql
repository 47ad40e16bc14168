SELECT metric, band, flagged, first_commit FROM regression ORDER BY metric

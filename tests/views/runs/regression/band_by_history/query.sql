SELECT n_history, band, band / (3.0 * noise * sqrt(1.0 + 1.5708 / n_baseline)) AS widening, flagged
FROM regression ORDER BY n_history

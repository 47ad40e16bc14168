-- trend_params: one row: the constants of the regression rule (read by `trend` and `regression`).
-- Change them for a session with `CREATE OR REPLACE VIEW trend_params AS SELECT ...` (same columns).
-- Columns:
--   k              INTEGER  baseline window: the previous k runs of the series that have the metric (5)
--   noise_window   INTEGER  noise window: the previous noise_window runs (20). The MAD of five runs is itself
--                           too noisy to scale a band with (one run in five far out is invisible to it,
--                           two close runs make it tiny); the baseline keeps the short window k
--   threshold_pct  DECIMAL(2,1)  a change must be worse than the baseline by more than this many % (3)
--   noise_mult     DECIMAL(2,1)  ... and by more than noise_mult × noise (3: a one-sided 3-sigma test, 0.135
--                           % of unchanged runs beyond it when the noise is known; regression widens it for a
--                           noise estimated from few runs)
--   min_history    INTEGER  no flag before the metric has this many earlier runs in its noise window (5): a
--                           median or a MAD of fewer runs is no estimate at all
--   mad_scale      DECIMAL(5,4)  MAD → standard deviation of a normal distribution (1.4826)
--   mad_efficiency  DECIMAL(5,4)  the MAD's asymptotic efficiency at the normal distribution (0.3675): a
--                           noise from the MAD of n runs is as sure as a standard deviation with 0.3675 × n
--                           degrees of freedom (regression: the Student-t widening of the band)
--   min_step_share  DECIMAL(4,3)  materiality of a time metric (`..._ns_per_step`): the change must also be
--                           at least this share of the run's median step time (0.005 = 0.5 %): a 10 % swing
--                           of a category worth 0.1 % of the step is noise to a performance engineer, not a
--                           regression
--   min_pct_points  DECIMAL(2,1)  materiality of a percentage metric (`..._pct`): at least this many points
--                            (1.0)
CREATE OR REPLACE VIEW trend_params AS
SELECT 5 AS k, 20 AS noise_window, 3.0 AS threshold_pct, 3.0 AS noise_mult, 5 AS min_history, 1.4826 AS mad_scale,
       0.3675 AS mad_efficiency, 0.005 AS min_step_share, 1.0 AS min_pct_points;

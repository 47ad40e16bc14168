-- report_params: one row: the constants of what the run report shows (read by overlap_opportunity and
-- by reports/run.py, their one definition). Change them for a session with
-- `CREATE OR REPLACE TEMP VIEW report_params AS SELECT ...` (same columns); a run's stored analyses
-- (overlap_opportunity among them) keep the values they were computed with.
-- Columns:
--   report_bar     DOUBLE  the reporting bar (0.01 = 1 %): a kernel under this share of its phase's GPU
--                           time stays out of the report's kernel table (unless among the phase's top 10)
--                           and is not a reportable overlap opportunity; a stream under this share of the
--                           run's GPU time does not count as a stream that carries work
--   top_kernels    INTEGER  at most this many kernels per phase in the report's kernel table (25)
--   always_shown   INTEGER  the phase's largest kernels shown whatever their share (10)
CREATE OR REPLACE VIEW report_params AS
SELECT CAST(0.01 AS DOUBLE) AS report_bar, 25 AS top_kernels, 10 AS always_shown;

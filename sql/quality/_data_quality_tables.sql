-- _data_quality_tables: data_quality's rows of the flags that read the tables and their aggregates only
-- (launch_site_flags, capture_flags, step_flags), never a per-step analysis: what an export of a whole run
-- reads in bounded memory (reports/export/analysis.py), computing queueing_flags and critical_path_flags per
-- batch of steps instead. data_quality is this union plus those two.
-- Columns:
--   run_id    VARCHAR  the run
--   rank      INTEGER  the rank the flag is about; NULL for the whole run
--   step      BIGINT  the step (step_spans.step) the flag is about; NULL for the whole run or rank
--   flag      VARCHAR  the flag's name (below)
--   severity  VARCHAR  error / warning / info
--   affects   VARCHAR[]  the report figures the flag concerns (names above)
--   evidence  MAP(VARCHAR, DOUBLE)  the numbers the flag rests on (name -> value; durations in ns, shares as
--             fractions of 1; a time in the step as an offset from its path's start: a DOUBLE holds it
--             exactly)
--   message   VARCHAR  one line: what is wrong and what to do about it
CREATE OR REPLACE VIEW _data_quality_tables AS
SELECT * FROM launch_site_flags
UNION ALL
SELECT * FROM capture_flags
UNION ALL
SELECT * FROM step_flags;

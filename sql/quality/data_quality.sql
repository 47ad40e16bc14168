-- data_quality: one row per (run_id, rank, step, flag): a reason why some figures of a run cannot be
-- trusted as they stand, with the figures it affects, its evidence and what to do. rank NULL: the whole
-- run; step NULL: the whole run or rank. Reports show each flag beside the figures it names in
-- `affects` and draw no takeaway from a flagged figure (reports/takeaways.py).
-- A flag lives beside the analysis it judges, as a UNION ALL branch of its domain's flag view headed by a
-- comment line `-- flag NAME (severity): when`: launch_site_flags (sql/kernels/: launch sites, launch
-- calls), capture_flags (sql/quality/: what the trace holds), step_flags (sql/steps/), all three read the
-- tables and their aggregates only (their union: _data_quality_tables, which an export of a whole run
-- reads in bounded memory); queueing_flags (sql/steps/: step_queueing) and critical_path_flags
-- (sql/critical_path/) read per-step analyses. Add one as a branch there with the same eight columns (or a
-- new flag view, added to a union); data_quality is the union of them all. Figure names (what `affects` lists) are the
-- report's: gpu_time, kernel_summary, kernel_summary.python_site, category_summary, launch_sites,
-- overlap_opportunity, fusion_match, step_breakdown, step_breakdown.host_setup, step_breakdown.median,
-- step_breakdown.gpu_utilization, step_breakdown.gpu_idle, run_metrics, stream_summary,
-- critical_path, idle_gaps, layer_pattern, rank_skew. A flag on `x` covers `x.anything` too.
-- Severity: `error`  a figure is missing or wrong as shown (GPU time 0 ns where the device worked);
--           `warning` a figure is incomplete or may point the wrong way (no launch sites, a host call
--                    that dominates the critical path, a step that is not a median);
--           `info`    how to read a figure (several ranks, one step for the whole trace).
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
-- materialized: per_run   rows kept per run (warehouse/derived.py: `tracehouse derive`): the report's flags
CREATE OR REPLACE VIEW data_quality AS
SELECT * FROM _data_quality_tables
UNION ALL
SELECT * FROM queueing_flags
UNION ALL
SELECT * FROM critical_path_flags;

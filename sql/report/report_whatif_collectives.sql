-- report_whatif_collectives: one row per _whatif_collectives row (a communication activity, numbered as
-- its collective instance) of a step a run report shows (report_steps, any pick), every rank's: the
-- replay's collective matching for the report's predicted gains (warehouse.whatif.load_graphs). Kept per
-- run, so that a derived run's report reads these rows instead of computing _kernel_facts over the whole
-- run; the replay reads them only where the connection holds them for the run and the step is a report
-- step, else _whatif_collectives, whose rows of that step are these (an instance is numbered within its
-- step: nothing outside the step changes them).
-- Columns: those of _whatif_collectives, unchanged:
--   run_id, rank, kernel_id  VARCHAR, INTEGER, BIGINT  the activity
--   step                     BIGINT  its step: a step of report_steps
--   collective, process_group  VARCHAR  the collective as matched
--   instance                 BIGINT  n: its number within (step, collective, process_group) on its rank
--   ranks                    BIGINT  ranks of the run on which the instance ran, this one included
--   group_ranks              BIGINT  ranks the instance needs (_whatif_collectives)
--   complete                 BOOLEAN  every peer's arrival is in the run (_whatif_collectives)
-- materialized: per_run   rows kept per run (warehouse/derived.py: `tracehouse derive`): the report's what-if gains
CREATE OR REPLACE VIEW report_whatif_collectives AS
SELECT c.run_id, c.rank, c.kernel_id, c.step, c.collective, c.process_group, c.instance, c.ranks,
       c.group_ranks, c.complete
FROM _whatif_collectives AS c
WHERE c.step IN (SELECT r.step FROM report_steps AS r WHERE r.run_id = c.run_id)

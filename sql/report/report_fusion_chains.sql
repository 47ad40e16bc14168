-- report_fusion_chains: one row per chain of _fusion_chains (a fusion pattern's split steps in order on one
-- stream) in a step a run report shows (report_steps, any pick), every rank's: the chains a fusion row's
-- replay fuses for the report's predicted gains (warehouse.whatif.fusion_chains). A chain never spans a
-- step (_fusion_chains), so its step is its first activity's (kernels.step); the replay of a step fuses
-- only chains of that step (the others have no node in its graph). Kept per run, so that a derived run's
-- report reads these rows instead of computing _fusion_chains over the whole run; the replay reads them only
-- where the connection holds them for the run and the step is a report step, else _fusion_chains.
-- Columns:
--   run_id, rank   VARCHAR, INTEGER  the rank
--   step           BIGINT  the chain's step: a step of report_steps
--   pattern_id     VARCHAR  the fusion row (fusion_match.pattern_id)
--   kernel_id_1, kernel_id_2, kernel_id_3  BIGINT  the chain's activities in order (kernel_id_3 NULL: a
--                  pattern of 2 steps)
--   adjacent       BOOLEAN  the steps follow each other directly on the stream (_fusion_chains.adjacent)
-- materialized: per_run   rows kept per run (warehouse/derived.py: `tracehouse derive`): the report's what-if gains
CREATE OR REPLACE VIEW report_fusion_chains AS
SELECT c.run_id, c.rank, k.step, c.pattern_id, c.kernel_id_1, c.kernel_id_2, c.kernel_id_3, c.adjacent
FROM _fusion_chains AS c
JOIN kernels AS k ON k.run_id = c.run_id AND k.rank = c.rank AND k.kernel_id = c.kernel_id_1
WHERE k.step IN (SELECT r.step FROM report_steps AS r WHERE r.run_id = c.run_id)

-- _whatif_collectives (helper of the what-if replay, warehouse/whatif.py): one row per communication
-- activity of a collective instance that ran on at least two ranks of the run, matched across the ranks as
-- rank_skew matches them: the n-th activity of one collective (`Collective name`, else the kernel name) in
-- one process group and one step, on every rank. The replay ends each rank's activity of an instance
-- after the last rank's arrival (NCCL's semantics), so a change on one rank reaches its peers.
-- Columns:
--   run_id, rank, kernel_id  VARCHAR, INTEGER, BIGINT  the activity
--   step                     BIGINT  its step (NULL: outside steps, matched among themselves)
--   collective, process_group  VARCHAR  the collective as matched
--   instance                 BIGINT  n: its number within (step, collective, process_group) on its rank
CREATE OR REPLACE VIEW _whatif_collectives AS
WITH numbered AS (
    SELECT run_id, rank, kernel_id, step,
           coalesce(collective_name, name) AS collective, coalesce(process_group, '') AS process_group,
           row_number() OVER (PARTITION BY run_id, rank, step, coalesce(collective_name, name),
                                           coalesce(process_group, '')
                              ORDER BY start_ns, kernel_id) AS instance
    FROM _kernel_facts
    WHERE category = 'communication'
)
SELECT run_id, rank, kernel_id, step, collective, process_group, instance
FROM numbered
QUALIFY count(*) OVER (PARTITION BY run_id, step, collective, process_group, instance) >= 2

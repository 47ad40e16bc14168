-- _whatif_collectives (helper of the what-if replay, warehouse/whatif.py): one row per communication
-- activity of the run, numbered as rank_skew matches collective instances across the ranks: the n-th
-- activity of one collective (`Collective name`, else the kernel name) in one process group and one step.
-- The replay ends each rank's activity of an instance that ran on at least two ranks of the run after the
-- last of those ranks arrived (NCCL's semantics), so a change on one rank reaches its peers; the part after
-- the last arrival is the transfer, the part before it the wait. That split is known only when every rank
-- the instance needs is in the run (`complete`): a rank missing from the run may have arrived later, and
-- then part of what looks like transfer was waiting for it.
-- Columns:
--   run_id, rank, kernel_id  VARCHAR, INTEGER, BIGINT  the activity
--   step                     BIGINT  its step (NULL: outside steps, matched among themselves)
--   collective, process_group  VARCHAR  the collective as matched
--   instance                 BIGINT  n: its number within (step, collective, process_group) on its rank
--   ranks                    BIGINT  ranks of the run on which the instance ran, this one included
--   group_ranks              BIGINT  ranks the instance needs: the trace's group size (`Group size`, the
--                            largest over the instance's activities), else the run's world size, else the
--                            ranks of the run but at least 2 (a collective has a peer)
--   complete                 BOOLEAN  every peer's arrival is in the run: ranks >= group_ranks, or the run
--                            holds every rank of its world (runs.n_ranks >= world_size: an instance of a
--                            smaller group whose size the trace does not state is then whole too)
CREATE OR REPLACE VIEW _whatif_collectives AS
WITH numbered AS (
    SELECT run_id, rank, kernel_id, step, group_size,
           coalesce(collective_name, name) AS collective, coalesce(process_group, '') AS process_group,
           row_number() OVER (PARTITION BY run_id, rank, step, coalesce(collective_name, name),
                                           coalesce(process_group, '')
                              ORDER BY start_ns, kernel_id) AS instance
    FROM _kernel_facts
    WHERE category = 'communication'
),
counted AS (
    SELECT *,
           count(*) OVER (PARTITION BY run_id, step, collective, process_group, instance) AS ranks,
           max(group_size) OVER (PARTITION BY run_id, step, collective, process_group, instance) AS stated
    FROM numbered
),
needed AS (
    SELECT c.*,
           CAST(coalesce(c.stated, r.world_size, greatest(coalesce(r.n_ranks, 1), 2)) AS BIGINT) AS group_ranks,
           coalesce(r.n_ranks >= r.world_size, false) AS whole_world
    FROM counted c
    LEFT JOIN runs r ON r.run_id = c.run_id
)
SELECT run_id, rank, kernel_id, step, collective, process_group, instance, ranks, group_ranks,
       ranks >= group_ranks OR whole_world AS complete
FROM needed

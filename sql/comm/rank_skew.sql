-- rank_skew: one row per collective instance of a run that ran on at least two ranks: the n-th
-- communication activity (kernel_category 'communication') of one collective in one step, matched across
-- the ranks of the run. A collective is identified by (step, collective, process_group): collective is
-- the trace's collective name when it gives one (`Collective name`), else the kernel name; process_group
-- is the trace's process group ('' when none). On each rank its instances are numbered 1.. by start time
-- (kernel_id breaks ties); the n-th instance of every rank is matched. Activities outside any step are
-- matched among themselves (step NULL).
-- Columns:
--   run_id, step                  VARCHAR, BIGINT  the run and step (NULL: outside steps)
--   collective, process_group     VARCHAR  the collective as matched (see above)
--   instance                      BIGINT  n: the instance's number within (step, collective, process_group),
--                            from 1
--   name                          VARCHAR  the kernel name (the smallest one when the ranks differ)
--   ranks                         BIGINT  ranks on which the instance ran
--   first_start_ns, last_start_ns BIGINT  earliest and latest start over the ranks
--   start_skew_ns                 BIGINT  last_start_ns − first_start_ns: how long the earliest rank waited
--                                 for the last one to arrive
--   first_end_ns, last_end_ns     BIGINT  earliest and latest end over the ranks
--   end_skew_ns                   BIGINT  last_end_ns − first_end_ns
--   min_dur_ns, max_dur_ns        BIGINT  shortest and longest duration over the ranks
--   dur_spread_ns                 BIGINT  max_dur_ns − min_dur_ns (the early ranks' kernels also hold the
--                                 wait, so a large spread with a large start skew is the straggler's
--                                 signature)
--   first_rank                    INTEGER  the rank that started first (ties: the lowest rank)
--   last_rank                     INTEGER  the rank that arrived last: latest start (ties: the lowest rank)
--   last_rank_lead_ns             BIGINT  last_start_ns − the second-latest start: how much later than every
--                                 other rank the last one came (0 on a tie)
-- materialized: per_run   rows kept per run (warehouse/derived.py: `tracehouse derive`): data_quality,
--                          rank_skew_summary and run_metrics read it (18 s a query on a 1 GB run)
CREATE OR REPLACE VIEW rank_skew AS
WITH comm AS (
    SELECT run_id, rank, step, kernel_id, name, start_ns, end_ns, dur_ns,
           coalesce(collective_name, name) AS collective, coalesce(process_group, '') AS process_group
    FROM _kernel_facts
    WHERE category = 'communication'
),
numbered AS (
    SELECT *,
           row_number() OVER (PARTITION BY run_id, rank, step, collective, process_group
                              ORDER BY start_ns, kernel_id) AS instance
    FROM comm
),
ordered AS (
    SELECT *,
           row_number() OVER (PARTITION BY run_id, step, collective, process_group, instance
                              ORDER BY start_ns DESC, rank) AS arrival_from_last,
           row_number() OVER (PARTITION BY run_id, step, collective, process_group, instance
                              ORDER BY start_ns, rank) AS arrival
    FROM numbered
),
instances AS (
    SELECT run_id, step, collective, process_group, instance,
           min(name) AS name, count(*) AS ranks,
           min(start_ns) AS first_start_ns, max(start_ns) AS last_start_ns,
           min(end_ns) AS first_end_ns, max(end_ns) AS last_end_ns,
           min(dur_ns) AS min_dur_ns, max(dur_ns) AS max_dur_ns,
           min(CASE WHEN arrival = 1 THEN rank END) AS first_rank,
           min(CASE WHEN arrival_from_last = 1 THEN rank END) AS last_rank,
           max(CASE WHEN arrival_from_last = 2 THEN start_ns END) AS second_last_start_ns
    FROM ordered
    GROUP BY run_id, step, collective, process_group, instance
)
SELECT run_id, step, collective, process_group, instance, name, ranks,
       first_start_ns, last_start_ns, last_start_ns - first_start_ns AS start_skew_ns,
       first_end_ns, last_end_ns, last_end_ns - first_end_ns AS end_skew_ns,
       min_dur_ns, max_dur_ns, max_dur_ns - min_dur_ns AS dur_spread_ns,
       first_rank, last_rank, last_start_ns - second_last_start_ns AS last_rank_lead_ns
FROM instances
WHERE ranks >= 2;

-- rank_skew_summary: one row per (run_id, rank) that took part in a matched collective instance (rank_skew):
-- who the straggler is. Two directions of waiting, both summed over the instances:
--   wait_ns          how long THIS rank waited for the others: Σ (last_start_ns − this rank's start). A
--                    rank that arrives early holds its collective kernel while the last one arrives.
--   imposed_wait_ns  how long the OTHER ranks waited for this one, over the instances where it arrived last:
--                    Σ over the other ranks of (its start − their start). The straggler has a large
--                    imposed_wait_ns and a small wait_ns.
-- Columns:
--   run_id, rank                 VARCHAR, INTEGER  the rank
--   instances                    BIGINT  matched collective instances it took part in
--   times_last                   BIGINT  instances where it arrived last (rank_skew.last_rank)
--   last_share                   DOUBLE  times_last / instances
--   times_first                  BIGINT  instances where it started first (rank_skew.first_rank)
--   wait_ns                      BIGINT  see above (≥ 0)
--   mean_wait_ns                 DOUBLE  wait_ns / instances
--   collective_ns                BIGINT  the summed durations of its matched collective kernels
--   wait_share                   DOUBLE  wait_ns / collective_ns: the part of its collectives' time spent
--                                waiting for the last rank to arrive rather than transferring (NULL: 0 ns)
--   imposed_wait_ns              BIGINT  see above (≥ 0)
--   imposed_wait_share           DOUBLE  imposed_wait_ns / the sum of imposed_wait_ns over the run's ranks: the
--                                share of all collective wait that this rank imposed (NULL when no rank
--                                waited). The rank the others wait for has most of it, whether or not it
--                                is last at most collectives (a rank late by 400 µs five times imposes more
--                                than three ranks late by 15 µs once each)
--   others_waiting_share         DOUBLE  imposed_wait_ns / the summed collective_ns of the run's other ranks:
--                                the part of the others' collective time spent waiting for this rank (NULL:
--                                no other rank's collective time). Small when its lateness is noise.
--   mean_start_lateness_ns       DOUBLE  mean over its instances of (its start − the instance's first start)
--   max_start_lateness_ns        BIGINT  the largest such lateness
-- materialized: per_run   rows kept per run (warehouse/derived.py: `tracehouse derive`)
CREATE OR REPLACE VIEW rank_skew_summary AS
WITH comm AS (
    SELECT run_id, rank, step, kernel_id, start_ns, dur_ns,
           coalesce(collective_name, name) AS collective, coalesce(process_group, '') AS process_group
    FROM _kernel_facts
    WHERE category = 'communication'
),
numbered AS (
    -- the same numbering as rank_skew
    SELECT *,
           row_number() OVER (PARTITION BY run_id, rank, step, collective, process_group
                              ORDER BY start_ns, kernel_id) AS instance
    FROM comm
),
per_rank AS (
    SELECT n.run_id, n.rank, s.ranks, n.start_ns, n.dur_ns, s.first_start_ns, s.last_start_ns, s.first_rank, s.last_rank,
           -- relative to the first start, so that ranks × start cannot overflow int64 (epoch ns ≈ 1.7e18)
           sum(n.start_ns - s.first_start_ns) OVER (PARTITION BY s.run_id, s.step, s.collective, s.process_group, s.instance)
               AS sum_lateness_ns
    FROM numbered AS n
    JOIN rank_skew AS s
      ON s.run_id = n.run_id AND s.collective = n.collective AND s.process_group = n.process_group
     AND s.instance = n.instance AND (s.step = n.step OR (s.step IS NULL AND n.step IS NULL))
)
SELECT *,
       imposed_wait_ns / nullif(sum(imposed_wait_ns) OVER (PARTITION BY run_id), 0)::DOUBLE AS imposed_wait_share,
       imposed_wait_ns / nullif(sum(collective_ns) OVER (PARTITION BY run_id) - collective_ns, 0)::DOUBLE
           AS others_waiting_share
FROM (
SELECT run_id, rank,
       count(*) AS instances,
       CAST(sum(CASE WHEN last_rank = rank THEN 1 ELSE 0 END) AS BIGINT) AS times_last,
       sum(CASE WHEN last_rank = rank THEN 1 ELSE 0 END) / CAST(count(*) AS DOUBLE) AS last_share,
       CAST(sum(CASE WHEN first_rank = rank THEN 1 ELSE 0 END) AS BIGINT) AS times_first,
       CAST(sum(last_start_ns - start_ns) AS BIGINT) AS wait_ns,
       sum(last_start_ns - start_ns) / CAST(count(*) AS DOUBLE) AS mean_wait_ns,
       CAST(sum(dur_ns) AS BIGINT) AS collective_ns,
       sum(last_start_ns - start_ns) / nullif(sum(dur_ns), 0)::DOUBLE AS wait_share,
       CAST(sum(CASE WHEN last_rank = rank THEN ranks * (start_ns - first_start_ns) - sum_lateness_ns ELSE 0 END) AS BIGINT) AS imposed_wait_ns,
       avg(start_ns - first_start_ns) AS mean_start_lateness_ns,
       max(start_ns - first_start_ns) AS max_start_lateness_ns
FROM per_rank
GROUP BY run_id, rank
) AS per_rank_totals;

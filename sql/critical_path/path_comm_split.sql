-- path_comm_split: one row per communication activity on a critical path (a critical_path segment of kind
-- gpu and category communication): its time on the path split into waiting for peers and transfer. A
-- collective's kernel starts when its rank arrives and cannot finish before the last rank of the instance
-- has arrived, so the part of the kernel before the last arrival is waiting, not transfer. The instance is
-- the collective matched across the run's ranks as rank_skew matches it (_whatif_collectives numbers the
-- activities, rank_skew gives the instance's last arrival): waiting is known only against the peer ranks
-- that are in the run; an activity whose instance ran on no other rank of the run has an unknown split, and
-- one whose group has ranks not in the run (_whatif_collectives.complete false) a known wait for the ranks
-- in the run (at least its wait) and an unknown rest: after the last arrival in the run it may still be
-- waiting for a rank not in the run, or transferring.
-- Columns:
--   run_id, rank, step  VARCHAR, INTEGER, BIGINT  the critical path (critical_path's step)
--   seq                 BIGINT  the segment's seq on the path (critical_path.seq)
--   kernel_id           BIGINT  the communication activity
--   name                VARCHAR  its kernel name
--   start_ns, dur_ns    BIGINT  the segment on the path (critical_path: the activity, clamped to the path)
--   peer_ranks          BIGINT  ranks of the run on which its instance ran, itself included (rank_skew.ranks);
--                       NULL when no other rank of the run has the instance
--   last_rank           INTEGER  the rank that arrived last at the instance (rank_skew.last_rank); NULL: unknown
--   last_start_ns       BIGINT  that last arrival (rank_skew.last_start_ns); NULL: unknown
--   wait_ns             BIGINT  the part of the segment before the last arrival: min(segment end,
--                       last_start_ns) − segment start, at least 0; NULL when the split is unknown
--   transfer_ns         BIGINT  dur_ns − wait_ns: the part after every rank had arrived; NULL when unknown,
--                       and when the instance's group has ranks not in the run (complete false)
--   waited_for_rank     INTEGER  last_rank when wait_ns > 0 (the rank this one waited for), else NULL
--   complete            BOOLEAN  every rank of the instance's group is in the run (_whatif_collectives);
--                       NULL when the activity has no instance
-- materialized: per_run   rows kept per run (warehouse/derived.py: `tracehouse derive`): the report's step section (reports/step_path.py)
CREATE OR REPLACE VIEW path_comm_split AS
WITH on_path AS (
    SELECT run_id, rank, step, seq, kernel_id, name, start_ns, dur_ns
    FROM critical_path
    WHERE kind = 'gpu' AND category = 'communication'
),
matched AS (
    SELECT p.*, s.ranks AS peer_ranks, s.last_rank, s.last_start_ns, w.complete,
           -- greatest() skips NULLs: an unmatched activity's wait is NULL, not 0
           CASE WHEN s.last_start_ns IS NOT NULL
                THEN greatest(least(p.start_ns + p.dur_ns, s.last_start_ns) - p.start_ns, 0) END AS wait_ns
    FROM on_path p
    LEFT JOIN _whatif_collectives w ON w.run_id = p.run_id AND w.rank = p.rank AND w.kernel_id = p.kernel_id
    LEFT JOIN rank_skew s
      ON s.run_id = w.run_id AND s.collective = w.collective AND s.process_group = w.process_group
     AND s.instance = w.instance AND (s.step = w.step OR (s.step IS NULL AND w.step IS NULL))
)
SELECT run_id, rank, step, seq, kernel_id, name, start_ns, dur_ns, peer_ranks, last_rank, last_start_ns,
       wait_ns, CASE WHEN complete THEN dur_ns - wait_ns END AS transfer_ns,
       CASE WHEN wait_ns > 0 THEN last_rank END AS waited_for_rank, complete
FROM matched

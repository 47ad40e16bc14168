-- export_clock_offset: one row per rank of a multi-rank run other than its reference rank (the run's lowest
-- rank that ran communication; the lowest rank when none did): how far the rank's clock is from the
-- reference rank's, estimated from the collectives both ran. Kineto stamps each rank with its own host's
-- clock (a monotonic clock on most builds, whose zero is that host's boot; `baseTimeNanoseconds`, where
-- written, is the trace's start rounded to the second and does not relate the clocks of two hosts to the
-- ns), so ranks of one host share a time base and ranks of two hosts can be seconds or days apart.
-- Method: the n-th instance of a collective ends at nearly the same instant on every rank that runs it
-- (the kernel ends when the last data of the group arrives): instances are matched as rank_skew matches
-- them, the n-th communication activity of (step, collective, process_group) on each rank (category
-- from kernel_category: every rule of `communication` is a name rule, so the per-name listing decides it
-- without activity_category's per-activity work). Point-to-point send / recv is left out: the n-th
-- transfer of two ranks need not be one transfer, and it ends with its one peer. d = the rank's end_ns −
-- the reference rank's end_ns of the same instance. offset_ns is the median of d (quantile_disc: one of
-- the differences, an integer), spread_ns the median of |d − offset_ns| (the median absolute deviation:
-- how far the instances' ends disagree apart from the offset). The offset is `significant` (a different
-- clock, to be corrected) when at least 3 instances match and |offset_ns| > max(5 × spread_ns, 20 µs): a
-- few µs of systematic end difference is how collectives of one clock end (ring position, the last hop),
-- not an offset, and an offset inside 5 median deviations cannot be told from the ends' own disagreement.
-- The export (reports/export/clocks.py clock_alignment) groups the significant ranks into hosts and shifts each
-- host's ranks by one offset.
-- Columns:
--   run_id, rank           VARCHAR, INTEGER  the rank
--   reference_rank         INTEGER  the rank whose clock it is compared with
--   matched                BIGINT  collective instances both ranks ran (matched as above)
--   offset_ns              BIGINT  median of d: the rank's clock minus the reference rank's, ns (NULL: none
--                            matched)
--   spread_ns              BIGINT  median |d − offset_ns|, ns
--   first_d_ns, last_d_ns  BIGINT  smallest and largest d (the range of the estimate's inputs)
--   significant            BOOLEAN  the rule above: true when the clocks differ by the offset
CREATE OR REPLACE VIEW export_clock_offset AS
WITH comm AS (
    SELECT k.run_id, k.rank, k.step, k.kernel_id, k.start_ns, k.start_ns + coalesce(k.dur_ns, 0) AS end_ns,
           coalesce(k.collective_name, k.name) AS collective, coalesce(k.process_group, '') AS process_group
    FROM kernels AS k
    JOIN kernel_category AS c ON c.name = k.name AND c.kind = k.kind
    WHERE c.category = 'communication'
      -- point-to-point transfers (send / recv) end when their one peer's data arrives, not with a group
      AND lower(coalesce(k.collective_name, '')) NOT IN ('send', 'recv', 'sendrecv', 'p2p')
      AND NOT (k.collective_name IS NULL AND regexp_matches(k.name, '(?i)sendrecv|_send_|_recv_'))
),
numbered AS (
    SELECT *, row_number() OVER (PARTITION BY run_id, rank, step, collective, process_group
                                 ORDER BY start_ns, kernel_id) AS instance
    FROM comm
),
ref AS (
    SELECT k.run_id, coalesce(min(c.rank), min(k.rank)) AS reference_rank
    FROM (SELECT DISTINCT run_id, rank FROM kernels) AS k
    LEFT JOIN (SELECT DISTINCT run_id, rank FROM comm) AS c ON c.run_id = k.run_id AND c.rank = k.rank
    GROUP BY k.run_id
),
ranks AS (
    SELECT DISTINCT k.run_id, k.rank, r.reference_rank
    FROM kernels AS k JOIN ref AS r ON r.run_id = k.run_id
    WHERE k.rank <> r.reference_rank
),
d AS (
    SELECT o.run_id, o.rank, o.end_ns - b.end_ns AS d
    FROM numbered AS o
    JOIN ref AS r ON r.run_id = o.run_id AND o.rank <> r.reference_rank
    JOIN numbered AS b ON b.run_id = o.run_id AND b.rank = r.reference_rank AND b.step IS NOT DISTINCT FROM o.step
        AND b.collective = o.collective AND b.process_group = o.process_group AND b.instance = o.instance
),
est AS (
    SELECT run_id, rank, count(*) AS matched, quantile_disc(d, 0.5) AS offset_ns, min(d) AS first_d_ns,
           max(d) AS last_d_ns
    FROM d GROUP BY run_id, rank
),
spread AS (
    SELECT d.run_id, d.rank, quantile_disc(abs(d.d - e.offset_ns), 0.5) AS spread_ns
    FROM d JOIN est AS e ON e.run_id = d.run_id AND e.rank = d.rank
    GROUP BY d.run_id, d.rank
)
SELECT r.run_id, r.rank, r.reference_rank, coalesce(e.matched, 0) AS matched, e.offset_ns, s.spread_ns,
       e.first_d_ns, e.last_d_ns,
       coalesce(e.matched >= 3 AND abs(e.offset_ns) > greatest(5 * s.spread_ns, 20000), false) AS significant
FROM ranks AS r
LEFT JOIN est AS e ON e.run_id = r.run_id AND e.rank = r.rank
LEFT JOIN spread AS s ON s.run_id = r.run_id AND s.rank = r.rank;

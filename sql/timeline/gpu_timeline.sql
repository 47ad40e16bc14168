-- gpu_timeline: where the GPU's time went. One row per (run_id, rank, device, step, variant), plus one
-- row per (run_id, rank, device, variant) with step NULL for the whole rank. The `hta` variant has
-- whole-rank rows only.
-- Method: every figure is the length of a union of intervals, and each piece of time goes to the first
-- class active in the order compute > comm > memory, else to idle:
--   busy = |all|, compute = |C|, comm = |K|, exposed comm = |C ∪ K| − |C|,
--   exposed memory = |all| − |C ∪ K|, comm ∩ compute = |C| + |K| − |C ∪ K|
-- (C compute intervals, K communication intervals, all = every interval). A union's length comes from
-- one ordered pass: with the intervals sorted by start, each adds the part of it that lies after the
-- latest end of those before it (a running max), i.e. max(0, end − max(start, running max)); earlier
-- intervals all start no later, so the one that reached that running max covers everything before it.
-- The four unions share one sort per group, so compute_ns + exposed_comm_ns + exposed_memory_ns +
-- idle_ns = span_ns holds exactly. Step rows and whole-rank rows are separate branches, so that a query
-- for some steps (or some ranks) computes only those.
-- Columns:
--   run_id, rank, device, step   VARCHAR, INTEGER, INTEGER, BIGINT  the group (step NULL: the whole rank)
--   variant                      VARCHAR  `exact`, `linked` (TraceLens' default view, its classes),
--                                `tracelens_all`, `hta_names` or `hta` (see _timeline_intervals)
--   activities                   BIGINT  intervals in the group
--   first_start_ns, last_end_ns  BIGINT  first GPU start and last GPU end
--   span_ns                      BIGINT  last_end_ns - first_start_ns
--   busy_ns                      HUGEINT  length of the union of all intervals
--   compute_ns                   HUGEINT  length of the union of compute intervals (not communication, not
--                            memory)
--   comm_ns                      HUGEINT  length of the union of communication intervals
--   exposed_comm_ns              HUGEINT  communication time not under compute: |comm - compute|
--   exposed_memory_ns            HUGEINT  memory time under neither: |memory - compute - comm|
--   idle_ns                      HUGEINT  span_ns - busy_ns
--   comm_compute_overlap_pct     DOUBLE  |comm ∩ compute| / |comm| * 100 (NULL without communication)
-- materialized: per_run   rows kept per run (warehouse/derived.py: `tracehouse derive`)
CREATE OR REPLACE VIEW gpu_timeline AS
-- each view it reads is read once (a CTE): DuckDB binds a view again at every reference
WITH all_timeline_intervals AS (SELECT * FROM _timeline_intervals),
step_sorted AS (
    -- the running max of the ends before each interval, per union (NULL: none before it)
    SELECT run_id, rank, device, step, variant, start_ns, end_ns, cls,
           max(end_ns) OVER w AS before_all,
           max(CASE WHEN cls = 'compute' THEN end_ns END) OVER w AS before_compute,
           max(CASE WHEN cls = 'comm' THEN end_ns END) OVER w AS before_comm,
           max(CASE WHEN cls <> 'memory' THEN end_ns END) OVER w AS before_compute_comm
    FROM all_timeline_intervals
    WHERE step IS NOT NULL
    WINDOW w AS (PARTITION BY run_id, rank, device, variant_no, step ORDER BY start_ns
                 ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING)
),
rank_sorted AS (
    SELECT run_id, rank, device, CAST(NULL AS BIGINT) AS step, variant, start_ns, end_ns, cls,
           max(end_ns) OVER w AS before_all,
           max(CASE WHEN cls = 'compute' THEN end_ns END) OVER w AS before_compute,
           max(CASE WHEN cls = 'comm' THEN end_ns END) OVER w AS before_comm,
           max(CASE WHEN cls <> 'memory' THEN end_ns END) OVER w AS before_compute_comm
    FROM all_timeline_intervals
    WINDOW w AS (PARTITION BY run_id, rank, device, variant_no ORDER BY start_ns
                 ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING)
),
added AS (
    -- what each interval adds to each union it belongs to
    SELECT run_id, rank, device, step, variant, start_ns, end_ns,
           greatest(end_ns - greatest(start_ns, coalesce(before_all, start_ns)), 0) AS add_all,
           CASE WHEN cls = 'compute'
                THEN greatest(end_ns - greatest(start_ns, coalesce(before_compute, start_ns)), 0) ELSE 0 END
               AS add_compute,
           CASE WHEN cls = 'comm'
                THEN greatest(end_ns - greatest(start_ns, coalesce(before_comm, start_ns)), 0) ELSE 0 END
               AS add_comm,
           CASE WHEN cls <> 'memory'
                THEN greatest(end_ns - greatest(start_ns, coalesce(before_compute_comm, start_ns)), 0) ELSE 0 END
               AS add_compute_comm
    FROM step_sorted
    UNION ALL
    SELECT run_id, rank, device, step, variant, start_ns, end_ns,
           greatest(end_ns - greatest(start_ns, coalesce(before_all, start_ns)), 0),
           CASE WHEN cls = 'compute'
                THEN greatest(end_ns - greatest(start_ns, coalesce(before_compute, start_ns)), 0) ELSE 0 END,
           CASE WHEN cls = 'comm'
                THEN greatest(end_ns - greatest(start_ns, coalesce(before_comm, start_ns)), 0) ELSE 0 END,
           CASE WHEN cls <> 'memory'
                THEN greatest(end_ns - greatest(start_ns, coalesce(before_compute_comm, start_ns)), 0) ELSE 0 END
    FROM rank_sorted
),
totals AS (
    SELECT run_id, rank, device, step, variant, count(*) AS activities,
           min(start_ns) AS first_start_ns, max(end_ns) AS last_end_ns,
           sum(add_all) AS busy_ns, sum(add_compute) AS compute_ns, sum(add_comm) AS comm_ns,
           sum(add_compute_comm) AS compute_comm_ns
    FROM added
    GROUP BY run_id, rank, device, step, variant
)
SELECT
    run_id, rank, device, step, variant, activities, first_start_ns, last_end_ns,
    last_end_ns - first_start_ns AS span_ns,
    busy_ns,
    compute_ns,
    comm_ns,
    compute_comm_ns - compute_ns AS exposed_comm_ns,
    busy_ns - compute_comm_ns AS exposed_memory_ns,
    last_end_ns - first_start_ns - busy_ns AS idle_ns,
    CASE WHEN comm_ns > 0 THEN 100.0 * (compute_ns + comm_ns - compute_comm_ns) / comm_ns END
        AS comm_compute_overlap_pct
FROM totals;

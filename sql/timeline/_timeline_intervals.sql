-- _timeline_intervals: helper of gpu_timeline. One row per (variant, GPU interval): the intervals that
-- each variant of the timeline sweeps, with the class that decides where their time goes.
-- Columns:
--   run_id, rank, device  VARCHAR, INTEGER, INTEGER  where the interval ran
--   step                  BIGINT  the step it belongs to (kernels.step; NULL when outside every step)
--   variant               VARCHAR  `exact`: every GPU activity (kernel, memcpy, memset) at its exact ns
--                                   times, classified by tracehouse's categories (activity_category:
--                                   communication = comm, memcpy/memset = memory, the rest compute);
--                                   `linked`: TraceLens' gpu_timeline exactly (its default view;
--                                   docs/tables.md, gpu_timeline variants): linked activities only
--                                   (kernels.linked: the launch call is in the trace), exact ns times, and
--                                   TraceLens' classes, which differ from tracehouse's: a memset is
--                                   computation (not memory), a memcpy is memory, and communication is a
--                                   kernel whose name contains `nccl`, `rccl` or `cross_device_reduce` (case-
--                                   insensitive; tracehouse's communication category also holds e.g. multimem
--                                   / symmetric-memory all-reduces, which TraceLens counts as computation).
--                                   So its compute_ns is TraceLens' computation_time, exposed_comm_ns its
--                                   exposed_comm_time, exposed_memory_ns its exposed_memcpy_time;
--                                   `tracelens_all`: the same with every activity, linked or not (TraceLens'
--                                   `..._unlinked` numbers); `hta_names`: every activity at exact times,
--                                   classified by HTA's name rule (communication = name starts with `nccl`):
--                                   isolates the category difference from HTA's other rules; `hta`: HTA
--                                   0.5.0's rules (docs/tables.md, gpu_timeline variants): times rounded to
--                                   whole µs (start = ceil(ts), end = floor(ts + dur), in float64 as HTA
--                                   parses them), any event with a stream other than -1 counts (cuda_sync and
--                                   stream-carrying host ops too), HTA's name classes, and with two or more
--                                   ProfilerStep#N the last step is dropped; HTA's OTHER class (cuda_sync
--                                   events) is counted as `memory` (non-compute)
--   variant_no            INTEGER  the variant's number (0 exact, 1 linked, 2 tracelens_all, 3 hta_names, 4
--                         hta): the key gpu_timeline's windows partition by (DuckDB sorts on an integer key
--                         about twice as fast as on text: 1.48 -> 0.84 s for gpu_timeline of a 300 MB run)
--   start_ns, end_ns      BIGINT  the interval (end_ns >= start_ns)
--   cls                   VARCHAR  `compute`, `comm` or `memory`
CREATE OR REPLACE VIEW _timeline_intervals AS
WITH activities AS (
    SELECT k.run_id, k.rank, k.device, k.step, k.start_ns, k.end_ns, k.linked, k.kind, k.name, k.correlation,
           k.launch_start_ns,
           CASE WHEN k.kind IN ('memcpy', 'memset') THEN 'memory'
                WHEN coalesce(o.category, c.category) = 'communication' THEN 'comm'
                ELSE 'compute' END AS cls,
           -- TraceLens: memset is computation; communication by name (nccl, rccl, cross_device_reduce)
           CASE WHEN k.kind = 'memcpy' THEN 'memory'
                WHEN k.kind = 'kernel' AND c.tracelens_comm THEN 'comm'
                ELSE 'compute' END AS tracelens_cls,
           CASE WHEN k.kind IN ('memcpy', 'memset') OR k.name LIKE 'Memcpy%' OR k.name LIKE 'Memset%' THEN 'memory'
                WHEN lower(k.name) LIKE 'nccl%' THEN 'comm'
                ELSE 'compute' END AS hta_cls
    FROM kernels AS k
    -- activity_category, written out: the name's category unless an op rule decides (_category_override)
    -- (TraceLens' name test runs once per distinct name, not per activity)
    LEFT JOIN (SELECT name, kind, category, regexp_matches(lower(name), 'nccl|rccl|cross_device_reduce') AS tracelens_comm
               FROM kernel_category) AS c ON c.name = k.name AND c.kind = k.kind
    LEFT JOIN _category_override AS o ON o.run_id = k.run_id AND o.rank = k.rank AND o.kernel_id = k.kernel_id
),
main_device AS (
    SELECT run_id, rank, min(device) AS device FROM kernels GROUP BY run_id, rank
),
-- HTA rule 3: with two or more ProfilerStep#N on a rank, everything from the last one's start is dropped
last_profiler_step AS (
    SELECT run_id, rank, max(start_ns) AS cut_ns
    FROM cpu_ops
    WHERE cat IS DISTINCT FROM 'gpu_user_annotation' AND name LIKE 'ProfilerStep#%'
    GROUP BY run_id, rank
    HAVING count(*) >= 2
),
kept_correlations AS (
    SELECT o.run_id, o.rank, o.correlation
    FROM cpu_ops AS o
    LEFT JOIN last_profiler_step AS l ON l.run_id = o.run_id AND l.rank = o.rank
    WHERE o.correlation IS NOT NULL AND (l.cut_ns IS NULL OR o.start_ns < l.cut_ns)
),
hta_events AS (
    SELECT a.run_id, a.rank, a.device, a.step, a.start_ns, a.end_ns, a.hta_cls AS cls, a.correlation
    FROM activities AS a
    UNION ALL
    -- HTA takes any event with a stream as a GPU event: cuda_sync, Triton host ops with stream 0, ...
    -- HTA's timeline is per rank, so these join the rank's main GPU
    SELECT o.run_id, o.rank, d.device, NULL AS step, o.start_ns,
           o.start_ns + o.dur_ns AS end_ns,
           -- HTA files cuda_sync events as OTHER (non-compute); here they join the memory class
           CASE WHEN o.cat = 'cuda_sync' THEN 'memory'
                WHEN lower(o.name) LIKE 'nccl%' THEN 'comm' ELSE 'compute' END AS cls, o.correlation
    FROM cpu_ops AS o
    JOIN main_device AS d ON d.run_id = o.run_id AND d.rank = o.rank
    WHERE o.stream IS NOT NULL AND o.stream <> -1
      -- ROCm runtime calls carry `stream: "0x0"` as text, which HTA's numeric column does not keep
      AND o.cat NOT IN ('cuda_runtime', 'cuda_driver')
),
hta_kept AS (
    SELECT e.*
    FROM hta_events AS e
    LEFT JOIN last_profiler_step AS l ON l.run_id = e.run_id AND l.rank = e.rank
    WHERE l.cut_ns IS NULL
       OR EXISTS (SELECT 1 FROM kept_correlations AS k
                  WHERE k.run_id = e.run_id AND k.rank = e.rank AND k.correlation = e.correlation)
),
hta_float AS (
    -- HTA works in float64 µs as parsed from the JSON text: the nearest double to ts (the integer part
    -- is exact in a double; adding the fraction rounds once, like the parser), and ts + dur in double
    SELECT run_id, rank, device, step, cls,
           CAST(start_ns // 1000 AS DOUBLE) + CAST(start_ns % 1000 AS DOUBLE) / 1000.0 AS ts_us,
           CAST(end_ns - start_ns AS DOUBLE) / 1000.0 AS dur_us
    FROM hta_kept
),
hta_rounded AS (
    -- rule 1: start = ceil(ts), end = floor(ts + dur), whole µs
    SELECT run_id, rank, device, step, cls,
           CAST(ceil(ts_us) AS BIGINT) * 1000 AS start_ns,
           CAST(floor(ts_us + dur_us) AS BIGINT) * 1000 AS end_ns
    FROM hta_float
)
SELECT run_id, rank, device, step, 'exact' AS variant, 0 AS variant_no, start_ns, end_ns, cls FROM activities
UNION ALL
SELECT run_id, rank, device, step, 'linked', 1, start_ns, end_ns, tracelens_cls FROM activities WHERE linked
UNION ALL
SELECT run_id, rank, device, step, 'tracelens_all', 2, start_ns, end_ns, tracelens_cls FROM activities
UNION ALL
SELECT run_id, rank, device, step, 'hta_names', 3, start_ns, end_ns, hta_cls FROM activities
UNION ALL
SELECT run_id, rank, device, NULL, 'hta', 4, start_ns, greatest(end_ns, start_ns), cls FROM hta_rounded;

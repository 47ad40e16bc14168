-- capture_flags: what the trace itself holds: one row per flag of a run's capture (uncounted_device_activity,
-- no_gpu_activity, several_ranks, truncated_trace), in data_quality's columns (data_quality is the union
-- of the flag views; its header says what a flag is and names the figures).
-- Columns:
--   run_id    VARCHAR  the run
--   rank      INTEGER  the rank the flag is about; NULL for the whole run
--   step      BIGINT  the step (step_spans.step) the flag is about; NULL for the whole run or rank
--   flag      VARCHAR  the flag's name (below)
--   severity  VARCHAR  error / warning / info
--   affects   VARCHAR[]  the report figures the flag concerns (data_quality's header names them)
--   evidence  MAP(VARCHAR, DOUBLE)  the numbers the flag rests on (name -> value; durations in ns, shares as
--             fractions of 1)
--   message   VARCHAR  one line: what is wrong and what to do about it
CREATE OR REPLACE VIEW capture_flags AS
WITH warning_rows AS (
    SELECT run_id, unnest(map_entries(warnings)) AS w FROM runs
),
uncounted AS (
    -- ingest's count of device activity of a kind that is not a kernel, copy or fill
    -- (ingest/sql/80_summary.sql: warnings 'device activities of an uncounted kind (CAT)' and
    -- 'device time of an uncounted kind, ns (CAT)')
    SELECT run_id,
           sum(w.value) FILTER (WHERE w.key LIKE 'device activities of an uncounted kind (%') AS activities,
           sum(w.value) FILTER (WHERE w.key LIKE 'device time of an uncounted kind, ns (%') AS device_ns,
           min(replace(replace(w.key, 'device activities of an uncounted kind (', ''), ')', ''))
               FILTER (WHERE w.key LIKE 'device activities of an uncounted kind (%') AS first_kind,
           count(*) FILTER (WHERE w.key LIKE 'device activities of an uncounted kind (%') AS kinds
    FROM warning_rows
    WHERE w.key LIKE 'device % of an uncounted kind%'
    GROUP BY run_id
),
run_gpu AS (
    -- each run's GPU activities as ingest counted them (kernels, copies, fills)
    SELECT r.run_id, r.n_ranks, count(k.run_id) AS activities, coalesce(sum(k.dur_ns), 0) AS gpu_ns
    FROM runs r LEFT JOIN kernels k ON k.run_id = r.run_id
    GROUP BY r.run_id, r.n_ranks
),
shown_rank AS (
    SELECT run_id, min(rank) AS shown_rank FROM step_spans GROUP BY run_id
),
host AS (
    SELECT run_id, count(*) AS host_ops FROM cpu_ops WHERE lower(cat) <> 'trace' GROUP BY run_id
)
-- flag uncounted_device_activity (error when the run has no GPU activity, else warning): the device ran
-- activity of a kind that is not a GPU kernel, copy or fill (MTIA, a new accelerator): GPU time,
-- categories, steps and the critical path leave it out
SELECT u.run_id, NULL::INTEGER AS rank, NULL::BIGINT AS step, 'uncounted_device_activity' AS flag,
       CASE WHEN rg.activities = 0 THEN 'error' ELSE 'warning' END AS severity,
       ['gpu_time', 'kernel_summary', 'category_summary', 'step_breakdown', 'stream_summary', 'critical_path',
        'idle_gaps'] AS affects,
       map(['uncounted_activities', 'uncounted_device_ns', 'counted_activities', 'counted_gpu_ns'],
           [CAST(u.activities AS DOUBLE), CAST(u.device_ns AS DOUBLE), CAST(rg.activities AS DOUBLE), CAST(rg.gpu_ns AS DOUBLE)]) AS evidence,
       u.activities || ' device activities of a kind tracehouse does not analyse (' || u.first_kind
           || CASE WHEN u.kinds > 1 THEN ' and ' || (u.kinds - 1) || ' more kinds' ELSE '' END || ', '
           || round(u.device_ns / 1e6, 3) || ' ms of device time) are not counted: '
           || CASE WHEN rg.activities = 0 THEN 'GPU time 0 ns means none of the device work is analysed'
                   ELSE 'the GPU figures cover only kernels, copies and fills' END
           || '; the host figures stand' AS message
FROM uncounted u JOIN run_gpu rg USING (run_id)
WHERE u.activities > 0
UNION ALL
-- flag no_gpu_activity (error): no GPU (or other device) activity at all: a CPU-only trace, or one
-- recorded without the device activity (ProfilerActivity.CUDA)
SELECT rg.run_id, NULL, NULL, 'no_gpu_activity', 'error',
       ['gpu_time', 'kernel_summary', 'category_summary', 'step_breakdown', 'stream_summary', 'critical_path',
        'idle_gaps', 'overlap_opportunity', 'fusion_match', 'layer_pattern', 'rank_skew'],
       map(['gpu_activities', 'host_ops'],
           [CAST(0 AS DOUBLE), CAST(coalesce(h.host_ops, 0) AS DOUBLE)]),
       'No GPU activity in this trace (' || coalesce(h.host_ops, 0) || ' host ops only): there is no GPU figure to '
           || 'show; profile with activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA] to see the device'
FROM run_gpu rg LEFT JOIN uncounted u USING (run_id) LEFT JOIN host h USING (run_id)
WHERE rg.activities = 0 AND coalesce(u.activities, 0) = 0
UNION ALL
-- flag several_ranks (info): the run has several ranks: the kernel tables sum every rank, while the step
-- breakdown, streams and critical path show one rank (the lowest)
SELECT rg.run_id, NULL, NULL, 'several_ranks', 'info', ['step_breakdown', 'stream_summary', 'critical_path', 'idle_gaps'],
       map(['ranks', 'shown_rank'],
           [CAST(rg.n_ranks AS DOUBLE), CAST(sr.shown_rank AS DOUBLE)]),
       rg.n_ranks || ' ranks: kernel, category, overlap and fusion tables sum all ranks; the step breakdown, streams '
           || 'and critical path are those of rank ' || coalesce(CAST(sr.shown_rank AS VARCHAR), '?')
           || ' only (see rank skew for the others)'
FROM run_gpu rg LEFT JOIN shown_rank sr USING (run_id)
WHERE rg.n_ranks > 1
UNION ALL
-- flag truncated_trace (warning): a file was cut or damaged and only the events before the damage landed
SELECT run_id, NULL, NULL, 'truncated_trace', 'warning',
       ['gpu_time', 'kernel_summary', 'step_breakdown', 'critical_path'],
       map(['events_kept'],
           [CAST(sum(w.value) AS DOUBLE)]),
       'A trace file is damaged (' || min(w.key) || '): the figures cover the events before the damage only; '
           || 'record the trace again if the window matters'
FROM warning_rows
WHERE w.key LIKE '%truncated%' OR w.key LIKE '%events that could be read were kept%'
GROUP BY run_id;

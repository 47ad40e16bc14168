-- Stage 3h: what ingest reports about one rank: counts, repairs and hints for detection.
-- One row per (kind, key): kind 'events' counts events by phase/category, 'warning' counts what was
-- repaired or skipped, 'hint' holds evidence used to detect the framework and the capture mode.
-- Device-side processes: those that GPU activities or CPU->GPU flow ends (ac2g) lie on, and that carry no
-- host event (a host process may receive flow ends in some traces).
CREATE OR REPLACE TABLE device_pids AS
SELECT pid FROM events
WHERE gpu_kind IS NOT NULL OR (ph = 'f' AND cat_lc = 'ac2g')
EXCEPT
SELECT pid FROM events
WHERE ph = 'X' AND cat_lc IN ('cpu_op', 'user_annotation', 'python_function', 'cuda_runtime', 'cuda_driver',
                              'hip_runtime', 'mtia_runtime', 'cpu_instant_event');

CREATE OR REPLACE TABLE uncounted_device AS
SELECT coalesce(cat, '') AS cat, dur_ns
FROM events
WHERE ph = 'X' AND gpu_kind IS NULL AND start_ns IS NOT NULL
  AND cat_lc NOT IN ('cuda_sync', 'gpu_user_annotation', 'trace', 'overhead')
  AND (cat_lc IN ('mtia_ccp_events') OR pid IN (SELECT pid FROM device_pids));

-- (events is read in two scans: by phase and category, and every per-event count in one pass)
CREATE OR REPLACE TABLE rank_summary AS
WITH by_phase AS (
    SELECT ph, cat, count(*) AS n FROM events GROUP BY ph, cat
),
per_event AS (
    SELECT count(*) FILTER (WHERE dur_clamped) AS clamped,
           count(*) FILTER (WHERE start_ns IS NULL AND ph NOT IN ('M')) AS no_timestamp,
           count(*) FILTER (WHERE ph IS NULL) AS no_phase,
           count(*) FILTER (WHERE gpu_kind IS NOT NULL AND start_ns IS NOT NULL) AS gpu_activities,
           count(*) FILTER (
               WHERE ph = 'X' AND gpu_kind IS NULL
                 AND cat_lc NOT IN ('cpu_op', 'user_annotation', 'gpu_user_annotation', 'cuda_runtime',
                                    'cuda_driver', 'python_function', 'cuda_sync', 'trace',
                                    'overhead', 'fwdbwd', 'hip_runtime', 'mtia_runtime', 'mtia_ccp_events',
                                    'cpu_instant_event', 'gpu_op')
           ) AS unknown_category,
           min(start_ns) FILTER (WHERE ph = 'X') AS trace_start_ns,
           max(start_ns + dur_ns) FILTER (WHERE ph = 'X') AS trace_end_ns
    FROM events
)
SELECT 'events' AS kind, coalesce(ph, '?') || ':' || coalesce(cat, '') AS key, sum(n) AS value
FROM by_phase GROUP BY ALL
UNION ALL
SELECT 'warning', 'negative durations clamped to 0', clamped FROM per_event
UNION ALL
SELECT 'warning', 'events without a timestamp skipped', no_timestamp FROM per_event
UNION ALL
SELECT 'warning', 'events without a phase (ph) skipped', no_phase FROM per_event
UNION ALL
SELECT 'warning', 'duplicate GPU activities dropped', gpu_activities - (SELECT count(*) FROM kernels) FROM per_event
UNION ALL
SELECT 'warning', 'flows without a partner', count(*) FROM flows WHERE src_ns IS NULL OR dst_ns IS NULL
UNION ALL
SELECT 'warning', 'events of unknown category', unknown_category FROM per_event
UNION ALL
-- Device activity of a kind that is not a GPU kernel, copy or fill (an MTIA `mtia_ccp_events` record, a
-- new accelerator's category): none of it is in `kernels`, so GPU time, categories and steps leave it
-- out. Counted per category, with its time, so that no report says "GPU time 0 ns" without a word
-- (sql/quality/data_quality.sql reads these keys; the prefix is the contract). A device-side event is an X event
-- on a process that CPU->GPU flows (ac2g) end on, or of a category named below as device-side; sync
-- records, GPU-side annotations and the profiler's own span are not activity.
SELECT 'warning', 'device activities of an uncounted kind (' || cat || ')', count(*)
FROM uncounted_device GROUP BY cat
UNION ALL
SELECT 'warning', 'device time of an uncounted kind, ns (' || cat || ')', sum(dur_ns)
FROM uncounted_device GROUP BY cat
UNION ALL
SELECT 'hint', 'sglang_frames', count(*) FROM python_frames WHERE regexp_matches(file, '(^|[/\\])sglang[/\\]')
UNION ALL
SELECT 'hint', 'vllm_frames', count(*) FROM python_frames WHERE regexp_matches(file, '(^|[/\\])vllm[/\\]')
UNION ALL
SELECT 'hint', 'trtllm_frames', count(*) FROM python_frames WHERE regexp_matches(file, '(^|[/\\])tensorrt_llm[/\\]')
UNION ALL
SELECT 'hint', 'trtllm_kernels', count(*) FROM kernels WHERE name LIKE '%tensorrt_llm%'
UNION ALL
SELECT 'hint', 'sglang_steps', count(*) FROM steps WHERE source = 'sglang_step'
UNION ALL
SELECT 'hint', 'vllm_steps', count(*) FROM steps WHERE source IN ('vllm_execute', 'vllm_execute_model')
UNION ALL
SELECT 'hint', 'graph_launched', count(*) FROM kernels WHERE launch_call LIKE '%GraphLaunch%'
UNION ALL
SELECT 'hint', 'eager_launched', count(*) FROM kernels WHERE linked AND launch_call NOT LIKE '%GraphLaunch%'
UNION ALL
SELECT 'hint', 'main_device', coalesce((SELECT device FROM kernels GROUP BY device ORDER BY count(*) DESC, device LIMIT 1), -1)
UNION ALL
SELECT 'span', 'trace_start_ns', trace_start_ns FROM per_event
UNION ALL
SELECT 'span', 'trace_end_ns', trace_end_ns FROM per_event;

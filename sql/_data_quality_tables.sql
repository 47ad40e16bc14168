-- _data_quality_tables: one row per (run_id, rank, step, flag) of data_quality for every flag that reads the
-- tables and their aggregates only (every flag but critical_path_one_host_call and gpu_queueing, which read
-- the per-step analyses critical_path and step_queueing): the flags a whole run can afford at any size
-- (`tracehouse export` reads them from here; its per-step flags come per batch of steps). data_quality is
-- this view's rows and those two flags'. Columns and flags: as data_quality's (sql/data_quality.sql).
CREATE OR REPLACE VIEW _data_quality_tables AS
-- each view it reads is read once (a CTE): DuckDB binds a view again at every reference
WITH gpu AS (
    -- each rank's GPU activities as ingest counted them (kernels, copies, fills)
    SELECT run_id, rank, count(*) AS activities, sum(dur_ns) AS gpu_ns,
           count(*) FILTER (WHERE linked AND launch_call NOT ILIKE '%GraphLaunch%') AS eager_activities,
           sum(dur_ns) FILTER (WHERE linked AND launch_call NOT ILIKE '%GraphLaunch%') AS eager_ns,
           count(*) FILTER (WHERE NOT linked) AS unlinked_activities,
           sum(dur_ns) FILTER (WHERE NOT linked) AS unlinked_ns
    FROM kernels
    GROUP BY run_id, rank
),
frames AS (
    SELECT run_id, rank, count(*) AS frames FROM python_frames GROUP BY run_id, rank
),
replayed AS (
    -- activities a graph launch replayed, and whether a capture trace gave each its launch site
    SELECT k.run_id, k.rank, count(*) AS activities, sum(k.dur_ns) AS gpu_ns,
           count(*) FILTER (WHERE s.kernel_id IS NULL) AS without_site,
           sum(k.dur_ns) FILTER (WHERE s.kernel_id IS NULL) AS without_site_ns
    FROM kernels k
    LEFT JOIN kernel_sites s ON s.run_id = k.run_id AND s.rank = k.rank AND s.kernel_id = k.kernel_id
    WHERE k.launch_call ILIKE '%GraphLaunch%'
    GROUP BY k.run_id, k.rank
),
warning_rows AS (
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
    SELECT r.run_id, r.n_ranks, coalesce(sum(g.activities), 0) AS activities, coalesce(sum(g.gpu_ns), 0) AS gpu_ns
    FROM runs r LEFT JOIN gpu g ON g.run_id = r.run_id
    GROUP BY r.run_id, r.n_ranks
),
shown_rank AS (
    SELECT run_id, min(rank) AS shown_rank FROM step_spans GROUP BY run_id
),
host AS (
    SELECT run_id, count(*) AS host_ops FROM cpu_ops WHERE lower(cat) <> 'trace' GROUP BY run_id
),
step_counts AS (
    -- steps with GPU work per (rank, phase): the report shows the median step of a phase
    SELECT run_id, rank, phase, count(*) AS steps
    FROM step_walls WHERE activities > 0
    GROUP BY run_id, rank, phase
),
nsys_runs AS (
    -- runs ingested from Nsight Systems exports (ingest/nsys.py writes source_format "nsys" in runs.metadata)
    SELECT run_id FROM runs WHERE metadata LIKE '%"source_format": "nsys"%'
),
cuda_apps AS (
    -- CUDA applications that are not PyTorch (runs.framework 'cuda': no PyTorch operator range, no ATen
    -- kernel): a flag's remedy names the CUDA/Nsight way (NVTX ranges, capture ranges), never a torch API
    SELECT run_id FROM runs WHERE framework = 'cuda'
),
host_op_counts AS (
    SELECT run_id, rank, count(*) FILTER (WHERE lower(cat) = 'cpu_op') AS cpu_ops FROM cpu_ops GROUP BY run_id, rank
),
warmup AS (SELECT * FROM step_warmup),
warmup_rank AS (
    -- each rank's one-time work (step_warmup: per step, and outside the steps), its warm-up step if any
    SELECT run_id, rank, sum(one_time_ns) AS one_time_ns, sum(one_time_events) AS events,
           count(*) FILTER (WHERE step IS NOT NULL) AS steps,
           min(step) FILTER (WHERE is_warmup) AS warmup_step,
           min(wall_ns) FILTER (WHERE is_warmup) AS warmup_wall_ns,
           min(others_median_wall_ns) FILTER (WHERE is_warmup) AS others_median_wall_ns,
           string_agg(CASE WHEN step IS NULL THEN 'outside the steps: ' ELSE 'step ' || step || ': ' END
                      || one_time_summary, '; ' ORDER BY step NULLS LAST) FILTER (WHERE one_time_ns > 0) AS what
    FROM warmup
    GROUP BY run_id, rank
)
-- flag no_python_stacks (warning): a rank launched GPU work eagerly but its trace has no Python frame
-- (recorded without with_stack=True): no launch site; capture traces cannot help an eager launch. An
-- Nsight Systems export never has Python frames (its sampled backtraces are not imported): the message
-- says so, and what gives a launch site. A CUDA application (cuda_apps) has no Python to locate: the
-- message says that the launch call is its host side
SELECT g.run_id, g.rank, NULL::BIGINT AS step, 'no_python_stacks' AS flag, 'warning' AS severity,
       ['launch_sites', 'kernel_summary.python_site', 'overlap_opportunity.python_site',
        'fusion_match.python_site'] AS affects,
       map(['eager_activities', 'eager_gpu_ns', 'eager_share', 'python_frames'],
           [CAST(g.eager_activities AS DOUBLE), CAST(g.eager_ns AS DOUBLE), CAST(g.eager_ns / nullif(g.gpu_ns, 0) AS DOUBLE), CAST(0 AS DOUBLE)]) AS evidence,
       CASE WHEN g.run_id IN (SELECT run_id FROM cuda_apps)
            THEN 'No Python launch sites: a CUDA application, not PyTorch (no PyTorch operator range, no ATen '
                 || 'kernel): ' || g.eager_activities || ' eagerly launched activities ('
                 || round(100 * g.eager_ns / nullif(g.gpu_ns, 0), 1) || ' % of GPU time) have their CUDA launch '
                 || 'call as host side; Python locations do not apply'
            WHEN g.run_id IN (SELECT run_id FROM nsys_runs)
            THEN 'No Python stacks (Nsight Systems records none): ' || g.eager_activities || ' eagerly launched '
                 || 'activities (' || round(100 * g.eager_ns / nullif(g.gpu_ns, 0), 1) || ' % of GPU time) have no '
                 || 'Python launch site; the NVTX op around a launch is its host op; for launch sites profile the '
                 || 'same workload with torch.profiler.profile(with_stack=True)'
            ELSE 'No Python stacks: ' || g.eager_activities || ' eagerly launched activities ('
                 || round(100 * g.eager_ns / nullif(g.gpu_ns, 0), 1) || ' % of GPU time) have no launch site; record '
                 || 'with torch.profiler.profile(with_stack=True) (capture traces only help graph replays)' END AS message
FROM gpu g LEFT JOIN frames f USING (run_id, rank)
WHERE g.eager_activities > 0 AND coalesce(f.frames, 0) = 0
UNION ALL
-- flag graph_replays_without_captures (warning): activities replayed by a CUDA/HIP graph launch have no
-- launch site from a capture trace: their only site is the replay call
SELECT run_id, rank, NULL, 'graph_replays_without_captures', 'warning',
       ['launch_sites', 'kernel_summary.python_site', 'overlap_opportunity.python_site', 'fusion_match.python_site'],
       map(['replayed_activities', 'without_site', 'without_site_gpu_ns', 'without_site_share'],
           [CAST(activities AS DOUBLE), CAST(without_site AS DOUBLE), CAST(without_site_ns AS DOUBLE), CAST(without_site_ns / nullif((SELECT gpu_ns FROM gpu WHERE gpu.run_id = replayed.run_id AND gpu.rank = replayed.rank), 0) AS DOUBLE)]),
       without_site || ' of ' || activities || ' graph-replayed activities have no launch site from a capture trace; '
           || 'ingest with --capture DIR (the traces recorded while the graphs were captured) or report with '
           || '--mapping RUN (a graph-off run of the same workload)'
FROM replayed
WHERE without_site > 0
UNION ALL
-- flag uncounted_device_activity (error when the run has no GPU activity, else warning): the device ran
-- activity of a kind that is not a GPU kernel, copy or fill (MTIA, a new accelerator): GPU time,
-- categories, steps and the critical path leave it out
SELECT u.run_id, NULL, NULL, 'uncounted_device_activity', CASE WHEN rg.activities = 0 THEN 'error' ELSE 'warning' END,
       ['gpu_time', 'kernel_summary', 'category_summary', 'step_breakdown', 'stream_summary', 'critical_path',
        'idle_gaps'],
       map(['uncounted_activities', 'uncounted_device_ns', 'counted_activities', 'counted_gpu_ns'],
           [CAST(u.activities AS DOUBLE), CAST(u.device_ns AS DOUBLE), CAST(rg.activities AS DOUBLE), CAST(rg.gpu_ns AS DOUBLE)]),
       u.activities || ' device activities of a kind tracehouse does not analyse (' || u.first_kind
           || CASE WHEN u.kinds > 1 THEN ' and ' || (u.kinds - 1) || ' more kinds' ELSE '' END || ', '
           || round(u.device_ns / 1e6, 3) || ' ms of device time) are not counted: '
           || CASE WHEN rg.activities = 0 THEN 'GPU time 0 ns means none of the device work is analysed'
                   ELSE 'the GPU figures cover only kernels, copies and fills' END
           || '; the host figures stand'
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
-- flag unlinked_activities (warning): most of a rank's GPU time has no launch call in the trace (a
-- GPU-only trace, or host events dropped): no launch site, host setup, launch delay or host-bound gap
-- can be told for it
SELECT run_id, rank, NULL, 'unlinked_activities', 'warning',
       ['launch_sites', 'kernel_summary.python_site', 'step_breakdown.host_setup', 'critical_path', 'idle_gaps'],
       map(['unlinked_activities', 'unlinked_gpu_ns', 'unlinked_share'],
           [CAST(unlinked_activities AS DOUBLE), CAST(unlinked_ns AS DOUBLE), CAST(unlinked_ns / nullif(gpu_ns, 0) AS DOUBLE)]),
       round(100 * unlinked_ns / nullif(gpu_ns, 0), 1) || ' % of GPU time has no launch call in the trace (host '
           || 'events missing): launch sites, host setup and the host side of the critical path and idle gaps '
           || 'are unknown for it; profile the CPU too (ProfilerActivity.CPU)'
FROM gpu
WHERE unlinked_ns > 0.5 * gpu_ns
UNION ALL
-- flag few_steps (warning): a rank has fewer than 3 steps with GPU work in the phase with the fewest: the
-- step the report shows may not be a median of anything. It affects what is a median over steps (the
-- step shown as representative, the run metrics a trend reads), not the figures of the step itself,
-- which are exact for that step: takeaways about the step are still drawn and name the step.
SELECT run_id, rank, NULL, 'few_steps', 'warning', ['step_breakdown.median', 'run_metrics'],
       map(['min_steps', 'phases'],
           [CAST(min(steps) AS DOUBLE), CAST(count(*) AS DOUBLE)]),
       'Only ' || min(steps) || ' ' || CASE WHEN arg_min(phase, steps) = 'unknown' THEN ''
                                            ELSE arg_min(phase, steps) || ' ' END || 'step' || CASE WHEN min(steps) = 1 THEN '' ELSE 's' END
           || ' with GPU work: the step shown is not a median; profile at least 3 steps '
           || CASE WHEN run_id IN (SELECT run_id FROM cuda_apps)
                   THEN '(an NVTX range named ProfilerStep#N around each iteration)'
                   ELSE '(torch.profiler.schedule(active=3) or more)' END
FROM step_counts
GROUP BY run_id, rank
HAVING min(steps) < 3
UNION ALL
-- flag warmup_in_window (info per rank; warning per step where it is 10 % or more of the step's wall):
-- one-time setup (one_time_work: context creation, module loading, library handles, allocator growth, a
-- slow first launch, compilation) lies inside the profiled window. The rank row names it and says
-- whether the report could show a steady-state step (step_warmup.is_warmup: the warm-up step is left
-- out of the pick); a step row marks a step whose own figures (host setup, GPU idle and utilization,
-- idle gaps, critical path) it weighs on, so no takeaway is drawn from them for that step.
SELECT run_id, rank, NULL, 'warmup_in_window', 'info', ['step_breakdown.median', 'run_metrics'],
       map(['one_time_ns', 'one_time_events', 'warmup_step', 'warmup_wall_ns', 'others_median_wall_ns'],
           [CAST(one_time_ns AS DOUBLE), CAST(events AS DOUBLE), CAST(warmup_step AS DOUBLE),
            CAST(warmup_wall_ns AS DOUBLE), CAST(others_median_wall_ns AS DOUBLE)]),
       'One-time setup inside the profiled window: '
           || CASE WHEN one_time_ns >= 1000000000 THEN CAST(round(one_time_ns / 1e9, 2) AS VARCHAR) || ' s'
                   WHEN one_time_ns >= 1000000 THEN CAST(round(one_time_ns / 1e6, 1) AS VARCHAR) || ' ms'
                   ELSE CAST(round(one_time_ns / 1e3, 1) AS VARCHAR) || ' us' END
           || ' (' || what || ')'
           || CASE WHEN warmup_step IS NOT NULL
                   THEN '; step ' || warmup_step || ' is the warm-up step (wall ' || round(warmup_wall_ns / 1e6, 3)
                        || ' ms against a median of ' || round(others_median_wall_ns / 1e6, 3)
                        || ' ms for the others): the step shown is a steady-state one'
                   WHEN steps <= 1
                   THEN '; the trace has no step without it, so the step figures include it: profile after a '
                        || CASE WHEN run_id IN (SELECT run_id FROM cuda_apps)
                                THEN 'warm-up (nsys profile --capture-range=cudaProfilerApi, cudaProfilerStart() '
                                     || 'after the first iterations)'
                                ELSE 'warm-up (torch.profiler.schedule(wait=1, warmup=1, active=3))' END
                        || ' to see the steady state'
                   ELSE '; it is one-time work, not a cost of every step' END AS message
FROM warmup_rank
WHERE one_time_ns > 0
UNION ALL
SELECT run_id, rank, step, 'warmup_in_window', 'warning',
       ['step_breakdown.host_setup', 'step_breakdown.gpu_utilization', 'step_breakdown.gpu_idle', 'idle_gaps',
        'critical_path'],
       map(['one_time_ns', 'one_time_events', 'wall_ns', 'share_of_wall', 'is_warmup'],
           [CAST(one_time_ns AS DOUBLE), CAST(one_time_events AS DOUBLE), CAST(wall_ns AS DOUBLE),
            CAST(one_time_ns / wall_ns AS DOUBLE), CAST(CASE WHEN is_warmup THEN 1 ELSE 0 END AS DOUBLE)]),
       'Step ' || step || ' holds one-time setup (' || one_time_summary || '), '
           || round(100 * one_time_ns / wall_ns, 1) || ' % of its wall: its host setup, GPU idle time and '
           || 'critical path are not those of the steady state, and no takeaway is drawn from them'
FROM warmup
WHERE step IS NOT NULL AND wall_ns > 0 AND one_time_ns >= 0.1 * wall_ns
UNION ALL
-- flag no_step_markers (info): the trace marks no step (no ProfilerStep#N, no serving step): the whole
-- trace is step 0, so host setup and host tail are those of the whole profiled window; or (one row per
-- rank) its steps are repeating bursts of launch calls between host idle periods, inferred, not marked
SELECT run_id, rank, step, 'no_step_markers', 'info', ['step_breakdown'],
       map(['window_ns'],
           [CAST(end_ns - start_ns AS DOUBLE)]),
       'The trace marks no steps: the whole profiled window is one step; '
           || CASE WHEN run_id IN (SELECT run_id FROM cuda_apps)
                   THEN 'wrap each iteration in an NVTX range named ProfilerStep#N (nvtxRangePushA) '
                   WHEN run_id IN (SELECT run_id FROM nsys_runs)
                   THEN 'wrap each iteration in an NVTX range named ProfilerStep#N (torch.cuda.nvtx.range_push) '
                   ELSE 'call prof.step() each iteration (or record_function a step) ' END
           || 'to get per-step figures'
FROM step_spans
WHERE source = 'whole'
UNION ALL
SELECT run_id, rank, NULL, 'no_step_markers', 'info', ['step_breakdown'],
       map(['steps'], [CAST(count(*) AS DOUBLE)]),
       'The trace marks no steps: its ' || count(*) || ' steps are repeating bursts of launch calls between '
           || 'host idle periods, inferred from the host''s pace; '
           || CASE WHEN run_id IN (SELECT run_id FROM cuda_apps)
                   THEN 'wrap each iteration in an NVTX range named ProfilerStep#N (nvtxRangePushA) '
                   WHEN run_id IN (SELECT run_id FROM nsys_runs)
                   THEN 'wrap each iteration in an NVTX range named ProfilerStep#N (torch.cuda.nvtx.range_push) '
                   ELSE 'call prof.step() each iteration (or record_function a step) ' END
           || 'to get the program''s own steps'
FROM step_spans
WHERE source = 'host_burst'
GROUP BY run_id, rank
UNION ALL
-- flag nsys_no_host_ops (warning): an Nsight Systems export whose rank launched GPU work but recorded no
-- PyTorch operator range (NVTX from torch.autograd.profiler.emit_nvtx): no kernel has a host op, so
-- kernel summaries and launch sites name only the CUDA call. Not for a CUDA application (cuda_apps):
-- it has no PyTorch operator to record
SELECT g.run_id, g.rank, NULL, 'nsys_no_host_ops', 'warning', ['launch_sites', 'kernel_summary.python_site'],
       map(['linked_activities', 'cpu_ops'],
           [CAST(g.activities - g.unlinked_activities AS DOUBLE), CAST(coalesce(h.cpu_ops, 0) AS DOUBLE)]),
       'No PyTorch operator ranges in this Nsight Systems export: kernels have no host op (aten::...) around '
           || 'their launch; profile under nsys with --pytorch=autograd-nvtx (or torch.autograd.profiler.emit_nvtx())'
FROM gpu g LEFT JOIN host_op_counts h USING (run_id, rank)
WHERE g.run_id IN (SELECT run_id FROM nsys_runs) AND g.run_id NOT IN (SELECT run_id FROM cuda_apps)
  AND coalesce(h.cpu_ops, 0) = 0
  AND g.activities > g.unlinked_activities
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
GROUP BY run_id

-- launch_site_flags: what a run's launch sites and host side can be trusted for: one row per flag of the Python launch
-- sites and the launch calls of a rank (no_python_stacks, graph_replays_without_captures,
-- unlinked_activities, nsys_no_host_ops), in data_quality's columns (data_quality is the union of the
-- flag views; its header says what a flag is and names the figures).
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
CREATE OR REPLACE VIEW launch_site_flags AS
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
  AND g.activities > g.unlinked_activities;

-- step_flags: what the steps can be trusted for: one row per flag of a rank's or a step's steps (few_steps,
-- warmup_in_window, no_step_markers; gpu_queueing, which reads step_queueing, is queueing_flags'), from the
-- tables and their aggregates only (step_walls, step_warmup), in data_quality's columns (data_quality is the union
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
CREATE OR REPLACE VIEW step_flags AS
WITH step_counts AS (
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
-- flag few_steps (warning): a rank has fewer than 3 steps with GPU work in the phase with the fewest: the
-- step the report shows may not be a median of anything. It affects what is a median over steps (the
-- step shown as representative, the run metrics a trend reads), not the figures of the step itself,
-- which are exact for that step: takeaways about the step are still drawn and name the step.
SELECT run_id, rank, NULL::BIGINT AS step, 'few_steps' AS flag, 'warning' AS severity,
       ['step_breakdown.median', 'run_metrics'] AS affects,
       map(['min_steps', 'phases'],
           [CAST(min(steps) AS DOUBLE), CAST(count(*) AS DOUBLE)]) AS evidence,
       'Only ' || min(steps) || ' ' || CASE WHEN arg_min(phase, steps) = 'unknown' THEN ''
                                            ELSE arg_min(phase, steps) || ' ' END || 'step' || CASE WHEN min(steps) = 1 THEN '' ELSE 's' END
           || ' with GPU work: the step shown is not a median; profile at least 3 steps '
           || CASE WHEN run_id IN (SELECT run_id FROM cuda_apps)
                   THEN '(an NVTX range named ProfilerStep#N around each iteration)'
                   ELSE '(torch.profiler.schedule(active=3) or more)' END AS message
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
GROUP BY run_id, rank;

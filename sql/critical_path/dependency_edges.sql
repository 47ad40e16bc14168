-- dependency_edges: one row per (node, candidate dependency) of the dependency graph of each rank: every
-- dependency the critical-path rules consider for a node, not only the one that was satisfied last
-- (_critical_path_pred picks that one per node; critical_path walks those). A node without any candidate
-- has one row with NULL pred_type, pred_id, ready_ns, choice_ns and edge. Nodes are GPU activities (`kernels`)
-- and host CUDA calls (`cpu_ops` of cat cuda_runtime / cuda_driver). Candidates:
--   GPU activity  - the previous activity on its stream, when it was issued no later (edge `stream_order`,
--                   kind kernel_gap, ready at its end);
--                 - cross-stream event waits: for the first activity on stream B launched after a
--                   cudaStreamWaitEvent (a `cuda_sync` "Stream Wait Event" record: wait_on_stream A,
--                   wait_on_event_corr = the cudaEventRecord's correlation), the last activity on A
--                   launched before that cudaEventRecord, when issued before the waiting activity (edge
--                   `event_wait`, kind sync_wait, ready at its end; one row per wait). Without the record's
--                   correlation (older Kineto) the wait call itself bounds the record: the last activity on
--                   A launched before the wait;
--                 - event waits recorded in a capture trace, on each graph replay: a replayed activity whose
--                   capture launch waits for another launch of the capture window through a captured
--                   cudaEventRecord -> cudaStreamWaitEvent (kernel_sites.capture_waits, ingest/capture_waits.py)
--                   depends on the activity of the same replay aligned with that launch, when it started
--                   before it (edge `event_wait`, kind sync_wait, named 'cudaStreamWaitEvent (captured)',
--                   ready at its end);
--                 - its launch call (edge `launch`): ready at the call's end, or at its start for a graph
--                   launch (cudaGraphLaunch / hipGraphLaunch), which precedes every activity it replays and
--                   usually ends after the first of them started. Any other call that ended after its
--                   activity had started (a blocking copy returns only when its copy is done) competes with
--                   the other candidates from its start (choice_ns): the activity waited for its issue, not
--                   its return. The predecessor is the call (`cpu`), or for a blocking copy its issuing part
--                   (`cpu_issue`), so a blocking copy's own launch never beats the stream order of the work
--                   it queued behind. Kind launch_delay, or `gpu_queued` when the activity started 1 ms or
--                   more after both the edge's ready time and the call's return: no launch takes that long;
--                   the activity was held by GPU work the trace does not show as its dependency (work queued
--                   before the profiled window, an unrecorded cross-stream wait) or by a host/GPU clock
--                   offset, never by the host;
--                 - unrecorded cross-stream waits (edge `inferred_wait`, kind sync_wait, ready at its end):
--                   an activity's slack is the time from the latest choice_ns of the candidates above to
--                   its start; a stream's pace is the median slack of its activities, and its resume
--                   window twice that, at least 1 us. An activity is held when its slack is 4 resume
--                   windows or more (scale-free: far longer than its stream usually waits for a satisfied
--                   dependency; a window of at least 20 us when the slack is also 1 ms or more), or else
--                   1 ms or more (then the window is 20 us, as a stream's own slack sets no scale), or, for the
--                   copy of a blocking copy call (the host is held from its issue), more than one resume
--                   window (then the window is that), or else, under 1 ms, more than one of the device's resume windows
--                   (the device's pace: the median slack of all its activities; then the window is that:
--                   on a stream whose own activities usually wait, copies waiting for compute, the
--                   stream's pace is that waiting and sets no scale for a wait): every activity on
--                   another stream of the same device that ended within the window before its start and
--                   after that latest choice_ns, and was issued before it (issue order; activities of
--                   one graph replay share their launch call: then by start) is a candidate. Waits that
--                   the trace does not record (cudaStreamWaitEvent inside a graph replay; older Kineto and
--                   ROCm write no cuda_sync record) show only this way: a stream idle far longer than its
--                   pace resumes within its pace of another stream's activity ending.
--   host call     - a blocking sync (cudaStreamSynchronize: the stream from its "Stream Sync" record,
--   (`cpu`)         cudaDeviceSynchronize: every stream, cudaEventSynchronize: the recorded stream up to
--                   the cudaEventRecord) or blocking copy (a synchronous call: cudaMemcpy, hipMemcpy,
--                   hipMemcpyWithStream, cuMemcpyDtoH ...; a copy to or from pageable memory; or, whatever
--                   the call, one that returned only after its copy had ended): each awaited GPU activity,
--                   i.e. the last one launched before the call on each of those streams (a copy: its own
--                   copy), ending by the call's end and after its start (edge `host_sync`, kind sync_wait,
--                   ready at its end). An activity ending up to 20 us after the call returned is still
--                   awaited (host and GPU clocks drift apart by microseconds; Nsight's mfu_2gpu_before
--                   showed 2-5 us); it competes from the call's end;
--                 - host waits no sync call names (kind sync_wait, ready at the awaited work's end): a thread's
--                   resume window is twice the median time between its CUDA calls, at least 1 us; when the
--                   stream the thread launches on next (its next launch call's first activity's stream) had
--                   work running while the thread sat 4 resume windows or more in a gap before this call
--                   (edge `host_wait`, named by the op around the gap: a spin-wait inside a library call) or
--                   in this launch call itself (edge `held_call`, left at the call's end: a launch that
--                   blocks until its stream's previous work, e.g. a pipeline receive, is done), and that
--                   work (the last issued before on the stream) ended within one window before the thread
--                   resumed, the thread waited for it; the activities a held call launched get the same
--                   candidate (edge `held_launch`, named by the call);
--                 - the previous host CUDA call on the same thread (edge `program_order`, kind cpu, ready at
--                   its end);
--                 - when the thread issued no CUDA call for at least 100 us (or this is its first call) and
--                   another thread of the rank launched GPU work in that gap (the main thread inside
--                   backward() while the autograd thread runs it, a DDP or pipeline thread): the last launch
--                   call of another thread that ended in the gap, later than the thread's own previous call
--                   (edge `thread_handoff`, kind cpu, ready at its end);
--   blocking copy - its issuing part, before its copy (`cpu_issue`): program order or hand-off as above.
-- Every edge goes strictly back in issue order (GPU activity: its launch call's start, else its own start;
-- host call: its start), so the graph has no cycles even on traces with skewed clocks.
-- Columns:
--   run_id, rank    VARCHAR, INTEGER  the rank
--   step            BIGINT  the node's step: kernels.step for an activity; for a host call the step_spans
--                   window (start_ns <= call start < end_ns) that holds it (the latest); NULL outside every
--                   step
--   node_type       VARCHAR  `gpu` (a GPU activity), `cpu` (a host CUDA call, entered at its end) or
--                   `cpu_issue` (a blocking copy call entered through the launch of its own copy: only its
--                   issuing part, before the copy, which follows program order)
--   node_id         BIGINT  kernel_id (gpu) or op_id (cpu, cpu_issue)
--   name            VARCHAR  activity or call name
--   kind            VARCHAR  activity kind (kernel / memcpy / memset); NULL for host calls
--   stream          BIGINT  the activity's stream; NULL for host calls
--   node_start_ns   BIGINT  the node's start
--   node_end_ns     BIGINT  the node's end
--   node_lo_ns      BIGINT  where a walk leaves the node when this candidate is its dependency: its start,
--                   except through a host_sync or held_call edge, left at the call's end (the time inside
--                   the call is the wait)
--   pred_type, pred_id  VARCHAR, BIGINT  the candidate dependency: `gpu` + kernel_id, `cpu` / `cpu_issue`
--                   + op_id
--   ready_ns        BIGINT  when that dependency was satisfied, before any clamping (it can lie after the
--                   node's start: a launch call that returned after its activity started)
--   choice_ns       BIGINT  the time the candidate competes with: ready_ns clamped to the node's start
--                   (host_sync: to the call's end); a launch call that ended after its activity started
--                   (and any graph launch): the call's start
--   edge            VARCHAR  stream_order / event_wait / inferred_wait / launch / held_launch / host_sync /
--                   host_wait / held_call / program_order / thread_handoff
--   edge_kind       VARCHAR  the path segment kind of the edge: kernel_gap / sync_wait / launch_delay /
--                   gpu_queued / cpu
--   edge_name       VARCHAR  what the edge segment is named on the path: the launch call, the sync call or
--                   cudaStreamWaitEvent ('cudaStreamWaitEvent (captured)': a wait recorded in a capture
--                   trace), the host op around a program-order gap, for an inferred wait what it
--                   waited for: the awaited activity and its stream ('<name> (stream <id>)'); NULL for
--                   kernel gaps (the previous activity on the same stream)
--   edge_op_id      BIGINT  the cpu_ops op_id behind that name (NULL for kernel gaps, inferred waits and waits
--                   recorded in a capture trace, whose call is not in the run)
CREATE OR REPLACE VIEW dependency_edges AS
-- act and calls are plain reads of a table, read a dozen times each: NOT MATERIALIZED, so that each read
-- is a scan (DuckDB keeps a CTE read twice in memory, spilling: a 1 GB trace's edges ran out of 640MB)
WITH act AS NOT MATERIALIZED (
    SELECT run_id, rank, device, stream, kernel_id, name, kind, step, start_ns, end_ns, launch_op_id,
           launch_call, launch_start_ns, launch_dur_ns,
           COALESCE(launch_start_ns, start_ns) AS issue_ns
    FROM kernels
),
calls AS NOT MATERIALIZED (
    SELECT run_id, rank, pid, tid, op_id, name, start_ns, start_ns + dur_ns AS end_ns, correlation,
           parent_op_id
    FROM cpu_ops
    WHERE cat IN ('cuda_runtime', 'cuda_driver')
),
-- a call's step: the latest step whose host window holds the call's start. Found in time linear in the
-- calls and steps, not calls x steps (94 M pairs on a 150 MB run of 917 steps): a rank's span cut into
-- as many buckets as it has steps, each step listed in every bucket it covers, each call in the bucket of
-- its start, so a call meets only the steps of its bucket (every step holding it among them)
step_bucketing AS (
    SELECT run_id, rank, min(start_ns) AS t0, greatest((max(end_ns) - min(start_ns)) // count(*), 1) AS width
    FROM step_spans
    GROUP BY run_id, rank
),
step_buckets AS (
    SELECT s.run_id, s.rank, s.step, s.start_ns, s.end_ns,
           unnest(range((s.start_ns - b.t0) // b.width, (s.end_ns - b.t0) // b.width + 1)) AS bucket
    FROM step_spans s
    JOIN step_bucketing b ON b.run_id = s.run_id AND b.rank = s.rank
),
call_buckets AS (
    SELECT c.run_id, c.rank, c.op_id, c.start_ns, (c.start_ns - b.t0) // b.width AS bucket
    FROM calls c
    JOIN step_bucketing b ON b.run_id = c.run_id AND b.rank = c.rank
    WHERE c.start_ns >= b.t0
),
call_step AS (
    SELECT c.run_id, c.rank, c.op_id, MAX(s.step) AS step
    FROM call_buckets c
    JOIN step_buckets s
      ON s.run_id = c.run_id AND s.rank = c.rank AND s.bucket = c.bucket
     AND c.start_ns >= s.start_ns AND c.start_ns < s.end_ns
    GROUP BY c.run_id, c.rank, c.op_id
),
blocking_copy AS (
    -- host calls that return only when their copy is done: cudaMemcpy and the like, or any copy from or
    -- to pageable host memory
    SELECT DISTINCT a.run_id, a.rank, a.launch_op_id AS op_id
    FROM act a
    WHERE a.kind = 'memcpy' AND a.launch_op_id IS NOT NULL
      AND (a.launch_call IN ('cudaMemcpy', 'hipMemcpy', 'cudaMemcpy2D', 'hipMemcpy2D', 'cuMemcpy', 'cuMemcpyDtoH',
                             'cuMemcpyHtoD', 'cuMemcpyDtoH_v2', 'cuMemcpyHtoD_v2', 'cudaMemcpyToSymbol',
                             'cudaMemcpyFromSymbol', 'hipMemcpyWithStream', 'hipMemcpyDtoH', 'hipMemcpyHtoD',
                             'hipMemcpyToSymbol', 'hipMemcpyFromSymbol')
           OR a.name LIKE '%Pageable%'
           -- whatever the API: a copy call that returned only after its copy had ended waited for it
           OR (a.launch_call NOT LIKE '%Graph%' AND a.launch_start_ns <= a.start_ns
               AND a.launch_start_ns + a.launch_dur_ns >= a.end_ns AND a.end_ns > a.start_ns))
),
sync_rec AS (
    -- Kineto's GPU-side synchronization records, keyed by the correlation of the host call
    SELECT run_id, rank, correlation, sync_kind,
           MAX(stream) AS stream, MAX(wait_on_stream) AS wait_on_stream,
           MAX(wait_on_event_corr) AS wait_on_event_corr, MIN(op_id) AS rec_op_id, MIN(start_ns) AS rec_start_ns
    FROM cpu_ops
    WHERE cat = 'cuda_sync'
    GROUP BY run_id, rank, correlation, sync_kind
),
rank_streams AS (
    SELECT DISTINCT run_id, rank, stream FROM kernels
),
sync_calls AS (
    SELECT c.run_id, c.rank, c.op_id, c.start_ns, c.end_ns,
           CASE WHEN c.name IN ('cudaStreamSynchronize', 'hipStreamSynchronize') THEN 'stream'
                WHEN c.name IN ('cudaDeviceSynchronize', 'hipDeviceSynchronize', 'cuCtxSynchronize')
                    THEN 'device'
                ELSE 'event' END AS sync_type
    FROM calls c
    WHERE c.name IN ('cudaStreamSynchronize', 'hipStreamSynchronize', 'cudaDeviceSynchronize',
                     'hipDeviceSynchronize', 'cuCtxSynchronize', 'cudaEventSynchronize', 'hipEventSynchronize')
),
sync_probe AS (
    -- (sync call, stream, time): the call waits for the work launched on that stream before that time
    SELECT sc.run_id, sc.rank, sc.op_id AS probe_id,
           CASE WHEN sc.sync_type = 'event' AND r.wait_on_stream IS NOT NULL AND r.wait_on_stream >= 0
                    THEN r.wait_on_stream
                WHEN sc.sync_type = 'stream' AND r.stream IS NOT NULL AND r.stream >= 0 THEN r.stream END
                AS known_stream,
           CASE WHEN sc.sync_type = 'event' AND rec.start_ns IS NOT NULL THEN rec.start_ns
                ELSE sc.start_ns END AS probe_ns
    FROM sync_calls sc
    JOIN calls c0 ON c0.run_id = sc.run_id AND c0.rank = sc.rank AND c0.op_id = sc.op_id
    LEFT JOIN sync_rec r
      ON r.run_id = sc.run_id AND r.rank = sc.rank AND r.correlation = c0.correlation
     AND r.sync_kind = CASE sc.sync_type WHEN 'stream' THEN 'Stream Sync' WHEN 'event' THEN 'Event Sync'
                                         ELSE 'Context Sync' END
    LEFT JOIN calls rec
      ON rec.run_id = sc.run_id AND rec.rank = sc.rank AND rec.correlation = r.wait_on_event_corr
     AND r.wait_on_event_corr > 0
),
wait_probe AS (
    -- cudaStreamWaitEvent: record time on the source stream, wait time on the waiting stream
    SELECT r.run_id, r.rank, r.rec_op_id AS probe_id, r.stream AS dst_stream, r.wait_on_stream AS src_stream,
           COALESCE(w.op_id, r.rec_op_id) AS wait_op_id,
           COALESCE(w.start_ns, r.rec_start_ns) AS wait_ns,
           COALESCE(rec.start_ns, w.start_ns, r.rec_start_ns) AS record_ns
    FROM sync_rec r
    LEFT JOIN calls w ON w.run_id = r.run_id AND w.rank = r.rank AND w.correlation = r.correlation
    LEFT JOIN calls rec
      ON rec.run_id = r.run_id AND rec.rank = r.rank AND rec.correlation = r.wait_on_event_corr
     AND r.wait_on_event_corr > 0
    WHERE r.sync_kind = 'Stream Wait Event' AND r.stream >= 0 AND r.wait_on_stream >= 0
),
probes AS (
    -- cls 0: "last activity launched before"; cls 2: "first activity launched after"
    SELECT p.run_id, p.rank, s.stream, p.probe_ns AS t, 0 AS cls, 'sync' AS probe_kind, p.probe_id
    FROM sync_probe p
    JOIN rank_streams s
      ON s.run_id = p.run_id AND s.rank = p.rank AND (p.known_stream IS NULL OR s.stream = p.known_stream)
    UNION ALL
    SELECT run_id, rank, src_stream, record_ns, 0, 'wait_src', probe_id FROM wait_probe
    UNION ALL
    SELECT run_id, rank, dst_stream, wait_ns, 2, 'wait_dst', probe_id FROM wait_probe
),
ordered AS (
    SELECT run_id, rank, stream, issue_ns AS t, 1 AS cls, start_ns, kernel_id,
           CAST(NULL AS VARCHAR) AS probe_kind, CAST(NULL AS BIGINT) AS probe_id
    FROM act
    UNION ALL
    SELECT run_id, rank, stream, t, cls, CAST(NULL AS BIGINT), CAST(NULL AS BIGINT), probe_kind, probe_id
    FROM probes
),
probed AS (
    SELECT run_id, rank, stream, probe_kind, probe_id, cls,
           LAST_VALUE(kernel_id IGNORE NULLS) OVER (
               PARTITION BY run_id, rank, stream ORDER BY t, cls, start_ns, kernel_id
               ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS last_before,
           FIRST_VALUE(kernel_id IGNORE NULLS) OVER (
               PARTITION BY run_id, rank, stream ORDER BY t, cls, start_ns, kernel_id
               ROWS BETWEEN CURRENT ROW AND UNBOUNDED FOLLOWING) AS first_after
    FROM ordered
),
probe_hits AS (
    SELECT run_id, rank, stream, probe_kind, probe_id,
           CASE WHEN cls = 0 THEN last_before ELSE first_after END AS kernel_id
    FROM probed
    WHERE probe_kind IS NOT NULL
),
sync_hits AS (
    -- what a blocking call waits for: the probed streams' last launched work, ending by the call's end (or up
    -- to 20 us after it: host and GPU clocks drift by microseconds, and a sync cannot return before the work
    -- it waits on), and ending after the call began; a blocking copy: its own copy
    SELECT sc.run_id, sc.rank, sc.op_id, a.kernel_id, a.end_ns, LEAST(a.end_ns, sc.end_ns) AS choice_ns
    FROM sync_calls sc
    JOIN probe_hits h
      ON h.run_id = sc.run_id AND h.rank = sc.rank AND h.probe_kind = 'sync' AND h.probe_id = sc.op_id
    JOIN act a ON a.run_id = h.run_id AND a.rank = h.rank AND a.kernel_id = h.kernel_id
    WHERE a.end_ns <= sc.end_ns + 20000 AND LEAST(a.end_ns, sc.end_ns) > sc.start_ns
    UNION ALL
    SELECT b.run_id, b.rank, b.op_id, a.kernel_id, a.end_ns, a.end_ns
    FROM blocking_copy b
    JOIN act a ON a.run_id = b.run_id AND a.rank = b.rank AND a.launch_op_id = b.op_id
    JOIN calls c ON c.run_id = b.run_id AND c.rank = b.rank AND c.op_id = b.op_id
    WHERE a.kind = 'memcpy' AND a.end_ns <= c.end_ns AND a.end_ns > c.start_ns
),
event_dep AS (
    -- the first activity on B after each wait depends on the last activity on A before the record
    SELECT d.run_id, d.rank, d.kernel_id, s.kernel_id AS src_id, w.wait_op_id
    FROM probe_hits d
    JOIN probe_hits s
      ON s.run_id = d.run_id AND s.rank = d.rank AND s.probe_id = d.probe_id AND s.probe_kind = 'wait_src'
    JOIN wait_probe w ON w.run_id = d.run_id AND w.rank = d.rank AND w.probe_id = d.probe_id
    WHERE d.probe_kind = 'wait_dst' AND d.kernel_id IS NOT NULL AND s.kernel_id IS NOT NULL
),
captured_dep AS (
    -- waits recorded in capture traces: within one graph replay, the activity aligned with the waiting
    -- capture launch depends on the one aligned with the awaited launch
    SELECT w.run_id, w.rank, w.kernel_id, a.kernel_id AS src_id
    FROM (SELECT run_id, rank, kernel_id, graph_correlation, capture_file, capture_window,
                 unnest(capture_waits) AS awaited_seq
          FROM kernel_sites
          WHERE capture_waits IS NOT NULL) w
    JOIN kernel_sites a
      ON a.run_id = w.run_id AND a.rank = w.rank AND a.graph_correlation = w.graph_correlation
     AND a.capture_file = w.capture_file AND a.capture_window = w.capture_window AND a.capture_seq = w.awaited_seq
),
stream_prev AS (
    SELECT run_id, rank, device, kernel_id, step, name, kind, stream, start_ns, end_ns, issue_ns, launch_op_id,
           launch_call, launch_start_ns, launch_dur_ns,
           LAG(kernel_id) OVER w AS prev_id, LAG(end_ns) OVER w AS prev_end, LAG(issue_ns) OVER w AS prev_issue
    FROM act
    WINDOW w AS (PARTITION BY run_id, rank, device, stream ORDER BY start_ns, kernel_id)
),
gpu_recorded AS (
    -- the recorded candidates of each GPU activity
    SELECT p.run_id, p.rank, p.kernel_id, 'gpu' AS pred_type, p.prev_id AS pred_id, p.prev_end AS ready_ns,
           LEAST(p.prev_end, p.start_ns) AS choice_ns, 'stream_order' AS edge, 'kernel_gap' AS edge_kind,
           CAST(NULL AS VARCHAR) AS edge_name, CAST(NULL AS BIGINT) AS edge_op_id
    FROM stream_prev p
    WHERE p.prev_id IS NOT NULL AND p.prev_issue <= p.issue_ns
    UNION ALL
    SELECT e.run_id, e.rank, e.kernel_id, 'gpu', e.src_id, s.end_ns, LEAST(s.end_ns, a.start_ns), 'event_wait',
           'sync_wait', 'cudaStreamWaitEvent', e.wait_op_id
    FROM event_dep e
    JOIN act a ON a.run_id = e.run_id AND a.rank = e.rank AND a.kernel_id = e.kernel_id
    JOIN act s ON s.run_id = e.run_id AND s.rank = e.rank AND s.kernel_id = e.src_id
    WHERE s.issue_ns < a.issue_ns
    UNION ALL
    -- (one replay shares its launch call: back in start order)
    SELECT e.run_id, e.rank, e.kernel_id, 'gpu', e.src_id, s.end_ns, LEAST(s.end_ns, a.start_ns), 'event_wait',
           'sync_wait', 'cudaStreamWaitEvent (captured)', CAST(NULL AS BIGINT)
    FROM captured_dep e
    JOIN act a ON a.run_id = e.run_id AND a.rank = e.rank AND a.kernel_id = e.kernel_id
    JOIN act s ON s.run_id = e.run_id AND s.rank = e.rank AND s.kernel_id = e.src_id
    WHERE s.start_ns < a.start_ns OR (s.start_ns = a.start_ns AND s.kernel_id < a.kernel_id)
    UNION ALL
    SELECT p.run_id, p.rank, p.kernel_id, CASE WHEN b.op_id IS NOT NULL THEN 'cpu_issue' ELSE 'cpu' END,
           p.launch_op_id,
           CASE WHEN p.launch_call LIKE '%GraphLaunch%' THEN p.launch_start_ns
                ELSE p.launch_start_ns + p.launch_dur_ns END,
           -- a call that ended after its activity started competes from its start (the activity waited for
           -- its issue, not its return)
           CASE WHEN p.launch_call LIKE '%GraphLaunch%' OR p.launch_start_ns + p.launch_dur_ns > p.start_ns
                THEN LEAST(p.launch_start_ns, p.start_ns)
                ELSE p.launch_start_ns + p.launch_dur_ns END,
           'launch',
           CASE WHEN p.start_ns - LEAST(CASE WHEN p.launch_call LIKE '%GraphLaunch%' THEN p.launch_start_ns
                                             ELSE p.launch_start_ns + p.launch_dur_ns END, p.start_ns) >= 1000000
                     AND p.start_ns - (p.launch_start_ns + p.launch_dur_ns) >= 1000000
                THEN 'gpu_queued' ELSE 'launch_delay' END,
           p.launch_call, p.launch_op_id
    FROM stream_prev p
    LEFT JOIN blocking_copy b ON b.run_id = p.run_id AND b.rank = p.rank AND b.op_id = p.launch_op_id
    WHERE p.launch_op_id IS NOT NULL
),
slack AS (
    -- how long after its latest recorded dependency (the largest choice_ns) each activity started
    SELECT p.run_id, p.rank, p.device, p.stream, p.kernel_id, p.start_ns, p.issue_ns, p.launch_op_id, r.best_ns,
           p.start_ns - r.best_ns AS slack_ns
    FROM stream_prev p
    JOIN (SELECT run_id, rank, kernel_id, MAX(choice_ns) AS best_ns FROM gpu_recorded
          GROUP BY run_id, rank, kernel_id) r
      ON r.run_id = p.run_id AND r.rank = p.rank AND r.kernel_id = p.kernel_id
),
stream_pace AS (
    -- a stream's own pace: the median slack of its activities, and the window within which a stream
    -- that resumes after another stream's activity ended was waiting for it: twice that pace, at least
    -- 1 us (host and GPU timestamps, and back-to-back kernels, sit within a microsecond)
    SELECT run_id, rank, device, stream,
           GREATEST(2 * CAST(quantile_cont(slack_ns, 0.5) AS BIGINT), 1000) AS resume_ns
    FROM slack
    GROUP BY run_id, rank, device, stream
),
device_pace AS (
    -- the device's pace: the median slack of every activity of the device, whatever its stream, and its
    -- resume window (twice that, at least 1 us): how soon work on this device usually starts once what it
    -- waits for is done. It judges a blocking copy on a stream whose own activities usually wait (copies
    -- that wait for compute): there the stream's pace is the waiting itself, no scale for a wait
    SELECT run_id, rank, device,
           GREATEST(2 * CAST(quantile_cont(slack_ns, 0.5) AS BIGINT), 1000) AS resume_ns
    FROM slack
    GROUP BY run_id, rank, device
),
held AS (
    -- activities held far longer than their stream's pace (4 resume windows or more), or 1 ms or more
    -- after their latest recorded dependency: something the trace does not record held them
    -- (a blocking copy held by the device's window alone, within its stream's and under 1 ms: that window)
    SELECT s.*, CASE WHEN b.op_id IS NOT NULL AND s.slack_ns <= p.resume_ns AND s.slack_ns < 1000000
                     THEN d.resume_ns
                     WHEN b.op_id IS NOT NULL AND s.slack_ns < 4 * p.resume_ns THEN p.resume_ns
                     WHEN s.slack_ns < 4 * p.resume_ns THEN 20000
                     WHEN s.slack_ns >= 1000000 THEN GREATEST(p.resume_ns, 20000)
                     ELSE p.resume_ns END AS window_ns
    FROM slack s
    JOIN stream_pace p ON p.run_id = s.run_id AND p.rank = s.rank AND p.device = s.device AND p.stream = s.stream
    JOIN device_pace d ON d.run_id = s.run_id AND d.rank = s.rank AND d.device = s.device
    LEFT JOIN blocking_copy b ON b.run_id = s.run_id AND b.rank = s.rank AND b.op_id = s.launch_op_id
    WHERE s.slack_ns >= 1000000 OR s.slack_ns >= 4 * p.resume_ns
       -- a blocking copy's call held the host from its issue: a copy that starts later than its stream's
       -- resume window, or the device's where that is shorter, after its latest recorded dependency was
       -- held by other GPU work
       OR (b.op_id IS NOT NULL AND s.slack_ns > LEAST(p.resume_ns, d.resume_ns))
),
gpu_edges AS (
    SELECT * FROM gpu_recorded
    UNION ALL
    -- ... that started within the window after an activity on another stream of the device ended, one
    -- issued before them (a graph replay's activities share their launch: then started before them): an
    -- unrecorded cross-stream wait (inside a graph replay; a trace without cuda_sync records)
    SELECT u.run_id, u.rank, u.kernel_id, 'gpu', y.kernel_id, y.end_ns, y.end_ns, 'inferred_wait', 'sync_wait',
           concat(y.name, ' (stream ', CAST(y.stream AS VARCHAR), ')'), CAST(NULL AS BIGINT)
    FROM held u
    JOIN act y
      ON y.run_id = u.run_id AND y.rank = u.rank AND y.device = u.device AND y.stream <> u.stream
     AND y.end_ns <= u.start_ns AND y.end_ns >= u.start_ns - u.window_ns AND y.end_ns > u.best_ns
     AND (y.issue_ns < u.issue_ns
          OR (y.issue_ns = u.issue_ns AND (y.start_ns < u.start_ns
                                           OR (y.start_ns = u.start_ns AND y.kernel_id < u.kernel_id))))
),
call_prev0 AS (
    SELECT c.run_id, c.rank, c.op_id, c.name, c.pid, c.tid, c.start_ns, c.end_ns, c.parent_op_id,
           LAG(c.op_id) OVER w AS prev_id, LAG(c.end_ns) OVER w AS prev_end
    FROM calls c
    WINDOW w AS (PARTITION BY run_id, rank, pid, tid ORDER BY start_ns, op_id)
),
launch_calls AS (
    -- host calls that launched GPU work, in end order, with the last one before them of another thread
    SELECT l.*, FIRST_VALUE(l.lag_id) OVER (PARTITION BY l.run_id, l.rank, l.run_no ORDER BY l.end_ns, l.op_id)
                    AS other_id
    FROM (
        SELECT t.*, SUM(CASE WHEN t.lag_tid IS DISTINCT FROM t.tid THEN 1 ELSE 0 END) OVER (
                        PARTITION BY t.run_id, t.rank ORDER BY t.end_ns, t.op_id
                        ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS run_no
        FROM (
            SELECT c.run_id, c.rank, c.op_id, c.tid, c.end_ns,
                   LAG(c.tid) OVER w AS lag_tid, LAG(c.op_id) OVER w AS lag_id
            FROM calls c
            WHERE c.op_id IN (SELECT launch_op_id FROM act WHERE launch_op_id IS NOT NULL)
            WINDOW w AS (PARTITION BY c.run_id, c.rank ORDER BY c.end_ns, c.op_id)
        ) t
    ) l
),
handoff_probe AS (
    -- threads coming back from a long gap (>= 100 us without a CUDA call) or issuing their first call
    SELECT run_id, rank, op_id, tid, start_ns FROM call_prev0
    WHERE prev_end IS NULL OR start_ns - prev_end >= 100000
),
handoff_seen AS (
    -- for each probe, the last launch call (of any thread) that ended by its start
    SELECT run_id, rank, op_id, cls,
           LAST_VALUE(lc_id IGNORE NULLS) OVER (PARTITION BY run_id, rank ORDER BY t, cls, op_id
                                                ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS last_id
    FROM (
        SELECT run_id, rank, op_id, end_ns AS t, 0 AS cls, op_id AS lc_id FROM launch_calls
        UNION ALL
        SELECT run_id, rank, op_id, start_ns, 1, CAST(NULL AS BIGINT) FROM handoff_probe
    ) u
),
handoff AS (
    -- a thread that issued no CUDA call for at least 100 us while another thread launched GPU work
    -- waited for that thread (the main thread inside backward() while the autograd thread runs it):
    -- the other thread's last launch call that ended in the gap
    SELECT p.run_id, p.rank, p.op_id,
           CASE WHEN l.tid IS DISTINCT FROM p.tid THEN l.op_id ELSE l.other_id END AS ho_id
    FROM handoff_probe p
    JOIN handoff_seen s ON s.run_id = p.run_id AND s.rank = p.rank AND s.op_id = p.op_id AND s.cls = 1
    JOIN launch_calls l ON l.run_id = s.run_id AND l.rank = s.rank AND l.op_id = s.last_id
),
call_prev AS (
    SELECT c.*, o.op_id AS ho_id, o.end_ns AS ho_end
    FROM call_prev0 c
    LEFT JOIN handoff h ON h.run_id = c.run_id AND h.rank = c.rank AND h.op_id = c.op_id
    LEFT JOIN calls o
      ON o.run_id = h.run_id AND o.rank = h.rank AND o.op_id = h.ho_id AND o.start_ns < c.start_ns
     AND o.end_ns > coalesce(c.prev_end, o.end_ns - 1)
),
thread_pace AS (
    -- a host thread's own pace: twice the median time between the end of one of its CUDA calls and the start
    -- of the next, at least 1 us (its resume window)
    SELECT run_id, rank, pid, tid,
           GREATEST(2 * CAST(quantile_cont(start_ns - prev_end, 0.5) AS BIGINT), 1000) AS resume_ns
    FROM call_prev0
    WHERE prev_end IS NOT NULL
    GROUP BY run_id, rank, pid, tid
),
first_launched AS (
    -- each launch call's first activity, and the work before it on its stream (the last one issued before)
    SELECT run_id, rank, launch_op_id AS op_id, stream, prev_id, prev_end
    FROM (
        SELECT p.*, ROW_NUMBER() OVER (PARTITION BY p.run_id, p.rank, p.launch_op_id
                                       ORDER BY p.start_ns, p.kernel_id) AS rn
        FROM stream_prev p
        WHERE p.launch_op_id IS NOT NULL AND p.prev_issue <= p.issue_ns
    ) t
    WHERE rn = 1
),
next_launch AS (
    -- for each host call, the thread's next launch call from it on (itself when it launched work): counting
    -- the thread's launch calls from its last call backwards, a call and the launch call at or after it
    -- share the count (a running count is linear; FIRST_VALUE IGNORE NULLS over the frame to the thread's
    -- end was quadratic in its calls: 19 s on a 2021 ResNet trace)
    -- with that launch's first activity's previous work on its stream (one launch per share of the count;
    -- carried here rather than joined after: planned as a join on (run, rank), it crossed every call of a
    -- thread with every launch, 108 M rows on a 2021 ResNet trace)
    SELECT run_id, rank, op_id,
           MAX(launched) OVER g AS launch_id, MAX(prev_id) OVER g AS prev_id, MAX(prev_end) OVER g AS prev_end
    FROM (
        SELECT c.run_id, c.rank, c.pid, c.tid, c.op_id, f.op_id AS launched, f.prev_id, f.prev_end,
               COUNT(f.op_id) OVER (PARTITION BY c.run_id, c.rank, c.pid, c.tid
                                    ORDER BY c.start_ns DESC, c.op_id DESC
                                    ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS launches_after
        FROM calls c
        LEFT JOIN first_launched f ON f.run_id = c.run_id AND f.rank = c.rank AND f.op_id = c.op_id
    ) t
    WINDOW g AS (PARTITION BY run_id, rank, pid, tid, launches_after)
),
host_held AS (
    -- a host thread held by the GPU work its next launch queues behind: the stream's previous work ran
    -- while the thread sat in a gap between calls (`host_wait`) or in a call (`held_call`: a launch that
    -- blocks) 4 resume windows or more of its own pace, and ended within one window before the thread
    -- resumed: the thread waited for it (a spin-wait inside a library call, a launch held by its
    -- stream's unfinished work), whatever the call or library is named
    SELECT c.run_id, c.rank, c.op_id, f.prev_id AS kernel_id, f.prev_end AS end_ns,
           CASE WHEN c.start_ns - c.prev_end >= 4 * tp.resume_ns AND f.prev_end > c.prev_end
                     AND f.prev_end <= c.start_ns AND c.start_ns - f.prev_end <= tp.resume_ns THEN 'host_wait'
                ELSE 'held_call' END AS edge
    FROM call_prev0 c
    JOIN thread_pace tp ON tp.run_id = c.run_id AND tp.rank = c.rank AND tp.pid = c.pid AND tp.tid = c.tid
    JOIN next_launch f ON f.run_id = c.run_id AND f.rank = c.rank AND f.op_id = c.op_id
    WHERE f.prev_id IS NOT NULL
      AND ((c.prev_end IS NOT NULL AND c.start_ns - c.prev_end >= 4 * tp.resume_ns AND f.prev_end > c.prev_end
            AND f.prev_end <= c.start_ns AND c.start_ns - f.prev_end <= tp.resume_ns)
           OR (f.launch_id = c.op_id AND c.end_ns - c.start_ns >= 4 * tp.resume_ns AND f.prev_end > c.start_ns
               AND f.prev_end <= c.end_ns AND c.end_ns - f.prev_end <= tp.resume_ns))
),
host_edges AS (
    -- the candidates of each host call: the GPU work a blocking call waited for, else a hand-off from
    -- another thread, else program order
    SELECT h.run_id, h.rank, 'cpu' AS node_type, h.op_id, 'gpu' AS pred_type, h.kernel_id AS pred_id,
           h.end_ns AS ready_ns, h.choice_ns, 'host_sync' AS edge, 'sync_wait' AS edge_kind
    FROM sync_hits h
    UNION ALL
    SELECT h.run_id, h.rank, n.node_type, h.op_id, 'gpu', h.kernel_id, h.end_ns, h.end_ns, h.edge, 'sync_wait'
    FROM host_held h
    JOIN (SELECT 'cpu' AS node_type UNION ALL SELECT 'cpu_issue') n ON n.node_type = 'cpu' OR h.edge = 'host_wait'
    UNION ALL
    SELECT c.run_id, c.rank, n.node_type, c.op_id, 'cpu', c.ho_id, c.ho_end, LEAST(c.ho_end, c.start_ns),
           'thread_handoff', 'cpu'
    FROM call_prev c
    JOIN (SELECT 'cpu' AS node_type UNION ALL SELECT 'cpu_issue') n ON TRUE
    WHERE c.ho_id IS NOT NULL
    UNION ALL
    SELECT c.run_id, c.rank, n.node_type, c.op_id, 'cpu', c.prev_id, c.prev_end, LEAST(c.prev_end, c.start_ns),
           'program_order', 'cpu'
    FROM call_prev c
    JOIN (SELECT 'cpu' AS node_type UNION ALL SELECT 'cpu_issue') n ON TRUE
    WHERE c.prev_id IS NOT NULL
),
gpu_all AS (
    SELECT * FROM gpu_edges
    UNION ALL
    -- the activities a held launch call launched wait, through it, for the work that held it
    SELECT a.run_id, a.rank, a.kernel_id, 'gpu', h.kernel_id, h.end_ns, LEAST(h.end_ns, a.start_ns), 'held_launch',
           'sync_wait', c.name, c.op_id
    FROM host_held h
    JOIN act a ON a.run_id = h.run_id AND a.rank = h.rank AND a.launch_op_id = h.op_id
    JOIN calls c ON c.run_id = h.run_id AND c.rank = h.rank AND c.op_id = h.op_id
    WHERE h.edge = 'held_call' AND a.kernel_id <> h.kernel_id
),
host_nodes AS (
    SELECT c.run_id, c.rank, 'cpu' AS node_type, c.op_id, c.name, c.start_ns, c.end_ns, c.parent_op_id
    FROM calls c
    UNION ALL
    -- a blocking copy call entered through the launch of its own copy: the issuing part, in program order
    SELECT c.run_id, c.rank, 'cpu_issue', c.op_id, c.name, c.start_ns, c.end_ns, c.parent_op_id
    FROM calls c
    JOIN blocking_copy b ON b.run_id = c.run_id AND b.rank = c.rank AND b.op_id = c.op_id
)
SELECT a.run_id, a.rank, a.step, 'gpu' AS node_type, a.kernel_id AS node_id, a.name, a.kind, a.stream,
       a.start_ns AS node_start_ns, a.end_ns AS node_end_ns, a.start_ns AS node_lo_ns, e.pred_type, e.pred_id,
       e.ready_ns, e.choice_ns, e.edge, e.edge_kind, e.edge_name, e.edge_op_id
FROM act a
LEFT JOIN gpu_all e ON e.run_id = a.run_id AND e.rank = a.rank AND e.kernel_id = a.kernel_id
UNION ALL
SELECT n.run_id, n.rank, cs.step, n.node_type, n.op_id, n.name, CAST(NULL AS VARCHAR), CAST(NULL AS BIGINT),
       n.start_ns, n.end_ns, CASE WHEN e.edge IN ('host_sync', 'held_call') THEN n.end_ns ELSE n.start_ns END,
       e.pred_type,
       e.pred_id, e.ready_ns, e.choice_ns, e.edge, e.edge_kind,
       CASE WHEN e.edge IN ('host_sync', 'held_call') THEN n.name WHEN e.edge IS NOT NULL THEN par.name END,
       CASE WHEN e.edge IN ('host_sync', 'held_call') THEN n.op_id WHEN e.edge IS NOT NULL THEN n.parent_op_id END
FROM host_nodes n
LEFT JOIN host_edges e
  ON e.run_id = n.run_id AND e.rank = n.rank AND e.node_type = n.node_type AND e.op_id = n.op_id
LEFT JOIN call_step cs ON cs.run_id = n.run_id AND cs.rank = n.rank AND cs.op_id = n.op_id
LEFT JOIN cpu_ops par ON par.run_id = n.run_id AND par.rank = n.rank AND par.op_id = n.parent_op_id

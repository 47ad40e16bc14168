-- Stage 3e: GPU activities with their launch call, the cpu_op and the Python frame around it.
-- linked: the launching runtime/driver call is in the trace, found by `correlation` (a graph launch
-- carries the correlation of every activity it replays: 1:N), else by the CPU->GPU flow that ends on
-- the activity (whose start is on a runtime call, or on the op where the trace has no runtime calls). cpu_op_id / python_frame_id: the innermost `cpu_op` / `python_function` on the
-- launch call's thread that encloses the call's start (sweep depth + ASOF, as in 30_cpu_ops.sql).
CREATE OR REPLACE TABLE gpu_flow_links AS
SELECT dst_event_id AS kernel_id, min(TRY_CAST(flow_id AS BIGINT)) AS flow_correlation,
       min(src_event_id) AS flow_launch_id
FROM flows
WHERE kind = 'ac2g' AND dst_event_id IS NOT NULL
GROUP BY dst_event_id;

CREATE OR REPLACE TABLE launch_by_correlation AS
SELECT correlation, min(ev_id) AS launch_id FROM host_api WHERE correlation IS NOT NULL GROUP BY correlation;

-- (narrow: the columns linking and stepping read; 70_kernels_final.sql reads the rest from `events` once)
CREATE OR REPLACE TABLE gpu_linked AS
SELECT
    e.ev_id AS kernel_id,
    coalesce(e.device, TRY_CAST(e.pid AS INTEGER)) AS device,
    coalesce(e.stream, TRY_CAST(e.tid AS BIGINT)) AS stream,
    e.gpu_kind AS kind,
    e.name,
    e.start_ns,
    e.dur_ns,
    coalesce(e.correlation, l.flow_correlation) AS correlation,
    coalesce(c.launch_id, l.flow_launch_id) AS launch_id
FROM events e
LEFT JOIN gpu_flow_links l ON l.kernel_id = e.ev_id
LEFT JOIN launch_by_correlation c ON c.correlation = coalesce(e.correlation, l.flow_correlation)
WHERE e.gpu_kind IS NOT NULL AND e.start_ns IS NOT NULL
-- the same activity twice (a profiler that wrote an event twice) counts once
QUALIFY row_number() OVER (PARTITION BY device, stream, e.start_ns, e.dur_ns, e.name, e.gpu_kind
                           ORDER BY e.ev_id) = 1;

-- the launching slice: a runtime/driver call, or (a CPU->GPU flow from an op, the autograd profiler's
-- export) the host range the flow starts on
CREATE OR REPLACE TABLE launch_points AS
SELECT h.op_id AS launch_id, h.pid, h.tid, h.name, h.start_ns, h.dur_ns
FROM cpu_ops h
WHERE h.op_id IN (SELECT launch_id FROM gpu_linked);

-- innermost enclosing cpu_op and python frame of each launch call (00_macros.sql)
CREATE OR REPLACE TABLE launch_at AS
SELECT launch_id AS point_id, pid, tid, start_ns AS t FROM launch_points;

CREATE OR REPLACE TABLE cpu_op_spans AS
SELECT op_id AS id, pid, tid, start_ns, dur_ns FROM cpu_ops WHERE cat = 'cpu_op';

CREATE OR REPLACE TABLE launch_cpu_op AS
SELECT point_id AS launch_id, id AS cpu_op_id FROM innermost_enclosing('cpu_op_spans', 'launch_at');

CREATE OR REPLACE TABLE frame_spans AS
SELECT frame_id AS id, pid, tid, start_ns, dur_ns FROM python_frames;

CREATE OR REPLACE TABLE launch_python_frame AS
SELECT point_id AS launch_id, id AS python_frame_id FROM innermost_enclosing('frame_spans', 'launch_at');

-- Stage 3e: GPU activities with their launch call, the cpu_op and the Python frame around it.
-- linked: the launching runtime/driver call is in the trace, found by `correlation` (a graph launch
-- carries the correlation of every activity it replays: 1:N), else by the CPU->GPU flow that ends on
-- the activity. cpu_op_id / python_frame_id: the innermost `cpu_op` / `python_function` on the
-- launch call's thread that encloses the call's start (sweep depth + ASOF, as in 30_cpu_ops.sql).
CREATE OR REPLACE TABLE gpu_flow_links AS
SELECT dst_event_id AS kernel_id, min(TRY_CAST(flow_id AS BIGINT)) AS flow_correlation,
       min(src_event_id) AS flow_launch_id
FROM flows
WHERE lower(kind) IN ('ac2g', 'async_gpu', 'async_cpu_to_gpu') AND dst_event_id IS NOT NULL
GROUP BY dst_event_id;

CREATE OR REPLACE TABLE launch_by_correlation AS
SELECT correlation, min(ev_id) AS launch_id FROM host_api WHERE correlation IS NOT NULL GROUP BY correlation;

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
    e.external_id,
    coalesce(c.launch_id, l.flow_launch_id) AS launch_id,
    e.grid, e.block, e.registers, e.shared_memory, e.occupancy, e.bytes,
    e.collective_name, e.process_group, e.in_msg_nelems, e.out_msg_nelems, e.group_size, e.dtype,
    e.pid, e.tid
FROM events e
LEFT JOIN gpu_flow_links l ON l.kernel_id = e.ev_id
LEFT JOIN launch_by_correlation c ON c.correlation = coalesce(e.correlation, l.flow_correlation)
WHERE e.gpu_kind IS NOT NULL AND e.start_ns IS NOT NULL
-- the same activity twice (a profiler that wrote an event twice) counts once
QUALIFY row_number() OVER (PARTITION BY device, stream, e.start_ns, e.dur_ns, e.name, e.gpu_kind
                           ORDER BY e.ev_id) = 1;

CREATE OR REPLACE TABLE launch_points AS
SELECT h.ev_id AS launch_id, h.pid, h.tid, h.name, h.start_ns, h.dur_ns
FROM host_api h
WHERE h.ev_id IN (SELECT launch_id FROM gpu_linked);

-- innermost enclosing cpu_op of each launch call
CREATE OR REPLACE TABLE launch_cpu_op AS
WITH ops AS (
    SELECT op_id, pid, tid, start_ns, dur_ns, start_ns + dur_ns AS end_ns
    FROM cpu_ops WHERE lower(cat) = 'cpu_op'
),
marks AS (
    SELECT pid, tid, start_ns AS t, 1 AS ord, -dur_ns AS tie, op_id, NULL::BIGINT AS launch_id, 1 AS delta FROM ops
    UNION ALL
    SELECT pid, tid, end_ns, CASE WHEN dur_ns = 0 THEN 3 ELSE 0 END, 0, NULL, NULL, -1 FROM ops
    UNION ALL
    SELECT pid, tid, start_ns, 2, 0, NULL, launch_id, 0 FROM launch_points
),
swept AS (
    SELECT pid, tid, t, op_id, launch_id,
           sum(delta) OVER (PARTITION BY pid, tid ORDER BY t, ord, tie, op_id
                            ROWS UNBOUNDED PRECEDING) - delta AS depth
    FROM marks
),
opened AS (SELECT pid, tid, t, op_id, depth FROM swept WHERE op_id IS NOT NULL),
points AS (SELECT pid, tid, t, launch_id, depth - 1 AS want_depth FROM swept WHERE launch_id IS NOT NULL)
SELECT p.launch_id, CASE WHEN p.want_depth >= 0 THEN o.op_id END AS cpu_op_id
FROM points p
ASOF LEFT JOIN opened o ON p.pid = o.pid AND p.tid = o.tid AND p.want_depth = o.depth AND p.t >= o.t;

-- innermost enclosing python_function frame of each launch call (the launch site)
CREATE OR REPLACE TABLE launch_python_frame AS
WITH frames AS (
    SELECT frame_id, pid, tid, start_ns, dur_ns, start_ns + dur_ns AS end_ns FROM python_frames
),
marks AS (
    SELECT pid, tid, start_ns AS t, 1 AS ord, -dur_ns AS tie, frame_id, NULL::BIGINT AS launch_id, 1 AS delta FROM frames
    UNION ALL
    SELECT pid, tid, end_ns, CASE WHEN dur_ns = 0 THEN 3 ELSE 0 END, 0, NULL, NULL, -1 FROM frames
    UNION ALL
    SELECT pid, tid, start_ns, 2, 0, NULL, launch_id, 0 FROM launch_points
),
swept AS (
    SELECT pid, tid, t, frame_id, launch_id,
           sum(delta) OVER (PARTITION BY pid, tid ORDER BY t, ord, tie, frame_id
                            ROWS UNBOUNDED PRECEDING) - delta AS depth
    FROM marks
),
opened AS (SELECT pid, tid, t, frame_id, depth FROM swept WHERE frame_id IS NOT NULL),
points AS (SELECT pid, tid, t, launch_id, depth - 1 AS want_depth FROM swept WHERE launch_id IS NOT NULL)
SELECT p.launch_id, CASE WHEN p.want_depth >= 0 THEN o.frame_id END AS python_frame_id
FROM points p
ASOF LEFT JOIN opened o ON p.pid = o.pid AND p.tid = o.tid AND p.want_depth = o.depth AND p.t >= o.t;

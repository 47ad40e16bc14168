-- Stage 3g: the kernels table of one rank: GPU activities with launch, enclosing op/frame and step.
-- The step of a linked activity is the step whose host window holds its launch call (a host burst's
-- window holds every call of the burst, graph launches included). An unlinked activity takes the step
-- whose linked GPU work spans its start.
-- graph_id / graph_node_id: the CUDA-graph node a replayed activity ran as (Kineto's `graph id` / `graph
-- node id` args, 0 = not from a graph, read as NULL); graph_annotation / module_fqn: what a `mark_kernels`
-- annotation baked into that node's event says (its `name`, its `module_fqn`), read only on graph nodes.
CREATE OR REPLACE TABLE kernel_launch AS
SELECT g.*, lp.name AS launch_call, lp.start_ns AS launch_start_ns, lp.dur_ns AS launch_dur_ns,
       lp.tid AS launch_tid, co.cpu_op_id, pf.python_frame_id
FROM gpu_linked g
LEFT JOIN launch_points lp ON lp.launch_id = g.launch_id
LEFT JOIN launch_cpu_op co ON co.launch_id = g.launch_id
LEFT JOIN launch_python_frame pf ON pf.launch_id = g.launch_id;

CREATE OR REPLACE TABLE kernel_step_linked AS
WITH launched AS (SELECT kernel_id, launch_start_ns AS t FROM kernel_launch WHERE launch_id IS NOT NULL),
by_start AS (
    SELECT l.kernel_id, CASE WHEN l.t <= w.end_ns THEN w.step END AS step
    FROM launched l ASOF LEFT JOIN steps w ON l.t >= w.start_ns
)
SELECT kernel_id, CASE WHEN (SELECT any_value(source) FROM steps) = 'whole' THEN 0 ELSE step END AS step
FROM by_start;

CREATE OR REPLACE TABLE kernel_step AS
WITH gpu_windows AS (
    SELECT k.step, min(g.start_ns) AS gpu_start_ns, max(g.start_ns + g.dur_ns) AS gpu_end_ns
    FROM kernel_step_linked k JOIN gpu_linked g USING (kernel_id)
    WHERE k.step IS NOT NULL GROUP BY k.step
),
unlinked AS (SELECT kernel_id, start_ns AS t FROM gpu_linked WHERE launch_id IS NULL)
SELECT kernel_id, step FROM kernel_step_linked
UNION ALL
SELECT u.kernel_id,
       CASE WHEN (SELECT any_value(source) FROM steps) = 'whole' THEN 0
            WHEN u.t <= w.gpu_end_ns THEN w.step END
FROM unlinked u ASOF LEFT JOIN gpu_windows w ON u.t >= w.gpu_start_ns;

-- the one wide table: the linked activities with the event's own columns, read from `events` once (unsorted:
-- ingest.rank.write_tables sorts it as it writes the Parquet file; a second sort of these wide rows ran a
-- 1 GB trace out of memory at 640 MB)
CREATE OR REPLACE TABLE kernels AS
SELECT k.kernel_id, k.device, k.stream, k.kind, k.name, k.start_ns, k.dur_ns,
       k.start_ns + k.dur_ns AS end_ns,
       k.correlation, e.external_id, k.launch_id IS NOT NULL AS linked, k.launch_call,
       k.launch_id AS launch_op_id, k.launch_start_ns, k.launch_dur_ns, k.launch_tid,
       k.cpu_op_id, k.python_frame_id, s.step, st.phase,
       e.grid, e.block, e.registers, e.shared_memory, e.occupancy, e.bytes,
       e.collective_name, e.process_group, e.in_msg_nelems, e.out_msg_nelems, e.group_size, e.dtype,
       e.pid, e.tid, e.graph_id, e.graph_node_id,
       CASE WHEN e.graph_node_id IS NOT NULL THEN e.meta_name END AS graph_annotation,
       CASE WHEN e.graph_node_id IS NOT NULL THEN e.module_fqn END AS module_fqn
FROM kernel_launch k
JOIN events e ON e.ev_id = k.kernel_id
LEFT JOIN kernel_step s USING (kernel_id)
LEFT JOIN steps st ON st.step = s.step;

-- streams: one row per (device, stream) with GPU activity; busy_ns is the union of its activities
-- (gaps-and-islands: an activity starts a new island when it begins after every earlier one ended).
CREATE OR REPLACE TABLE streams AS
WITH ordered AS (
    SELECT device, stream, start_ns, end_ns,
           max(end_ns) OVER (PARTITION BY device, stream ORDER BY start_ns, end_ns
                             ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_max_end
    FROM kernels
),
islands AS (
    SELECT *, sum(CASE WHEN prev_max_end IS NULL OR start_ns > prev_max_end THEN 1 ELSE 0 END)
              OVER (PARTITION BY device, stream ORDER BY start_ns, end_ns ROWS UNBOUNDED PRECEDING) AS island
    FROM ordered
),
island_spans AS (
    SELECT device, stream, island, min(start_ns) AS s, max(end_ns) AS e, count(*) AS n
    FROM islands GROUP BY device, stream, island
),
names AS (
    SELECT TRY_CAST(pid AS INTEGER) AS device, TRY_CAST(tid AS BIGINT) AS stream, any_value(meta_name) AS name
    FROM events WHERE ph = 'M' AND name = 'thread_name' GROUP BY ALL
)
SELECT i.device, i.stream, coalesce(n.name, 'stream ' || i.stream) AS name, sum(i.n) AS activities,
       sum(i.e - i.s) AS busy_ns, min(i.s) AS first_start_ns, max(i.e) AS last_end_ns
FROM island_spans i LEFT JOIN names n ON n.device = i.device AND n.stream = i.stream
GROUP BY i.device, i.stream, n.name
ORDER BY i.device, i.stream;

-- critical_path: one row per segment of the critical path of a step, per (run_id, rank, step): the chain
-- of dependencies that determined when the step's GPU work ended. The walk starts at the GPU activity
-- of the step that ends last (ties: later start, higher kernel_id) and, at each node, follows the
-- dependency that was satisfied last (see _critical_path_pred: previous activity on the stream, the
-- launch call (1:N for graph launches), a cudaEventRecord -> cudaStreamWaitEvent wait, a blocking host
-- sync or copy, host program order on the thread, a hand-off from another host thread). A host call
-- that blocks on the GPU (a blocking copy, a synchronize) is not the path: the GPU work it waits for
-- is (the sync_wait edge leads to it). It stops where that dependency lies outside the
-- step (an activity of another step, a host call outside the step's window) or where there is none;
-- when it stops at a host call, the host time from the step's start (step_spans.start_ns) to that call
-- is the path's first segment (kind cpu, edge `step_start`). A launch call always belongs to the step
-- of the activity it launched.
-- Segments tile the path: each node contributes its interval and each edge the time between the
-- dependency being satisfied and the node starting, every boundary clamped to the boundaries already
-- placed (a running minimum walking back in time), so that consecutive segments touch, never overlap,
-- and sum(dur_ns) = span = end of the last activity - start of the first segment, exactly.
-- The walk does not take one node at a time: most dependencies are the previous activity on the same
-- stream (or the previous call on the same host thread) in the same step, and runs of those are chains
-- that the walk passes through in one move. Nodes are numbered along their stream (host calls: in start
-- order), a node continues its chain when its dependency is the node just before it with the same
-- step, and the walk jumps from where it enters a chain to the chain's first node, listing every node in
-- between; it takes single moves only across other edges (launch, event wait, host sync) and where it
-- enters a host call of another step through a launch. So a step of thousands of activities on one
-- stream is walked in a handful of moves.
-- Zero-length segments are left out, except GPU activities (every activity on the chain is listed) and
-- sync_wait edges (every synchronization the path crosses is listed).
-- Columns:
--   run_id, rank, step  VARCHAR, INTEGER, BIGINT  the step (kernels.step)
--   seq         BIGINT  1.. in time order along the path, from its start
--   kind        VARCHAR  gpu           a GPU activity running
--               launch_delay  from the launch call (its end; a graph launch or a call that ended after the
--                             activity started: its start) to the activity's start, when the launch was
--                             the last dependency satisfied, under 1 ms
--               gpu_queued    the same edge when it is 1 ms or more: the activity waited on the GPU, held
--                             by work the trace does not show (queued before the profiled window, an
--                             unrecorded wait) or a host/GPU clock offset; not host time
--               kernel_gap    from the end of the previous activity on the same stream to the start
--               cpu           a host CUDA call, or host time between two calls of a thread (program order)
--                             or between another thread's launch and this thread's next call (hand-off)
--               sync_wait     a wait on other GPU work: from the end of the awaited activity to the start
--                             of the activity that waited on the event, or to the end of the blocking
--                             host sync call / copy or of a launch call held by its stream's work, or to
--                             the call a host thread resumed with after spinning on that work
--   category    VARCHAR  activity_category of the activity (gpu rows only)
--   name        VARCHAR  activity name (gpu), host call name (cpu node), the op around a host gap (cpu edge),
--               the launch call (launch_delay), the sync call or cudaStreamWaitEvent (sync_wait), for an
--               inferred wait (sync_wait) the awaited activity and its stream ('<name> (stream <id>)');
--               NULL for kernel gaps
--   start_ns, dur_ns  BIGINT  the segment
--   kernel_id   BIGINT  the activity (gpu rows); NULL otherwise
--   op_id       BIGINT  cpu_ops op_id of the host call or op named (cpu, launch_delay, sync_wait rows)
--   stream      BIGINT  the activity's stream (gpu rows)
--   edge        VARCHAR  NULL for a node (gpu activity or host call); for the time between nodes the
--               dependency: stream_order, event_wait, inferred_wait, launch, held_launch, host_sync,
--               host_wait, held_call, program_order, thread_handoff,
-- materialized: per_run   rows kept per run (warehouse/derived.py: `tracehouse derive`): the report's step path, read for one step; critical_path_summary
--               step_start
CREATE OR REPLACE VIEW critical_path AS
WITH RECURSIVE ordered AS (
    SELECT p.*,
           ROW_NUMBER() OVER seq AS idx,
           LAG(p.node_id) OVER seq AS prev_id,
           LAG(p.step) OVER seq AS prev_step
    FROM _critical_path_pred p
    WINDOW seq AS (PARTITION BY p.run_id, p.rank, p.node_type, p.stream ORDER BY p.node_start_ns, p.node_id)
),
nodes AS (
    -- a node continues its chain when its chosen dependency is the node just before it, in the same step
    SELECT o.*,
           MAX(CASE WHEN o.continues THEN NULL ELSE o.idx END) OVER (
               PARTITION BY o.run_id, o.rank, o.node_type, o.stream ORDER BY o.idx
               ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS head_idx
    FROM (
        SELECT ordered.*,
               COALESCE(edge IN ('stream_order', 'program_order') AND pred_type = node_type AND pred_id = prev_id
                        AND step = prev_step, FALSE) AS continues
        FROM ordered
    ) o
),
heads AS (
    -- the first node of each chain, and the dependency the walk follows from it
    SELECT run_id, rank, node_type, stream, idx, pred_type, pred_id, COALESCE(edge = 'launch', FALSE) AS via_launch
    FROM nodes
    WHERE idx = head_idx
),
starts AS (
    SELECT run_id, rank, step, kernel_id
    FROM (
        SELECT run_id, rank, step, kernel_id,
               ROW_NUMBER() OVER (PARTITION BY run_id, rank, step
                                  ORDER BY end_ns DESC, start_ns DESC, kernel_id DESC) AS rn
        FROM kernels
        WHERE step IS NOT NULL
    ) t
    WHERE rn = 1
),
walk AS (
    -- one row per move: the node it enters (entry_idx, at entry_pos) in the chain chain_head, and the
    -- first node it passes (first_idx, at head_pos): the chain's first node, or the entered node alone
    SELECT n.run_id, n.rank, s.step, n.node_type, n.stream, n.head_idx AS chain_head, n.idx AS entry_idx,
           n.head_idx AS first_idx, 0 AS entry_pos, n.idx - n.head_idx AS head_pos,
           h.pred_type AS next_type, h.pred_id AS next_id, h.via_launch AS next_via_launch
    FROM starts s
    JOIN nodes n ON n.run_id = s.run_id AND n.rank = s.rank AND n.node_type = 'gpu' AND n.node_id = s.kernel_id
    JOIN heads h
      ON h.run_id = n.run_id AND h.rank = n.rank AND h.node_type = n.node_type
     AND h.stream IS NOT DISTINCT FROM n.stream AND h.idx = n.head_idx
    UNION ALL
    -- follow the chosen dependency while it stays in the step (a launch call always does); a node of
    -- another step (a launch call) is entered alone
    SELECT n.run_id, n.rank, w.step, n.node_type, n.stream, n.head_idx, n.idx,
           CASE WHEN n.step = w.step THEN n.head_idx ELSE n.idx END,
           w.head_pos + 1,
           w.head_pos + 1 + CASE WHEN n.step = w.step THEN n.idx - n.head_idx ELSE 0 END,
           CASE WHEN n.step = w.step THEN h.pred_type ELSE n.pred_type END,
           CASE WHEN n.step = w.step THEN h.pred_id ELSE n.pred_id END,
           CASE WHEN n.step = w.step THEN h.via_launch ELSE COALESCE(n.edge = 'launch', FALSE) END
    FROM walk w
    JOIN nodes n
      ON n.run_id = w.run_id AND n.rank = w.rank AND n.node_type = w.next_type AND n.node_id = w.next_id
    LEFT JOIN heads h
      ON h.run_id = n.run_id AND h.rank = n.rank AND h.node_type = n.node_type
     AND h.stream IS NOT DISTINCT FROM n.stream AND h.idx = n.head_idx
    WHERE n.step = w.step OR w.next_via_launch
),
path AS (
    -- every node the walk passed, at its position from the end of the step
    SELECT n.*, w.step AS walk_step, w.entry_pos + (w.entry_idx - n.idx) AS pos
    FROM walk w
    JOIN nodes n
      ON n.run_id = w.run_id AND n.rank = w.rank AND n.node_type = w.node_type
     AND n.stream IS NOT DISTINCT FROM w.stream AND n.head_idx = w.chain_head
     AND n.idx >= w.first_idx AND n.idx <= w.entry_idx
),
step_start AS (
    SELECT run_id, rank, step, MIN(start_ns) AS start_ns FROM step_spans GROUP BY run_id, rank, step
),
linked AS (
    SELECT p.run_id, p.rank, p.walk_step AS step, p.pos, p.node_type, p.node_id, p.name, p.kind, p.stream,
           p.node_end_ns AS b, p.node_lo_ns AS a, p.ready_ns, p.edge, p.edge_kind, p.edge_name, p.edge_op_id,
           LEAD(p.pos) OVER (PARTITION BY p.run_id, p.rank, p.walk_step ORDER BY p.pos) IS NULL AS is_last
    FROM path p
),
chain AS (
    -- the last node has no dependency inside the step; a host call there is preceded by the host work
    -- of the step from its start (edge `step_start`); a GPU activity there starts the path
    SELECT l.run_id, l.rank, l.step, l.pos, l.node_type, l.node_id, l.name, l.kind, l.stream, l.b, l.a,
           CASE WHEN NOT l.is_last THEN l.ready_ns
                WHEN l.node_type <> 'gpu' AND ss.start_ns < l.a THEN ss.start_ns
                ELSE l.a END AS r,
           CASE WHEN NOT l.is_last THEN l.edge WHEN l.node_type <> 'gpu' THEN 'step_start' END AS edge,
           CASE WHEN NOT l.is_last THEN l.edge_kind WHEN l.node_type <> 'gpu' THEN 'cpu' END AS edge_kind,
           CASE WHEN NOT l.is_last OR l.edge = 'program_order' THEN l.edge_name END AS edge_name,
           CASE WHEN NOT l.is_last OR l.edge = 'program_order' THEN l.edge_op_id END AS edge_op_id
    FROM linked l
    LEFT JOIN step_start ss ON ss.run_id = l.run_id AND ss.rank = l.rank AND ss.step = l.step
),
clamped AS (
    SELECT c.*,
           MIN(LEAST(b, a, r)) OVER (PARTITION BY run_id, rank, step ORDER BY pos
                                     ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS m
    FROM chain c
),
bounds AS (
    SELECT c.*,
           CASE WHEN m IS NULL THEN b ELSE LEAST(m, b) END AS xb,
           CASE WHEN m IS NULL THEN LEAST(b, a) ELSE LEAST(m, b, a) END AS xa,
           CASE WHEN m IS NULL THEN LEAST(b, a, r) ELSE LEAST(m, b, a, r) END AS xr
    FROM clamped c
),
segments AS (
    -- the node itself
    SELECT run_id, rank, step, pos, 1 AS part,
           CASE WHEN node_type = 'gpu' THEN 'gpu' ELSE 'cpu' END AS kind,
           name, xa AS start_ns, xb - xa AS dur_ns,
           CASE WHEN node_type = 'gpu' THEN node_id END AS kernel_id,
           CASE WHEN node_type <> 'gpu' THEN node_id END AS op_id,
           stream, kind AS activity_kind, CAST(NULL AS VARCHAR) AS edge
    FROM bounds
    WHERE node_type = 'gpu' OR xb > xa
    UNION ALL
    -- the time between the node's dependency being satisfied and the node
    SELECT run_id, rank, step, pos, 0, edge_kind, edge_name, xr, xa - xr, CAST(NULL AS BIGINT), edge_op_id,
           CAST(NULL AS BIGINT), CAST(NULL AS VARCHAR), edge
    FROM bounds
    WHERE xa > xr OR edge IN ('event_wait', 'host_sync')
)
SELECT s.run_id, s.rank, s.step,
       ROW_NUMBER() OVER (PARTITION BY s.run_id, s.rank, s.step ORDER BY s.pos DESC, s.part) AS seq,
       s.kind,
       CASE WHEN s.kind = 'gpu' THEN COALESCE(ko.category, kc.category, 'other') END AS category,
       s.name, s.start_ns, s.dur_ns, s.kernel_id, s.op_id, s.stream, s.edge
FROM segments s
LEFT JOIN kernel_category kc ON s.kind = 'gpu' AND kc.name = s.name AND kc.kind = s.activity_kind
-- an op rule's per-activity decision (activity_category)
LEFT JOIN _category_override ko ON s.kind = 'gpu' AND ko.run_id = s.run_id AND ko.rank = s.rank AND ko.kernel_id = s.kernel_id

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
-- stream is walked in a handful of moves. The nodes are numbered per rank (k), one stream after another,
-- so a chain is a range of numbers, and the walk's joins read integers only: the nodes a move can enter
-- (a step's last activity, the dependency of a chain's first node) with their step, chain and the
-- numbers of the moves out of them; the nodes' other columns are joined once, to the ranges passed
-- (with the nodes' full rows under each move, a 4 GB trace's walk ran out of 640MB).
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
    -- the rank's nodes numbered (k) along their stream (host calls: in start order), one stream after
    -- another: a stream's nodes have consecutive numbers
    SELECT p.*,
           ROW_NUMBER() OVER seq AS k,
           COALESCE(p.edge IN ('stream_order', 'program_order') AND p.pred_type = p.node_type
                    AND LAG(p.node_type) OVER seq = p.node_type
                    AND LAG(p.stream) OVER seq IS NOT DISTINCT FROM p.stream
                    AND p.pred_id = LAG(p.node_id) OVER seq AND p.step = LAG(p.step) OVER seq, FALSE) AS continues
    FROM _critical_path_pred p
    WINDOW seq AS (PARTITION BY p.run_id, p.rank ORDER BY p.node_type, p.stream, p.node_start_ns, p.node_id)
),
nodes AS (
    -- a node continues its chain when its chosen dependency is the node just before it on its stream, in
    -- the same step; a chain is the numbers head_k .. k of its last node
    SELECT o.*,
           MAX(CASE WHEN o.continues THEN NULL ELSE o.k END) OVER (
               PARTITION BY o.run_id, o.rank ORDER BY o.k ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS head_k
    FROM ordered o
),
heads AS (
    -- the first node of each chain, and the number of the dependency the walk follows from it
    SELECT h.run_id, h.rank, h.k, d.k AS pred_k, COALESCE(h.edge = 'launch', FALSE) AS via_launch
    FROM nodes h
    LEFT JOIN nodes d
      ON d.run_id = h.run_id AND d.rank = h.rank AND d.node_type = h.pred_type AND d.node_id = h.pred_id
    WHERE h.k = h.head_k
),
starts AS (
    SELECT t.run_id, t.rank, t.step, n.k
    FROM (
        SELECT run_id, rank, step, kernel_id,
               ROW_NUMBER() OVER (PARTITION BY run_id, rank, step
                                  ORDER BY end_ns DESC, start_ns DESC, kernel_id DESC) AS rn
        FROM kernels
        WHERE step IS NOT NULL
    ) t
    JOIN nodes n ON n.run_id = t.run_id AND n.rank = t.rank AND n.node_type = 'gpu' AND n.node_id = t.kernel_id
    WHERE t.rn = 1
),
entries AS (
    -- the nodes a move can enter (a step's last activity, the dependency of a chain's first node), integers
    -- only: its step, its chain's first node, the move through the chain (jump_k: the first node's
    -- dependency) and the move from the node alone (own_k: its own dependency, the node before it when it
    -- continues a chain: that one is never entered, as it has the node's step, and a node is entered alone
    -- only from another step)
    SELECT n.run_id, n.rank, n.k, n.step, n.head_k, h.pred_k AS jump_k, h.via_launch AS jump_via_launch,
           CASE WHEN n.k = n.head_k THEN h.pred_k ELSE n.k - 1 END AS own_k,
           COALESCE(n.edge = 'launch', FALSE) AS own_via_launch
    FROM (SELECT run_id, rank, k FROM starts UNION SELECT run_id, rank, pred_k FROM heads) x
    JOIN nodes n ON n.run_id = x.run_id AND n.rank = x.rank AND n.k = x.k
    JOIN heads h ON h.run_id = n.run_id AND h.rank = n.rank AND h.k = n.head_k
),
walk AS (
    -- one row per move: the node it enters (entry_k, at entry_pos) in the chain chain_head, and the
    -- first node it passes (first_k, at head_pos): the chain's first node, or the entered node alone
    SELECT s.run_id, s.rank, s.step, e.head_k AS chain_head, e.k AS entry_k, e.head_k AS first_k,
           0 AS entry_pos, e.k - e.head_k AS head_pos, e.jump_k AS next_k, e.jump_via_launch AS next_via_launch
    FROM starts s
    JOIN entries e ON e.run_id = s.run_id AND e.rank = s.rank AND e.k = s.k
    UNION ALL
    -- follow the chosen dependency while it stays in the step (a launch call always does); a node of
    -- another step (a launch call) is entered alone
    SELECT w.run_id, w.rank, w.step, e.head_k, e.k,
           CASE WHEN e.step = w.step THEN e.head_k ELSE e.k END,
           w.head_pos + 1,
           w.head_pos + 1 + CASE WHEN e.step = w.step THEN e.k - e.head_k ELSE 0 END,
           CASE WHEN e.step = w.step THEN e.jump_k ELSE e.own_k END,
           CASE WHEN e.step = w.step THEN e.jump_via_launch ELSE e.own_via_launch END
    FROM walk w
    JOIN entries e ON e.run_id = w.run_id AND e.rank = w.rank AND e.k = w.next_k
    WHERE e.step = w.step OR w.next_via_launch
),
path AS (
    -- every node the walk passed, at its position from the end of the step
    SELECT n.*, w.step AS walk_step, w.entry_pos + (w.entry_k - n.k) AS pos
    FROM walk w
    JOIN nodes n
      ON n.run_id = w.run_id AND n.rank = w.rank AND n.head_k = w.chain_head
     AND n.k >= w.first_k AND n.k <= w.entry_k
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

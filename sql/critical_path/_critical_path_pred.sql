-- _critical_path_pred (helper of critical_path): one row per node of the dependency graph
-- (dependency_edges), with the one dependency that was satisfied last (its predecessor on a critical path
-- through it). Among a node's candidates the latest choice_ns wins (the ready time clamped to the node's
-- start; see dependency_edges); ties go to, for a GPU activity, stream_order, then event_wait, then launch
-- (an inferred_wait is a candidate only when it is later than all of them; held_launch ranks with launch),
-- for a host call, host_sync (and host_wait / held_call), then thread_handoff, then program_order (a host_sync candidate always lies after the call's start, a
-- hand-off after the previous call); then to the later unclamped ready time, then the higher pred_id.
-- A host call blocked on the GPU (a sync, a blocking copy) is waiting for the GPU: the GPU work it waits on
-- is the path.
-- Columns:
--   run_id, rank    VARCHAR, INTEGER  the rank
--   node_type       VARCHAR  `gpu` (a GPU activity), `cpu` (a host CUDA call, entered at its end) or
--                   `cpu_issue` (a blocking copy call entered through the launch of its own copy: only its
--                   issuing part, before the copy, which follows program order)
--   node_id         BIGINT  kernel_id (gpu) or op_id (cpu, cpu_issue)
--   step            BIGINT  the node's step (dependency_edges.step)
--   name            VARCHAR  activity or call name
--   kind            VARCHAR  activity kind (kernel / memcpy / memset); NULL for host calls
--   stream          BIGINT  the activity's stream; NULL for host calls
--   node_start_ns   BIGINT  the node's start
--   node_end_ns     BIGINT  the node's end
--   node_lo_ns      BIGINT  where the walk leaves the node: its start, except a blocking sync call, which is
--                   left at its end (the time inside it is the sync_wait edge)
--   pred_type, pred_id  VARCHAR, BIGINT  the chosen predecessor (NULL when the node has none)
--   ready_ns        BIGINT  when that dependency was satisfied, clamped to the node's start (host_sync: to
--                   the call's end); NULL when the node has none
--   edge            VARCHAR  stream_order / event_wait / inferred_wait / launch / held_launch / host_sync /
--                   host_wait / held_call / program_order / thread_handoff
--   edge_kind       VARCHAR  the path segment kind of the edge: kernel_gap / sync_wait / launch_delay /
--                   gpu_queued / cpu
--   edge_name       VARCHAR  what the edge segment is named on the path: the launch call, the sync call or
--                   cudaStreamWaitEvent, the host op around a program-order gap; NULL for kernel gaps
--                   and inferred waits
--   edge_op_id      BIGINT  the cpu_ops op_id behind that name (NULL for kernel gaps)
CREATE OR REPLACE VIEW _critical_path_pred AS
SELECT run_id, rank, node_type, node_id, step, name, kind, stream, node_start_ns, node_end_ns, node_lo_ns,
       pred_type, pred_id,
       CASE WHEN edge IS NULL THEN NULL WHEN edge IN ('host_sync', 'held_call') THEN LEAST(ready_ns, node_end_ns)
            ELSE LEAST(ready_ns, node_start_ns) END AS ready_ns,
       edge, edge_kind, edge_name, edge_op_id
FROM (
    SELECT e.*,
           ROW_NUMBER() OVER (
               PARTITION BY e.run_id, e.rank, e.node_type, e.node_id
               ORDER BY e.choice_ns DESC NULLS LAST,
                        CASE e.edge WHEN 'inferred_wait' THEN 0 WHEN 'stream_order' THEN 1 WHEN 'event_wait' THEN 2
                                    WHEN 'launch' THEN 3 WHEN 'held_launch' THEN 3 WHEN 'host_sync' THEN 1
                                    WHEN 'held_call' THEN 1 WHEN 'host_wait' THEN 1 WHEN 'thread_handoff' THEN 2
                                    ELSE 3 END,
                        e.ready_ns DESC, e.pred_id DESC, e.edge_op_id DESC) AS rn
    FROM dependency_edges e
) ranked
WHERE rn = 1

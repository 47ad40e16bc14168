-- _whatif_edges (helper of the what-if replay, warehouse/whatif.py): one row per (node, candidate
-- dependency) of dependency_edges, with what the replay needs and the category of each GPU activity (the
-- one every analysis uses, activity_category), so that `--category` picks the same activities as the
-- report.
-- Columns:
--   run_id, rank     VARCHAR, INTEGER  the rank
--   node_type        VARCHAR  gpu / cpu / cpu_issue (dependency_edges)
--   node_id          BIGINT  kernel_id (gpu) or op_id
--   step             BIGINT  the node's step (NULL outside every step)
--   name             VARCHAR  activity or call name
--   stream           BIGINT  the activity's stream (NULL for host calls)
--   node_start_ns, node_end_ns  BIGINT  the node
--   pred_type, pred_id  VARCHAR, BIGINT  the candidate dependency (NULL: the node has none)
--   ready_ns         BIGINT  when it was satisfied (unclamped)
--   choice_ns        BIGINT  the time it competes with for "satisfied last" (dependency_edges.choice_ns)
--   edge, edge_kind, edge_name  VARCHAR  the dependency's type, its path segment kind and name
--   category         VARCHAR  activity_category.category of a GPU activity; NULL for host calls
CREATE OR REPLACE VIEW _whatif_edges AS
SELECT d.run_id, d.rank, d.node_type, d.node_id, d.step, d.name, d.stream, d.node_start_ns, d.node_end_ns,
       d.pred_type, d.pred_id, d.ready_ns, d.choice_ns, d.edge, d.edge_kind, d.edge_name,
       CASE WHEN d.node_type = 'gpu' THEN coalesce(c.category, 'other') END AS category
FROM dependency_edges d
LEFT JOIN activity_category c
  ON d.node_type = 'gpu' AND c.run_id = d.run_id AND c.rank = d.rank AND c.kernel_id = d.node_id

-- report_whatif_edges: one row per _whatif_edges row of a step a run report shows (report_steps, any pick),
-- every rank's: the what-if replay's input for the report's predicted gains (reports/gains.py ->
-- warehouse.whatif.load_graphs reads the step's nodes of every rank, so that a collective waits for its
-- peers). Kept per run, so that a derived run's report reads these rows instead of computing
-- dependency_edges over the whole run; the replay reads them only where the connection holds them for the
-- run (kept, or computed once for the report) and the step is a report step, else _whatif_edges, whose rows
-- of that step are these. A node outside every step (step NULL) is in no report step.
-- Columns: those of _whatif_edges, unchanged:
--   run_id, rank     VARCHAR, INTEGER  the rank
--   node_type        VARCHAR  gpu / cpu / cpu_issue (dependency_edges)
--   node_id          BIGINT  kernel_id (gpu) or op_id
--   step             BIGINT  the node's step: a step of report_steps
--   name             VARCHAR  activity or call name
--   stream           BIGINT  the activity's stream (NULL for host calls)
--   node_start_ns, node_end_ns  BIGINT  the node
--   pred_type, pred_id  VARCHAR, BIGINT  the candidate dependency (NULL: the node has none)
--   ready_ns         BIGINT  when it was satisfied (unclamped)
--   choice_ns        BIGINT  the time it competes with for "satisfied last" (dependency_edges.choice_ns)
--   edge, edge_kind, edge_name  VARCHAR  the dependency's type, its path segment kind and name
--   category         VARCHAR  activity_category.category of a GPU activity; NULL for host calls
-- materialized: per_run   rows kept per run (warehouse/derived.py: `tracehouse derive`): the report's what-if gains
CREATE OR REPLACE VIEW report_whatif_edges AS
SELECT e.run_id, e.rank, e.node_type, e.node_id, e.step, e.name, e.stream, e.node_start_ns, e.node_end_ns,
       e.pred_type, e.pred_id, e.ready_ns, e.choice_ns, e.edge, e.edge_kind, e.edge_name, e.category
FROM _whatif_edges AS e
WHERE e.step IN (SELECT r.step FROM report_steps AS r WHERE r.run_id = e.run_id)

SELECT node_type, node_id, pred_type, pred_id, ready_ns, choice_ns, edge, edge_kind, edge_name
FROM dependency_edges
ORDER BY node_type, node_id, edge, pred_id

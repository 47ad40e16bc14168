SELECT node_type, node_id, step, node_lo_ns, pred_type, pred_id, ready_ns, choice_ns, edge, edge_kind, edge_name,
       edge_op_id
FROM dependency_edges
ORDER BY node_type, node_id, edge, pred_id

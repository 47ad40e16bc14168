-- Stage 3c: host ranges (cpu_op, user_annotation, cuda_runtime, cuda_driver, ...) with their nesting.
-- Nesting per (pid, tid) by a sweep: +1 at each start, -1 at each end, ordered by time with ends
-- before starts at the same instant (adjacent ranges do not nest) and longer ranges first among equal
-- starts (the outer one opens first). The running sum just before a range opens is its depth; its
-- parent is the last range opened before it at depth - 1 (ASOF join), which, for properly nested
-- ranges, is the one that encloses it.
CREATE OR REPLACE TABLE host_ranges AS
SELECT ev_id AS op_id, pid, tid, cat, cat_lc, name, start_ns, dur_ns, start_ns + dur_ns AS end_ns,
       external_id, correlation, stream, input_dims, input_types, sequence_number, fwd_thread_id,
       wait_on_stream, wait_on_event_corr, sync_kind, collective_name, in_msg_nelems, out_msg_nelems,
       group_size, dtype, process_group
FROM events
WHERE ph = 'X' AND gpu_kind IS NULL AND cat_lc <> 'python_function' AND start_ns IS NOT NULL;

CREATE OR REPLACE TABLE host_depth AS
WITH marks AS (
    SELECT pid, tid, start_ns AS t, 1 AS ord, -dur_ns AS tie, op_id, 1 AS delta FROM host_ranges
    UNION ALL
    -- a zero-length range closes right after it opens, not before
    SELECT pid, tid, end_ns AS t, CASE WHEN dur_ns = 0 THEN 2 ELSE 0 END AS ord, 0 AS tie,
           NULL AS op_id, -1 AS delta
    FROM host_ranges
),
swept AS (
    SELECT op_id, delta,
           sum(delta) OVER (PARTITION BY pid, tid ORDER BY t, ord, tie, op_id
                            ROWS UNBOUNDED PRECEDING) - delta AS depth
    FROM marks
)
SELECT op_id, greatest(depth, 0) AS depth FROM swept WHERE op_id IS NOT NULL;

-- the parent, found on a narrow (op_id, pid, tid, depth, start_ns) table: the ASOF join sorts less
CREATE OR REPLACE TABLE host_parent AS
WITH nest AS (
    SELECT h.op_id, h.pid, h.tid, h.start_ns, d.depth FROM host_ranges h JOIN host_depth d USING (op_id)
)
SELECT c.op_id, c.depth, CASE WHEN c.depth > 0 THEN p.op_id END AS parent_op_id
FROM nest c
ASOF LEFT JOIN nest p
  ON c.pid = p.pid AND c.tid = p.tid AND c.depth - 1 = p.depth AND c.start_ns >= p.start_ns;

CREATE OR REPLACE TABLE cpu_ops AS
SELECT c.op_id, c.pid, c.tid, c.cat, c.name, c.start_ns, c.dur_ns, n.parent_op_id,
       n.depth, c.external_id, c.correlation, c.stream, c.input_dims, c.input_types,
       c.sequence_number, c.fwd_thread_id, c.wait_on_stream, c.wait_on_event_corr, c.sync_kind,
       c.collective_name, c.in_msg_nelems, c.out_msg_nelems, c.group_size, c.dtype, c.process_group
FROM host_ranges c JOIN host_parent n USING (op_id);

-- Stage 3c: host ranges (cpu_op, user_annotation, cuda_runtime, cuda_driver, ...) with their nesting.
-- Nesting per (pid, tid) by a sweep: +1 at each start, -1 at each end, ordered by time with ends
-- before starts at the same instant (adjacent ranges do not nest) and longer ranges first among equal
-- starts (the outer one opens first). The running sum just before a range opens is its depth; its
-- parent is the last range opened before it at depth - 1 (ASOF join), which, for properly nested
-- ranges, is the one that encloses it.
-- (the nesting is worked out on narrow tables: op_id, thread, times, depth; the wide rows are read once)
CREATE OR REPLACE TABLE host_ranges AS
SELECT ev_id AS op_id, pid, tid, start_ns, dur_ns, start_ns + dur_ns AS end_ns
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

-- the parent: the last range opened before it, one level up, on the same thread
CREATE OR REPLACE TABLE host_parent AS
WITH nest AS (
    SELECT h.op_id, h.pid, h.tid, h.start_ns, d.depth FROM host_ranges h JOIN host_depth d USING (op_id)
)
SELECT c.op_id, c.depth, CASE WHEN c.depth > 0 THEN p.op_id END AS parent_op_id
FROM nest c
ASOF LEFT JOIN nest p
  ON c.pid = p.pid AND c.tid = p.tid AND c.depth - 1 = p.depth AND c.start_ns >= p.start_ns;

CREATE OR REPLACE TABLE cpu_ops AS
SELECT e.ev_id AS op_id, e.pid, e.tid, e.cat, e.name, e.start_ns, e.dur_ns, n.parent_op_id,
       n.depth, e.external_id, e.correlation, e.stream, e.input_dims, e.input_types,
       e.sequence_number, e.fwd_thread_id, e.wait_on_stream, e.wait_on_event_corr, e.sync_kind,
       e.collective_name, e.in_msg_nelems, e.out_msg_nelems, e.group_size, e.dtype, e.process_group
FROM events e JOIN host_parent n ON n.op_id = e.ev_id;

-- invariant_violations: one row per broken invariant of the warehouse (empty when all hold); what
-- `tracehouse check` reports and the tests assert on every ingested trace.
-- Columns:
--   check_name   VARCHAR  which invariant: unique_kernel_id, unique_op_id, unique_frame_id, unique_run_id,
--                negative_duration, flow_source_missing, flow_destination_missing,
--                category_shares_not_one, timeline_identity
--   run_id       VARCHAR  the run where it broke
--   detail       VARCHAR  what broke, in words
CREATE OR REPLACE VIEW invariant_violations AS
SELECT 'unique_kernel_id' AS check_name, run_id, 'rank ' || rank || ' kernel_id ' || kernel_id || ' appears ' || count(*) || ' times' AS detail
FROM kernels GROUP BY run_id, rank, kernel_id HAVING count(*) > 1
UNION ALL
SELECT 'unique_op_id', run_id, 'rank ' || rank || ' op_id ' || op_id || ' appears ' || count(*) || ' times'
FROM cpu_ops GROUP BY run_id, rank, op_id HAVING count(*) > 1
UNION ALL
SELECT 'unique_frame_id', run_id, 'rank ' || rank || ' frame_id ' || frame_id || ' appears ' || count(*) || ' times'
FROM python_frames GROUP BY run_id, rank, frame_id HAVING count(*) > 1
UNION ALL
SELECT 'unique_run_id', run_id, 'run appears ' || count(*) || ' times' FROM runs GROUP BY run_id HAVING count(*) > 1
UNION ALL
SELECT 'negative_duration', run_id, 'kernel ' || kernel_id || ' has dur_ns ' || dur_ns FROM kernels WHERE dur_ns < 0
UNION ALL
SELECT 'negative_duration', run_id, 'cpu op ' || op_id || ' has dur_ns ' || dur_ns FROM cpu_ops WHERE dur_ns < 0
UNION ALL
SELECT 'flow_source_missing', f.run_id, 'flow ' || f.flow_id || ' starts at event ' || f.src_event_id || ', which is not in cpu_ops'
FROM flows AS f
WHERE f.src_event_id IS NOT NULL
  AND NOT EXISTS (SELECT 1 FROM cpu_ops AS o WHERE o.run_id = f.run_id AND o.rank = f.rank AND o.op_id = f.src_event_id)
  AND NOT EXISTS (SELECT 1 FROM kernels AS k WHERE k.run_id = f.run_id AND k.rank = f.rank AND k.kernel_id = f.src_event_id)
UNION ALL
SELECT 'flow_destination_missing', f.run_id, 'flow ' || f.flow_id || ' ends at event ' || f.dst_event_id || ', which is in no table'
FROM flows AS f
WHERE f.dst_event_id IS NOT NULL
  AND NOT EXISTS (SELECT 1 FROM cpu_ops AS o WHERE o.run_id = f.run_id AND o.rank = f.rank AND o.op_id = f.dst_event_id)
  AND NOT EXISTS (SELECT 1 FROM kernels AS k WHERE k.run_id = f.run_id AND k.rank = f.rank AND k.kernel_id = f.dst_event_id)
UNION ALL
SELECT 'category_shares_not_one', run_id, 'phase ' || phase || ': shares sum to ' || sum(share)
FROM category_summary GROUP BY run_id, phase HAVING abs(sum(share) - 1) > 1e-9 AND sum(gpu_time_ns) > 0
UNION ALL
SELECT 'timeline_identity', run_id,
       'rank ' || rank || ' device ' || device || ' step ' || coalesce(CAST(step AS VARCHAR), 'all') || ' ' || variant
       || ': compute + exposed comm + exposed memory + idle != span'
FROM gpu_timeline
WHERE compute_ns + exposed_comm_ns + exposed_memory_ns + idle_ns <> span_ns;

-- collective_bandwidth: one row per collective kernel whose message size the trace records (NCCL/RCCL
-- kernels carry `Collective name`, `In msg nelems`, `Out msg nelems`, `dtype`, `Group size`; a custom
-- all-reduce op such as symm_mem::multimem_all_reduce_, custom_ar or cross_device_reduce gets its size from
-- input 0's Input Dims and type, and its group size from the run's tp, else world_size): the bandwidth it
-- reached, by nccl-tests' definitions (PERFORMANCE.md of nccl-tests):
--   algbw = S / t, S the collective's data size: all-reduce, broadcast, reduce, all-to-all, send/recv:
--           the input (In msg nelems × element size); all-gather: the gathered output (Out msg nelems);
--           reduce-scatter: the input (n × the output)
--   busbw = algbw × factor, the bandwidth each rank's link carries, comparable to the link's peak:
--           all-reduce 2(n-1)/n; all-gather, reduce-scatter, all-to-all (n-1)/n; broadcast, reduce,
--           send/recv 1 (n = group size)
-- t is the kernel's GPU duration, which includes any wait for the slowest rank to arrive (rank_skew
-- says which calls waited): a low busbw on a call that waited is skew, not the link.
-- Columns:
--   run_id, rank, kernel_id   VARCHAR, INTEGER, BIGINT  the kernel (for a custom all-reduce op, its first
--                            kernel)
--   step, phase               BIGINT, VARCHAR  its step and phase
--   name                      VARCHAR  the kernel name (custom: the op name)
--   collective                VARCHAR  normalized: allreduce, allgather, reducescatter, broadcast, reduce,
--                             alltoall, sendrecv (as recorded when none of these)
--   size_source               VARCHAR  nccl (kernel args) or op_dims (custom all-reduce)
--   dtype                     VARCHAR  element type as recorded
--   elt_bytes                 INTEGER  its size in bytes
--   group_size                INTEGER  ranks in the collective (n)
--   bytes                     BIGINT  S (above)
--   dur_ns                    HUGEINT  t
--   algbw_gbps                DOUBLE  S / t in GB/s (10^9 bytes/s): bytes per ns
--   bus_factor                DOUBLE  the factor above
--   busbw_gbps                DOUBLE  algbw_gbps × bus_factor
--   size_bucket_bytes         BIGINT  the message-size bucket: the largest power of two <= bytes
--   link_gbps                 DOUBLE  the link's peak per direction (_run_device; NULL: not known)
--   pct_of_link               DOUBLE  100 × busbw_gbps / link_gbps
CREATE OR REPLACE VIEW collective_bandwidth AS
WITH nccl AS (
    SELECT run_id, rank, kernel_id, step, phase, name, lower(replace(coalesce(collective_name, ''), '_', '')) AS coll,
           'nccl' AS size_source, dtype, group_size, in_msg_nelems, out_msg_nelems, dur_ns
    FROM kernels
    WHERE kind = 'kernel' AND in_msg_nelems IS NOT NULL AND group_size IS NOT NULL AND collective_name IS NOT NULL
),
custom AS (
    SELECT k.run_id, k.rank, min(k.kernel_id) AS kernel_id, any_value(k.step) AS step, any_value(k.phase) AS phase,
           o.name, 'allreduce' AS coll, 'op_dims' AS size_source,
           json_extract_string(o.input_types, '$[0]') AS dtype,
           any_value(coalesce(r.tp, r.world_size)) AS group_size,
           any_value(TRY_CAST(list_reduce(TRY_CAST(json_extract(o.input_dims, '$[0]') AS BIGINT[]), lambda a, b: a * b) AS BIGINT)) AS in_msg_nelems,
           NULL AS out_msg_nelems, sum(k.dur_ns) AS dur_ns
    FROM kernels AS k
    JOIN cpu_ops AS o ON o.run_id = k.run_id AND o.rank = k.rank AND o.op_id = k.cpu_op_id
    JOIN runs AS r ON r.run_id = k.run_id
    WHERE k.kind = 'kernel' AND k.in_msg_nelems IS NULL
      AND regexp_matches(o.name, '(?i)(multimem_all_reduce|one_shot_all_reduce|two_shot_all_reduce|custom_ar|all_reduce_(reg|unreg)|cross_device_reduce|^_C_custom_ar::)')
    GROUP BY k.run_id, k.rank, o.op_id, o.name, o.input_types
),
calls AS (
    SELECT *,
           CASE WHEN coll LIKE '%allreduce%' THEN 'allreduce'
                WHEN coll LIKE '%allgather%' THEN 'allgather'
                WHEN coll LIKE '%reducescatter%' THEN 'reducescatter'
                WHEN coll LIKE '%alltoall%' THEN 'alltoall'
                WHEN coll LIKE '%broadcast%' THEN 'broadcast'
                WHEN coll IN ('reduce', '_reduce', 'reduceoop') THEN 'reduce'
                WHEN coll IN ('send', 'recv', 'sendrecv') THEN 'sendrecv'
                ELSE coll END AS collective,
           CASE lower(replace(dtype, 'c10::', ''))
                WHEN 'float' THEN 4 WHEN 'float32' THEN 4 WHEN 'double' THEN 8 WHEN 'bfloat16' THEN 2 WHEN 'half' THEN 2
                WHEN 'float16' THEN 2 WHEN 'long' THEN 8 WHEN 'int64' THEN 8 WHEN 'long int' THEN 8 WHEN 'int' THEN 4
                WHEN 'int32' THEN 4 WHEN 'byte' THEN 1 WHEN 'char' THEN 1 WHEN 'bool' THEN 1 WHEN 'uint8' THEN 1
                WHEN 'int8' THEN 1 WHEN 'float8_e4m3fn' THEN 1 WHEN 'float8_e5m2' THEN 1 WHEN 'float8_e4m3fnuz' THEN 1
                WHEN 'float8_e5m2fnuz' THEN 1 END AS elt_bytes
    FROM (SELECT * FROM nccl UNION ALL SELECT * FROM custom)
),
sized AS (
    SELECT *,
           CASE WHEN collective = 'allgather' THEN coalesce(out_msg_nelems, in_msg_nelems * group_size)
                ELSE in_msg_nelems END * elt_bytes AS bytes,
           CASE WHEN collective = 'allreduce' THEN 2.0 * (group_size - 1) / group_size
                WHEN collective IN ('allgather', 'reducescatter', 'alltoall') THEN 1.0 * (group_size - 1) / group_size
                WHEN collective IN ('broadcast', 'reduce', 'sendrecv') THEN 1.0 END AS bus_factor
    FROM calls
    WHERE elt_bytes IS NOT NULL AND group_size >= 1
)
SELECT s.run_id, s.rank, s.kernel_id, s.step, s.phase, s.name, s.collective, s.size_source, s.dtype, s.elt_bytes,
       s.group_size, s.bytes, s.dur_ns,
       CAST(s.bytes AS DOUBLE) / s.dur_ns AS algbw_gbps, s.bus_factor,
       CAST(s.bytes AS DOUBLE) / s.dur_ns * s.bus_factor AS busbw_gbps,
       CAST(pow(2, floor(log2(s.bytes))) AS BIGINT) AS size_bucket_bytes,
       d.link_gbps,
       100.0 * CAST(s.bytes AS DOUBLE) / s.dur_ns * s.bus_factor / d.link_gbps AS pct_of_link
FROM sized AS s
LEFT JOIN _run_device AS d ON d.run_id = s.run_id
WHERE s.bytes > 0 AND s.dur_ns > 0;

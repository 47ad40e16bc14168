-- Stage 2b: type every decoded event of one rank. Run by ingest/decode.py, not a numbered stage: on the
-- fast path `raw_events` is a view over DuckDB's JSON reader, so the file is read and typed in one pass.
-- events: one row per event of the file (ev_id = its position in the file), times in integer ns.
-- start_ns/dur_ns come from the exact decimal µs text (DECIMAL(38,3) * 1000), never from a float;
-- a negative duration is clamped to 0 and flagged (dur_clamped) so that ingest can count it.
-- Out of range (never from a real profiler; the guards keep int64 ns from overflowing): a timestamp
-- beyond ±9e15 µs (year 2255) is dropped like a missing one (ts_out_of_range), a duration over one day
-- (8.64e10 µs) is set to 0 (dur_absurd); both are counted (ingest/decode.py event_warnings).
-- name_cut: a name over 65,536 characters (no profiler writes one; a 100 MB name made every rule that
-- reads names take seconds per view) is cut to its first 65,536 and the md5 of the whole, so two such
-- names stay two (counted).
-- dur_missing: a complete event (ph X) without a duration (read as 0, counted). Extra `args` columns a
-- caller asked for (ingest/capture.py) are appended to the select list (ingest/decode.py type_events_sql).
-- cat is the category in its one modern spelling (kineto_category, ingest/sql/categories.sql), whatever
-- version wrote the file; cat_lc is it in lower case. The spelling as written is not kept: every later
-- stage reads one spelling, so none can branch on the version (the file and its hash stay in `runs`).
-- device/stream of the autograd profiler's GPU events (pid "CUDA functions", tid = the device; no
-- stream recorded): the device is the tid, the stream 0.
-- This file is the SELECT alone: decode makes `events` of it (or, over the array's pieces, each piece's table).
SELECT
    ev_id,
    ph,
    kineto_category(ph, cat, pid) AS cat,
    lower(coalesce(kineto_category(ph, cat, pid), '')) AS cat_lc,
    CASE WHEN length(name) > 65536 THEN left(name, 65536) || ' [cut; md5 of the whole: ' || md5(name) || ']'
         ELSE coalesce(name, '') END AS name,
    pid,
    tid,
    CASE WHEN abs(ts) < 9000000000000000 THEN CAST(ts * 1000 AS BIGINT) END AS start_ns,
    CASE WHEN dur > 0 AND dur <= 86400000000 THEN CAST(dur * 1000 AS BIGINT) ELSE 0 END AS dur_ns,
    coalesce(dur < 0, false) AS dur_clamped,
    coalesce(dur > 86400000000, false) AS dur_absurd,
    coalesce(abs(ts) >= 9000000000000000, false) AS ts_out_of_range,
    coalesce(length(name) > 65536, false) AS name_cut,
    id AS flow_id,
    bp,
    CASE
        WHEN ph IS DISTINCT FROM 'X' THEN NULL
        WHEN kineto_category(ph, cat, pid) = 'kernel' THEN 'kernel'
        WHEN kineto_category(ph, cat, pid) = 'gpu_memcpy' THEN 'memcpy'
        WHEN kineto_category(ph, cat, pid) = 'gpu_memset' THEN 'memset'
    END AS gpu_kind,
    TRY_CAST(external_id AS BIGINT) AS external_id,
    TRY_CAST(correlation AS BIGINT) AS correlation,
    coalesce(TRY_CAST(stream AS BIGINT),
             CASE WHEN cat IS NULL AND pid IN ('CUDA functions', 'GPU functions') THEN 0 END) AS stream,
    coalesce(TRY_CAST(device AS INTEGER),
             CASE WHEN cat IS NULL AND pid IN ('CUDA functions', 'GPU functions') THEN TRY_CAST(tid AS INTEGER) END)
        AS device,
    grid,
    block,
    TRY_CAST(registers AS INTEGER) AS registers,
    TRY_CAST(shared_memory AS BIGINT) AS shared_memory,
    TRY_CAST(occupancy AS DOUBLE) AS occupancy,
    TRY_CAST(bytes AS BIGINT) AS bytes,
    TRY_CAST(python_id AS BIGINT) AS python_id,
    TRY_CAST(python_parent_id AS BIGINT) AS python_parent_id,
    input_dims,
    input_types,
    collective_name,
    TRY_CAST(in_msg_nelems AS BIGINT) AS in_msg_nelems,
    TRY_CAST(out_msg_nelems AS BIGINT) AS out_msg_nelems,
    TRY_CAST(group_size AS INTEGER) AS group_size,
    dtype,
    process_group,
    process_group_desc,
    meta_name,
    TRY_CAST(sequence_number AS BIGINT) AS sequence_number,
    TRY_CAST(fwd_thread_id AS BIGINT) AS fwd_thread_id,
    TRY_CAST(wait_on_stream AS BIGINT) AS wait_on_stream,
    TRY_CAST(wait_on_event_corr AS BIGINT) AS wait_on_event_corr,
    sync_kind,
    nullif(TRY_CAST(graph_id AS BIGINT), 0) AS graph_id,
    nullif(TRY_CAST(graph_node_id AS BIGINT), 0) AS graph_node_id,
    module_fqn,
    (ph = 'X' AND ts IS NOT NULL AND dur IS NULL) AS dur_missing
FROM raw_events

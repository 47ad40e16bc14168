-- Stage 3b: flows (`s`/`f` pairs) bound to the slices they start and end in.
-- A flow endpoint binds to the slice on its (pid, tid) that starts last at or before it and still
-- covers it. CPU->GPU flows (`ac2g`: every version's spelling, ingest/sql/categories.sql) start on a
-- runtime/driver call (else, where the trace has none there, on the host range around the start: the
-- autograd profiler's flows start on the op itself) and end on a GPU activity; other flows (`fwdbwd`,
-- ...) bind to any host slice.
CREATE OR REPLACE TABLE flow_points AS
SELECT
    ev_id, flow_id, cat, ph, pid, tid, start_ns AS at_ns,
    cat_lc = 'ac2g' AS cpu_to_gpu
FROM events
WHERE ph IN ('s', 'f') AND flow_id IS NOT NULL AND start_ns IS NOT NULL;

-- Ties: where several candidate slices start at the same instant (a zero-length cudaFuncSetAttribute
-- and the cudaLaunchKernel it precedes, in the same microsecond), the ASOF join below would pick one of
-- them arbitrarily. The endpoint binds to the longest of them (the launch; a zero-length call ends where
-- it starts), then to the later event in the file: one target per (pid, tid, kind, start).
CREATE OR REPLACE TABLE flow_targets AS
WITH candidates AS (
    SELECT ev_id, pid, tid, start_ns, start_ns + dur_ns AS end_ns,
           CASE WHEN gpu_kind IS NOT NULL THEN 'gpu'
                WHEN cat_lc IN ('cuda_runtime', 'cuda_driver', 'hip_runtime') THEN 'api'
                ELSE 'host' END AS target
    FROM events
    WHERE ph = 'X' AND start_ns IS NOT NULL AND cat_lc <> 'python_function'
)
SELECT ev_id, pid, tid, start_ns, end_ns, target
FROM candidates
QUALIFY row_number() OVER (PARTITION BY pid, tid, target, start_ns
                           ORDER BY coalesce(end_ns, start_ns) DESC, ev_id DESC) = 1;

CREATE OR REPLACE TABLE flow_bound AS
WITH bound AS (
    SELECT p.flow_id, p.cat, p.ph, p.at_ns, p.pid, p.tid, p.cpu_to_gpu,
           CASE WHEN t.end_ns >= p.at_ns THEN t.ev_id END AS event_id
    FROM flow_points p
    ASOF LEFT JOIN flow_targets t
      ON p.pid = t.pid AND p.tid = t.tid
     AND t.target = CASE WHEN NOT p.cpu_to_gpu THEN 'host' WHEN p.ph = 's' THEN 'api' ELSE 'gpu' END
     AND p.at_ns >= t.start_ns
),
-- a CPU->GPU flow that starts where no runtime call is: on the host range around it
unlaunched AS (SELECT * FROM bound WHERE event_id IS NULL AND cpu_to_gpu AND ph = 's'),
on_host AS (
    SELECT u.flow_id, u.cat, u.ph, u.at_ns, CASE WHEN h.end_ns >= u.at_ns THEN h.ev_id END AS event_id
    FROM unlaunched u
    ASOF LEFT JOIN (SELECT * FROM flow_targets WHERE target = 'host') h
      ON u.pid = h.pid AND u.tid = h.tid AND u.at_ns >= h.start_ns
)
SELECT flow_id, cat, ph, at_ns, event_id FROM bound
WHERE NOT (event_id IS NULL AND cpu_to_gpu AND ph = 's')
UNION ALL
SELECT * FROM on_host;

CREATE OR REPLACE TABLE flows AS
SELECT
    flow_id,
    cat AS kind,
    max(event_id) FILTER (WHERE ph = 's') AS src_event_id,
    max(event_id) FILTER (WHERE ph = 'f') AS dst_event_id,
    min(at_ns) FILTER (WHERE ph = 's') AS src_ns,
    min(at_ns) FILTER (WHERE ph = 'f') AS dst_ns
FROM flow_bound
GROUP BY flow_id, cat;

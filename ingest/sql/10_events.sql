-- Stage 3a: runtime and driver calls: the host side of a launch, a copy, a sync or an event record/wait.
-- (The typed `events` table itself comes from ingest/sql/type_events.sql, run by ingest/decode.py.)
CREATE OR REPLACE TABLE host_api AS
SELECT ev_id, pid, tid, name, start_ns, dur_ns, correlation
FROM events
WHERE ph = 'X' AND cat_lc IN ('cuda_runtime', 'cuda_driver', 'hip_runtime');

-- gpu_timeline_run: the easy question "where did each GPU's time go over the whole run", without the
-- pitfalls of gpu_timeline. One row per (run_id, rank, device): the `exact` variant (every GPU activity)
-- over the whole rank (gpu_timeline's step NULL rows), so a plain sum() over it counts each nanosecond
-- once per device. gpu_timeline itself also has one row per step and per variant (`linked`, `hta`, ...):
-- summing it without `variant = 'exact' AND step IS NULL` counts the same time several times.
-- The identity compute_ns + exposed_comm_ns + exposed_memory_ns + idle_ns = span_ns holds exactly.
-- Percentages here are 0-100 (of span_ns); `share` columns elsewhere are 0-1.
-- Columns:
--   run_id, rank, device         VARCHAR, INTEGER, INTEGER  the device (a rank may drive several)
--   activities                   BIGINT  number of GPU activities of the device in the trace
--   first_start_ns, last_end_ns  BIGINT  first GPU start and last GPU end of the device
--   span_ns                      BIGINT  last_end_ns - first_start_ns
--   busy_ns                      HUGEINT  length of the union of all activities
--   compute_ns                   HUGEINT  length of the union of compute activities (not communication, not
--                            memory)
--   comm_ns                      HUGEINT  length of the union of communication activities
--   exposed_comm_ns              HUGEINT  communication not under compute
--   exposed_memory_ns            HUGEINT  memory activity under neither compute nor communication
--   idle_ns                      HUGEINT  span_ns - busy_ns: no activity on any stream of the device
--   busy_pct                     DOUBLE  100 * busy_ns / span_ns (NULL when span_ns is 0): the GPU busy % of
--                                steps.sql (busy time in a window / the window) with the whole rank as the
--                                one window
--   idle_pct                     DOUBLE  100 * idle_ns / span_ns (NULL when span_ns is 0)
--   exposed_comm_pct             DOUBLE  100 * exposed_comm_ns / span_ns (NULL when span_ns is 0)
--   comm_compute_overlap_pct     DOUBLE  |comm ∩ compute| / |comm| * 100 (NULL without communication)
CREATE OR REPLACE VIEW gpu_timeline_run AS
WITH whole AS (
    SELECT run_id, rank, device, activities, first_start_ns, last_end_ns, span_ns, busy_ns, compute_ns, comm_ns,
           exposed_comm_ns, exposed_memory_ns, idle_ns, comm_compute_overlap_pct
    FROM gpu_timeline
    WHERE variant = 'exact' AND step IS NULL
)
SELECT run_id, rank, device, activities, first_start_ns, last_end_ns, span_ns, busy_ns, compute_ns, comm_ns,
       exposed_comm_ns, exposed_memory_ns, idle_ns,
       100.0 * busy_ns / nullif(span_ns, 0) AS busy_pct,
       100.0 * idle_ns / nullif(span_ns, 0) AS idle_pct,
       100.0 * exposed_comm_ns / nullif(span_ns, 0) AS exposed_comm_pct,
       comm_compute_overlap_pct
FROM whole

-- kernel_overlap: one row per GPU activity: how much of it ran alone on its device and how much was
-- hidden under work on other streams.
-- Method, in two ordered passes (no range join). First, per stream in start order, each activity keeps
-- the part of it that no earlier activity of its stream covered: [max(start, latest end before it), end)
-- (empty when that is not after its start). These pieces are disjoint and their union is the time the
-- stream was busy; likewise the pieces of its compute activities among themselves. Then, per device, a
-- sweep over the pieces' starts (+1) and ends (-1) counts the busy streams and the streams running
-- compute, and carries three running totals: the time when exactly one stream was busy (exclusive),
-- when at least one and when at least two streams ran compute. The activities' own start and end are
-- points of the same sweep (a piece usually starts and ends there), so each activity's share of a total
-- is the total at its end minus the total at its start.
-- Columns:
--   run_id, rank, kernel_id, device, stream, step, phase, name, category, dur_ns   VARCHAR, INTEGER, BIGINT, INTEGER, BIGINT, BIGINT, VARCHAR, VARCHAR, VARCHAR, BIGINT
--                            the activity
--   exclusive_ns              HUGEINT  time while no other stream of the device was busy
--   stream_exclusive_ns       HUGEINT  the part of exclusive_ns in the activity's own piece (the part of it
--                             that no earlier activity of its stream covered). Two activities of one stream
--                             can overlap (programmatic dependent launch on Hopper/Blackwell: b200_eager has
--                             74 such pairs); each one's exclusive_ns counts the shared time, so a sum of
--                             exclusive_ns over a stream counts it twice and can exceed the stream's busy
--                             time. Summed over a stream (or a stream's activities in a step) this column is
--                             the stream's exclusive time, never more than its busy time
--   hidden_ns                 HUGEINT  dur_ns - exclusive_ns: time while another stream was busy too
--   hidden_under_compute_ns   HUGEINT  time while another stream ran compute (not communication, not memory)
--   exclusive_ratio, hidden_ratio   DOUBLE  the two as fractions of dur_ns (NULL for zero-length activities)
CREATE OR REPLACE VIEW kernel_overlap AS
WITH acts AS (
    SELECT run_id, rank, kernel_id, device, stream, step, phase_key AS phase, name, category, start_ns,
           end_ns, dur_ns, kind = 'kernel' AND category <> 'communication' AS is_compute
    FROM _kernel_facts
),
ordered AS (
    -- per stream in start order: the latest end before each activity, over all / compute activities
    -- (an activity that does not end after its start never extends past a later one's start)
    SELECT run_id, rank, device, kernel_id, start_ns, end_ns, is_compute,
           max(end_ns) OVER before AS prev_end,
           max(CASE WHEN is_compute THEN end_ns END) OVER before AS prev_compute_end
    FROM acts
    WINDOW before AS (PARTITION BY run_id, rank, device, stream ORDER BY start_ns, kernel_id
                      ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING)
),
pieces AS (
    SELECT run_id, rank, device, kernel_id, start_ns, end_ns,
           greatest(start_ns, coalesce(prev_end, start_ns)) AS busy_from,
           CASE WHEN is_compute THEN greatest(start_ns, coalesce(prev_compute_end, start_ns)) END AS compute_from
    FROM ordered
),
marks AS (
    -- the activity's start (point 1) and end (point 2), with the piece edges that fall there; `piece` marks
    -- the rows that bound the activity's own piece (its start when the piece starts there, the piece's
    -- later start, its end), for the stream totals
    SELECT run_id, rank, device, kernel_id, start_ns AS t, 1 AS point,
           CASE WHEN end_ns > busy_from AND busy_from = start_ns THEN 1 ELSE 0 END AS d_busy,
           CASE WHEN end_ns > compute_from AND compute_from = start_ns THEN 1 ELSE 0 END AS d_compute,
           CASE WHEN end_ns > busy_from AND busy_from = start_ns THEN 1 ELSE 0 END AS piece
    FROM pieces
    UNION ALL
    SELECT run_id, rank, device, kernel_id, end_ns, 2,
           CASE WHEN end_ns > busy_from THEN -1 ELSE 0 END,
           CASE WHEN end_ns > compute_from THEN -1 ELSE 0 END,
           CASE WHEN end_ns > busy_from THEN 1 ELSE 0 END
    FROM pieces
    UNION ALL
    -- a piece that starts after its activity's start (an earlier activity of the stream still ran)
    SELECT run_id, rank, device, kernel_id, busy_from, 0, 1, 0, 1
    FROM pieces
    WHERE end_ns > busy_from AND busy_from > start_ns
    UNION ALL
    SELECT run_id, rank, device, kernel_id, compute_from, 3, 0, 1, 0
    FROM pieces
    WHERE end_ns > compute_from AND compute_from > start_ns
),
states AS (
    -- the state after each row; only the last row at a time has a piece of time after it (len > 0)
    SELECT run_id, rank, device, kernel_id, t, point, piece,
           sum(d_busy) OVER running AS busy_streams,
           sum(d_compute) OVER running AS compute_streams,
           lead(t) OVER running - t AS len
    FROM marks
    WINDOW running AS (PARTITION BY run_id, rank, device ORDER BY t, kernel_id, point
                       ROWS UNBOUNDED PRECEDING)
),
totals AS (
    -- the running totals before each row, i.e. their value at time t
    SELECT run_id, rank, kernel_id, point, piece,
           coalesce(sum(CASE WHEN busy_streams = 1 THEN len ELSE 0 END) OVER before, 0) AS exclusive_at,
           coalesce(sum(CASE WHEN compute_streams >= 1 THEN len ELSE 0 END) OVER before, 0) AS compute1_at,
           coalesce(sum(CASE WHEN compute_streams >= 2 THEN len ELSE 0 END) OVER before, 0) AS compute2_at
    FROM states
    WINDOW before AS (PARTITION BY run_id, rank, device ORDER BY t, kernel_id, point
                      ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING)
),
per_activity AS (
    SELECT run_id, rank, kernel_id,
           sum(CASE point WHEN 2 THEN exclusive_at WHEN 1 THEN -exclusive_at ELSE 0 END) AS exclusive_ns,
           sum(CASE point WHEN 2 THEN compute1_at WHEN 1 THEN -compute1_at ELSE 0 END) AS compute1_ns,
           sum(CASE point WHEN 2 THEN compute2_at WHEN 1 THEN -compute2_at ELSE 0 END) AS compute2_ns,
           sum(CASE WHEN piece = 0 THEN 0 WHEN point = 2 THEN exclusive_at ELSE -exclusive_at END)
               AS stream_exclusive_ns
    FROM totals
    WHERE point IN (0, 1, 2)
    GROUP BY run_id, rank, kernel_id
)
SELECT a.run_id, a.rank, a.kernel_id, a.device, a.stream, a.step, a.phase, a.name, a.category, a.dur_ns,
       coalesce(p.exclusive_ns, 0) AS exclusive_ns,
       coalesce(p.stream_exclusive_ns, 0) AS stream_exclusive_ns,
       a.dur_ns - coalesce(p.exclusive_ns, 0) AS hidden_ns,
       -- another stream ran compute: for a compute activity, a second compute stream; else any
       coalesce(CASE WHEN a.is_compute THEN p.compute2_ns ELSE p.compute1_ns END, 0) AS hidden_under_compute_ns,
       CASE WHEN a.dur_ns > 0 THEN coalesce(p.exclusive_ns, 0) / a.dur_ns END AS exclusive_ratio,
       CASE WHEN a.dur_ns > 0 THEN (a.dur_ns - coalesce(p.exclusive_ns, 0)) / a.dur_ns END AS hidden_ratio
FROM acts AS a
LEFT JOIN per_activity AS p ON p.run_id = a.run_id AND p.rank = a.rank AND p.kernel_id = a.kernel_id;

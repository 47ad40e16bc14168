-- queueing_flags: the step flag that reads step_queueing (a per-step analysis): one row per step whose first
-- GPU activity waited behind earlier work, in data_quality's columns (data_quality is the union of the flag
-- views; its header says what a flag is and names the figures).
-- Columns:
--   run_id    VARCHAR  the run
--   rank      INTEGER  the rank the flag is about; NULL for the whole run
--   step      BIGINT  the step (step_spans.step) the flag is about; NULL for the whole run or rank
--   flag      VARCHAR  the flag's name (below)
--   severity  VARCHAR  error / warning / info
--   affects   VARCHAR[]  the report figures the flag concerns (data_quality's header names them)
--   evidence  MAP(VARCHAR, DOUBLE)  the numbers the flag rests on (name -> value; durations in ns, shares as
--             fractions of 1)
--   message   VARCHAR  one line: what is wrong and what to do about it
CREATE OR REPLACE VIEW queueing_flags AS
-- flag gpu_queueing (warning): the step's first GPU activity started 1 ms or more after its launch call
-- returned (step_queueing.gpu_queued): the GPU was busy with earlier work (of an earlier step, or from
-- before the profiled window) or host and GPU clocks are offset. A launch call that is itself long (module
-- loading or lazy initialization inside it) is launch delay on the host, never this flag. That wait is `gpu_queued_ns` in the step breakdown
-- and `gpu_queued` on the critical path, not host setup; the step's wall and its GPU utilization include
-- it, and an idle gap across it was not the host's doing.
SELECT run_id, rank, step, 'gpu_queueing' AS flag, 'warning' AS severity,
       ['step_breakdown.gpu_queued', 'step_breakdown.gpu_utilization', 'idle_gaps'] AS affects,
       map(['queued_ns', 'first_delay_ns', 'visible_busy_ns'],
           [CAST(queued_ns AS DOUBLE), CAST(first_delay_ns AS DOUBLE), CAST(visible_busy_ns AS DOUBLE)]) AS evidence,
       'The step''s first GPU activity waited ' || round(first_delay_ns / 1e6, 3) || ' ms after its launch call returned, '
           || CASE WHEN queue_cause = 'earlier_gpu_work'
                   THEN 'queued behind earlier GPU work shown in the trace'
                   ELSE 'with the GPU idle in the trace: queued behind work from before the profiled window, or '
                        || 'host and GPU clocks are offset' END
           || '; that time is GPU queueing, not host setup: profile a window that starts after a '
           || 'synchronize (or warm-up steps) to see the step as it runs' AS message
FROM step_queueing
WHERE gpu_queued;

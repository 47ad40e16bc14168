-- fusion_removable: what each fusion_match row would remove, item by item: one row per removed activity
-- and per launch gap inside an adjacent chain, of the row's evidence chains. The input a what-if replay
-- needs (which activities go, which idle time closes); the sum of `removable_ns` over a (run_id, phase,
-- pattern_id) is that fusion_match row's removable_gpu_time_ns.
-- Evidence chains (as fusion_match): Confirmed rows count their adjacent chains, Likely rows all their
-- chains, Fused rows none (nothing left to remove). Only rows fusion_match gives (framework and vendor
-- gates applied) have items.
-- Items:
--   kind 'kernel'  an activity of a removed step (fusion_pattern_steps.removed; catalogue column
--                  `removes`): the fused kernel does its work, so its whole GPU time goes; each activity once
--   kind 'gap'     on an adjacent chain, the idle time on the stream between two consecutive steps
--                  (_fusion_chains gap_ns_1 / gap_ns_2): one kernel has no launch gap inside; kernel_id is
--                  the activity after the gap
-- Columns:
--   run_id, phase, pattern_id   VARCHAR  the fusion_match row
--   rank                        INTEGER  the rank of the activity
--   kernel_id                   BIGINT  the activity removed (kind 'kernel') or the one after the gap ('gap')
--   kind                        VARCHAR  'kernel' or 'gap'
--   step                        INTEGER  the pattern step of that activity (the first, when it is a
--                               removed step of several chains)
--   name                        VARCHAR  the activity's name
--   removable_ns                BIGINT  the time that goes: the activity's duration, or the gap
CREATE OR REPLACE VIEW fusion_removable AS
WITH rows_shown AS (
    SELECT run_id, phase, pattern_id, status FROM fusion_match WHERE status IN ('Confirmed', 'Likely')
),
chains AS (
    SELECT c.*
    FROM _fusion_chains AS c
    JOIN rows_shown AS r ON r.run_id = c.run_id AND r.phase = c.phase AND r.pattern_id = c.pattern_id
    WHERE c.adjacent OR r.status = 'Likely'
),
members AS (
    SELECT run_id, phase, pattern_id, rank, 1 AS step, kernel_id_1 AS kernel_id, name_1 AS name,
           dur_ns_1 AS dur_ns, adjacent, CAST(NULL AS BIGINT) AS gap_before_ns
    FROM chains
    UNION ALL
    SELECT run_id, phase, pattern_id, rank, 2, kernel_id_2, name_2, dur_ns_2, adjacent, gap_ns_1 FROM chains
    UNION ALL
    SELECT run_id, phase, pattern_id, rank, 3, kernel_id_3, name_3, dur_ns_3, adjacent, gap_ns_2
    FROM chains WHERE n_splits = 3
)
SELECT m.run_id, m.phase, m.pattern_id, m.rank, m.kernel_id, 'kernel' AS kind, min(m.step) AS step, m.name,
       m.dur_ns AS removable_ns
FROM members AS m
JOIN fusion_pattern_steps AS s ON s.pattern_id = m.pattern_id AND s.step = m.step
WHERE s.removed
GROUP BY m.run_id, m.phase, m.pattern_id, m.rank, m.kernel_id, m.name, m.dur_ns
UNION ALL
SELECT DISTINCT run_id, phase, pattern_id, rank, kernel_id, 'gap', step, name, gap_before_ns
FROM members
WHERE adjacent AND step > 1

-- run_comparability: one row per run: what decides whether its steps compare with another run's steps.
-- `tracehouse diff` reads the rows of its two runs and says first whether, and how, they compare (same
-- model, hardware, phases, batch sizes, steps; steps the program marked, or none); its data-quality flags
-- it reads from data_quality.
-- Columns:
--   run_id                   VARCHAR  the run (runs)
--   framework, model, hardware   VARCHAR  as in runs (NULL: the trace does not say)
--   step_basis               VARCHAR  what its steps are (steps.source): `marked` every step comes from a marker
--                            the program wrote (ProfilerStep#N, a serving step); `inferred` some rank's steps
--                            are repeating bursts of launch calls (no marker); `whole` some rank marks no step
--                            at all, so its one step is the whole profiled window and a figure per step is a
--                            figure per window; `none` the run has no step
--   steps                    BIGINT  distinct step numbers over its ranks
--   phases                   VARCHAR  its steps' distinct phases (prefill, decode, mixed, unknown), sorted,
--                            comma-separated (NULL: no step)
--   batch_sizes              VARCHAR  its steps' distinct batch sizes, ascending, comma-separated (NULL: no
--                            step states one)
-- materialized: per_run   rows kept per run (warehouse/derived.py: `tracehouse derive`): the diff's verdict (warehouse/diff_facts.py)
CREATE OR REPLACE VIEW run_comparability AS
WITH s AS (
    SELECT run_id, source, step, phase, batch_size FROM steps
),
basis AS (
    SELECT run_id,
           CASE WHEN bool_or(source = 'whole') THEN 'whole'
                WHEN bool_or(source = 'host_burst') THEN 'inferred'
                ELSE 'marked' END AS step_basis,
           count(DISTINCT step) AS steps
    FROM s
    GROUP BY run_id
),
phases AS (
    SELECT run_id, string_agg(phase, ',' ORDER BY phase) AS phases
    FROM (SELECT DISTINCT run_id, coalesce(phase, 'unknown') AS phase FROM s) AS d
    GROUP BY run_id
),
batches AS (
    SELECT run_id, string_agg(CAST(batch_size AS VARCHAR), ',' ORDER BY batch_size) AS batch_sizes
    FROM (SELECT DISTINCT run_id, batch_size FROM s WHERE batch_size IS NOT NULL) AS d
    GROUP BY run_id
)
SELECT r.run_id, r.framework, r.model, r.hardware, coalesce(b.step_basis, 'none') AS step_basis,
       CAST(coalesce(b.steps, 0) AS BIGINT) AS steps, p.phases, c.batch_sizes
FROM runs AS r
LEFT JOIN basis AS b ON b.run_id = r.run_id
LEFT JOIN phases AS p ON p.run_id = r.run_id
LEFT JOIN batches AS c ON c.run_id = r.run_id;

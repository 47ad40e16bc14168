-- Stage 3d: python_function events as frames. The parent comes from `Python parent id`; file, line
-- and function are split from names of the form `path/file.py(123): function`.
CREATE OR REPLACE TABLE python_frames AS
WITH frames AS (
    SELECT ev_id AS frame_id, python_id, python_parent_id, pid, tid, name, start_ns, dur_ns
    FROM events
    WHERE ph = 'X' AND cat_lc = 'python_function' AND start_ns IS NOT NULL
),
-- each distinct name is split once (a trace repeats a few hundred frame names thousands of times)
names AS (
    SELECT name,
           nullif(regexp_extract(name, '^(.*)\((\d+)\): ', 1), '') AS file,
           TRY_CAST(nullif(regexp_extract(name, '^(.*)\((\d+)\): ', 2), '') AS INTEGER) AS line,
           CASE WHEN regexp_matches(name, '^(.*)\((\d+)\): ')
                THEN regexp_replace(name, '^(.*)\((\d+)\): ', '') ELSE name END AS function
    FROM (SELECT DISTINCT name FROM frames)
),
by_python_id AS (
    SELECT python_id, min(frame_id) AS frame_id FROM frames WHERE python_id IS NOT NULL GROUP BY python_id
)
SELECT
    f.frame_id,
    p.frame_id AS parent_frame_id,
    f.python_id,
    f.pid,
    f.tid,
    f.name,
    n.file,
    n.line,
    n.function,
    f.start_ns,
    f.dur_ns
FROM frames f
JOIN names n ON n.name = f.name
LEFT JOIN by_python_id p ON p.python_id = f.python_parent_id;

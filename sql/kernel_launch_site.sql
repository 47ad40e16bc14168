-- kernel_launch_site: one row per GPU activity (run_id, rank, kernel_id) with the Python line that
-- launched it, from one place whether it ran eagerly or under CUDA-graph replay.
-- The trace's own site is the innermost `python_function` frame around the launch call
-- (kernels.python_frame_id); a frame without a source file (`<built-in method ...>`, `nn.Module: ...`)
-- gives way to its nearest ancestor that has one (up to three levels up; when none has one, the
-- innermost frame's own name is the site, with file and line NULL). The capture site comes from
-- `kernel_sites` (ingest/capture.py): the same launch in the capture trace, aligned with the replay.
-- For an activity that a graph launch replayed, the trace's frame is the replay call itself
-- (cuda_graph_runner.py `replay`, torch/cuda/graphs.py `replay`), a weaker site than the capture's, so
-- the capture site wins; otherwise the trace's site wins and the capture site fills in where the trace
-- has none.
-- Columns:
--   run_id, rank, kernel_id  the activity (as in `kernels`)
--   name               VARCHAR  activity name (kernel symbol, `Memcpy ...`), as in `kernels`
--   dur_ns             BIGINT   its GPU time
--   file               VARCHAR  source file of the launch site (NULL: no site)
--   line               INTEGER  line in that file
--   function           VARCHAR  Python function
--   site               VARCHAR  'file(line): function', the form profilers print; the bare frame name
--                               when no frame of the stack has a file (NULL: no site)
--   site_source        VARCHAR  'trace' (the trace's own stack), 'capture' (capture trace), or NULL
--   cpu_op_name        VARCHAR  innermost cpu_op around the launch (from the same source as the site,
--                               else from the other one)
--   cpu_op_input_dims  VARCHAR  that op's input dims, as text
--   capture_match      VARCHAR  how the capture launch was aligned: name, order, stream, greedy (NULL
--                               when the capture was not used)
--   capture_file       VARCHAR  the capture trace the site came from (NULL when not from capture)
CREATE OR REPLACE VIEW kernel_launch_site AS
WITH trace_site AS (
    SELECT
        k.run_id, k.rank, k.kernel_id, k.name, k.dur_ns, k.launch_call,
        CASE WHEN f0.file IS NOT NULL THEN f0.file WHEN f1.file IS NOT NULL THEN f1.file
             WHEN f2.file IS NOT NULL THEN f2.file ELSE f3.file END AS file,
        CASE WHEN f0.file IS NOT NULL THEN f0.line WHEN f1.file IS NOT NULL THEN f1.line
             WHEN f2.file IS NOT NULL THEN f2.line ELSE f3.line END AS line,
        CASE WHEN f0.file IS NOT NULL THEN f0.function WHEN f1.file IS NOT NULL THEN f1.function
             WHEN f2.file IS NOT NULL THEN f2.function WHEN f3.file IS NOT NULL THEN f3.function
             ELSE f0.function END AS function,
        o.name AS cpu_op_name,
        o.input_dims AS cpu_op_input_dims
    FROM kernels k
    LEFT JOIN python_frames f0
        ON f0.run_id = k.run_id AND f0.rank = k.rank AND f0.frame_id = k.python_frame_id
    LEFT JOIN python_frames f1
        ON f1.run_id = k.run_id AND f1.rank = k.rank AND f1.frame_id = f0.parent_frame_id AND f0.file IS NULL
    LEFT JOIN python_frames f2
        ON f2.run_id = k.run_id AND f2.rank = k.rank AND f2.frame_id = f1.parent_frame_id AND f1.file IS NULL
    LEFT JOIN python_frames f3
        ON f3.run_id = k.run_id AND f3.rank = k.rank AND f3.frame_id = f2.parent_frame_id AND f2.file IS NULL
    LEFT JOIN cpu_ops o
        ON o.run_id = k.run_id AND o.rank = k.rank AND o.op_id = k.cpu_op_id
),
chosen AS (
    SELECT
        t.*,
        s.file AS cap_file, s.line AS cap_line, s.function AS cap_function,
        s.cpu_op_name AS cap_op, s.cpu_op_input_dims AS cap_dims, s.match AS cap_match,
        s.capture_file AS cap_source_file,
        CASE
            WHEN s.file IS NOT NULL AND (t.file IS NULL OR lower(coalesce(t.launch_call, '')) LIKE '%graphlaunch%')
                THEN 'capture'
            WHEN t.function IS NOT NULL THEN 'trace'
        END AS site_source
    FROM trace_site t
    LEFT JOIN kernel_sites s ON s.run_id = t.run_id AND s.rank = t.rank AND s.kernel_id = t.kernel_id
)
SELECT
    run_id, rank, kernel_id, name, dur_ns,
    CASE site_source WHEN 'capture' THEN cap_file WHEN 'trace' THEN file END AS file,
    CASE site_source WHEN 'capture' THEN cap_line WHEN 'trace' THEN line END AS line,
    CASE site_source WHEN 'capture' THEN cap_function WHEN 'trace' THEN function END AS function,
    CASE site_source
        WHEN 'capture' THEN cap_file || '(' || CAST(cap_line AS VARCHAR) || '): ' || cap_function
        WHEN 'trace' THEN CASE WHEN file IS NULL THEN function
                               ELSE file || '(' || CAST(line AS VARCHAR) || '): ' || function END
    END AS site,
    site_source,
    CASE WHEN site_source = 'capture' THEN coalesce(cap_op, cpu_op_name) ELSE coalesce(cpu_op_name, cap_op) END
        AS cpu_op_name,
    CASE WHEN site_source = 'capture' THEN coalesce(cap_dims, cpu_op_input_dims)
         ELSE coalesce(cpu_op_input_dims, cap_dims) END AS cpu_op_input_dims,
    CASE WHEN site_source = 'capture' THEN cap_match END AS capture_match,
    CASE WHEN site_source = 'capture' THEN cap_source_file END AS capture_file
FROM chosen

-- kernel_launch_site: one row per GPU activity (run_id, rank, kernel_id) with the Python line that
-- launched it, from one place whether it ran eagerly or under CUDA-graph replay.
-- The stack of a launch is every `python_function` frame around the launch call, innermost first: from the
-- trace's own frames (kernels.python_frame_id and every frame of its thread that encloses it) or, for an
-- activity that a
-- graph launch replayed, from the same launch in the capture trace (`kernel_sites.stack`, ingest/capture.py).
-- The launch site is the first frame, walking from the innermost frame outwards, that has a source file
-- and is not launcher plumbing: the rule table `launch_site_rules` (sql/rules/launch_site_plumbing.csv,
-- first match by rule_order on the frame name `file(line): function`; no match = not plumbing) names
-- torch itself (torch/_ops.py `__call__`, torch/utils/_device.py, torch/nn/modules/*.py), the Triton
-- runtime (triton/backends/.../driver.py `__call__`), Inductor's generated code (`call`, `partition_0`),
-- fx-generated code (`<eval_with_key>`, `<string>`), kernel-library bindings (aiter/, flashinfer/,
-- sgl_kernel/, vllm/_custom_ops.py), the frameworks' own dispatch and compilation layers
-- (vllm/compilation/, vLLM CustomOp, SGLang MultiPlatformOp), `__torch_function__` overrides and the Python
-- standard library (functools, contextlib). So the site is the model or framework line that asked for the
-- work (vllm/model_executor/layers/..., sglang/srt/layers/..., transformers/models/...), as TraceLens
-- reports it (it skips torch/). Frames without a source file (`<built-in method ...>`, `nn.Module: ...`)
-- are never the site.
-- When every frame with a file is plumbing (a stack cut short, a script inside torch), the site is the
-- innermost frame with a file and site_class says 'plumbing': such an activity has a Python stack (it
-- counts in runs.attributed_activities) but no model/framework site; when no frame has a file, the site
-- is the innermost frame's own name (site_class 'frame', file and line NULL).
-- The capture site wins for an activity that a graph launch replayed (the trace's frames are the replay
-- call itself, cuda_graph_runner.py `replay`), and fills in where the trace has no frame with a file;
-- otherwise the trace's site wins.
-- module_path is the chain of `nn.Module: X_N` frames of the same stack, outermost first, joined by '.'
-- (X_N: the module's class and the profiler's per-class instance number, e.g.
-- `Qwen3ForCausalLM_0.Qwen3Model_0.Qwen3DecoderLayer_3.Qwen3Attention_3`); NULL when the stack has none
-- (no `with_stack`/module recording, or work outside any module). A graph node's `mark_kernels` annotation
-- wins where it names a module (kernels.module_fqn, e.g. `layers.0.attention.wq`): it was recorded for that
-- very node at capture, so a replay is placed in its module without a capture trace or a stack.
-- Columns:
--   run_id, rank, kernel_id  VARCHAR, INTEGER, BIGINT  the activity (as in `kernels`)
--   name               VARCHAR  activity name (kernel symbol, `Memcpy ...`), as in `kernels`
--   dur_ns             BIGINT  its GPU time
--   file               VARCHAR  source file of the launch site (NULL: no site, or site_class 'frame')
--   line               INTEGER  line in that file
--   function           VARCHAR  Python function
--   site               VARCHAR  'file(line): function', the form profilers print; the bare frame name
--                               when no frame of the stack has a file (NULL: no site)
--   site_class         VARCHAR  'code' (the first frame outside plumbing), 'plumbing' (every frame with a
--                               file is plumbing: the innermost one), 'frame' (no frame has a file), NULL
--                               (no stack)
--   plumbing_frames    INTEGER  frames with a source file skipped as plumbing before the site (0 when the
--                               innermost frame with a file is the site; NULL without a stack)
--   inner_site         VARCHAR  the innermost frame with a source file, 'file(line): function' (the site
--                               before plumbing is skipped: e.g. triton/backends/amd/driver.py(634):
--                               __call__)
--   module_path        VARCHAR  nn.Module chain around the launch, outermost first, '.'-joined; a graph
--                               node's annotated module FQN where it has one (NULL: none)
--   module             VARCHAR  the innermost nn.Module of that chain (e.g. Qwen3Attention_3); the
--                               annotated module FQN where there is one
--   site_source        VARCHAR  'trace' (the trace's own stack), 'capture' (capture trace), or NULL
--   cpu_op_name        VARCHAR  innermost cpu_op around the launch (from the same source as the site,
--                               else from the other one)
--   cpu_op_input_dims  VARCHAR  that op's input dims, as text
--   capture_match      VARCHAR  how the capture launch was aligned: node, name, order, stream, greedy (NULL
--                               when the capture was not used)
--   capture_file       VARCHAR  the capture trace the site came from (NULL when not from capture)
CREATE OR REPLACE VIEW kernel_launch_site AS
WITH launch_frames AS (
    SELECT DISTINCT f.run_id, f.rank, f.frame_id AS leaf_id, f.pid, f.tid, f.start_ns, f.start_ns + f.dur_ns AS end_ns
    FROM kernels AS k
    JOIN python_frames AS f ON f.run_id = k.run_id AND f.rank = k.rank AND f.frame_id = k.python_frame_id
),
-- The trace's stacks: the launch's innermost frame and every frame of its thread that encloses it (Python
-- frames of one thread nest in time). Found in time linear in the frames, not in frames x launches (a
-- thread's every frame against every launch frame of it was 28M pairs on a 15 MB trace, 12.8 s at 16x
-- its frames): first the frames that can enclose a launch frame at all (the first launch frame starting
-- at or after a frame's start starts within it: one sorted pass), then those frames against the launch
-- frames of the same time bucket (a thread's span cut into as many buckets as it has such frames; a frame
-- is listed in each bucket it covers, a launch frame in the bucket of its start, so each enclosing pair
-- meets exactly once).
frame_marks AS (
    SELECT run_id, rank, pid, tid, frame_id, start_ns, dur_ns, 0 AS is_launch FROM python_frames
    UNION ALL
    SELECT run_id, rank, pid, tid, NULL, start_ns, NULL, 1 FROM launch_frames
),
marks_counted AS (
    -- launch frames before each frame in start order (at one start, frames before launch frames)
    SELECT *, sum(is_launch) OVER (PARTITION BY run_id, rank, pid, tid ORDER BY start_ns, is_launch
                                  ROWS UNBOUNDED PRECEDING) AS launches_before
    FROM frame_marks
),
launch_order AS (
    SELECT run_id, rank, pid, tid, start_ns,
           row_number() OVER (PARTITION BY run_id, rank, pid, tid ORDER BY start_ns) AS launch_no
    FROM launch_frames
),
enclosing_candidates AS (
    SELECT c.run_id, c.rank, c.pid, c.tid, c.frame_id, c.start_ns, c.dur_ns
    FROM marks_counted AS c
    JOIN launch_order AS n
      ON n.run_id = c.run_id AND n.rank = c.rank AND n.pid = c.pid AND n.tid = c.tid
     AND n.launch_no = c.launches_before + 1
    WHERE c.is_launch = 0 AND n.start_ns <= c.start_ns + c.dur_ns
),
thread_buckets AS (
    SELECT run_id, rank, pid, tid, min(start_ns) AS t0,
           greatest((max(start_ns + dur_ns) - min(start_ns)) // count(*), 1) AS width
    FROM enclosing_candidates
    GROUP BY run_id, rank, pid, tid
),
candidate_buckets AS (
    SELECT c.run_id, c.rank, c.pid, c.tid, c.frame_id, c.start_ns, c.dur_ns,
           unnest(range((c.start_ns - b.t0) // b.width, (c.start_ns + c.dur_ns - b.t0) // b.width + 1)) AS bucket
    FROM enclosing_candidates AS c
    JOIN thread_buckets AS b ON b.run_id = c.run_id AND b.rank = c.rank AND b.pid = c.pid AND b.tid = c.tid
),
launch_buckets AS (
    SELECT l.*, (l.start_ns - b.t0) // b.width AS bucket
    FROM launch_frames AS l
    JOIN thread_buckets AS b ON b.run_id = l.run_id AND b.rank = l.rank AND b.pid = l.pid AND b.tid = l.tid
),
enclosing AS (
    SELECT l.run_id, l.rank, l.leaf_id, c.frame_id, c.start_ns, c.dur_ns
    FROM launch_buckets AS l
    JOIN candidate_buckets AS c
      ON c.run_id = l.run_id AND c.rank = l.rank AND c.pid = l.pid AND c.tid = l.tid AND c.bucket = l.bucket
     AND c.start_ns <= l.start_ns AND c.start_ns + c.dur_ns >= l.end_ns
),
-- innermost first: by start descending, then the shorter, then the later-recorded (a child can share its
-- parent's start and end to the ns), i.e. the reverse of a frame's place in its thread's order by start,
-- the longer first, then the earlier recorded: a stack's frames are of one thread, so that place, taken once
-- per frame, orders every stack (depth is a key, not a count: the views below only compare it)
frame_order AS (
    SELECT run_id, rank, frame_id, name, file, line, function,
           row_number() OVER (PARTITION BY run_id, rank, pid, tid ORDER BY start_ns, dur_ns DESC, frame_id)
               AS thread_pos
    FROM python_frames
),
trace_frames AS (
    SELECT 'trace' AS source, e.run_id, e.rank, e.leaf_id AS key_id, -a.thread_pos AS depth,
           a.name, a.file, a.line, a.function
    FROM enclosing AS e
    JOIN frame_order AS a ON a.run_id = e.run_id AND a.rank = e.rank AND a.frame_id = e.frame_id
),
-- the capture's stacks, each distinct stack of a rank once (a graph replays the same few stacks for every
-- activity: 66 stacks for 391,140 replayed activities of a 300 MB trace, whose frames, one row each, did not
-- fit 640 MB), numbered as its key; split like python_frames splits a frame name
-- (ingest/sql/40_python_frames.sql)
capture_stacks AS (
    SELECT run_id, rank, stack, row_number() OVER (ORDER BY run_id, rank, stack) AS key_id
    FROM (SELECT DISTINCT run_id, rank, stack FROM kernel_sites WHERE array_length(stack) > 0) AS d
),
capture_names AS (
    SELECT s.run_id, s.rank, s.key_id, u.depth, u.name
    FROM capture_stacks AS s, unnest(s.stack) WITH ORDINALITY AS u(name, depth)
),
capture_split AS (
    -- each distinct frame name is split once
    SELECT name,
           nullif(regexp_extract(name, '^(.*)\((\d+)\): ', 1), '') AS file,
           TRY_CAST(nullif(regexp_extract(name, '^(.*)\((\d+)\): ', 2), '') AS INTEGER) AS line,
           CASE WHEN regexp_matches(name, '^(.*)\((\d+)\): ')
                THEN regexp_replace(name, '^(.*)\((\d+)\): ', '') ELSE name END AS function
    FROM (SELECT DISTINCT name FROM capture_names) AS n
),
capture_frames AS (
    SELECT 'capture' AS source, c.run_id, c.rank, c.key_id, c.depth, c.name, x.file, x.line, x.function
    FROM capture_names AS c
    JOIN capture_split AS x ON x.name = c.name
),
stack_frames AS (
    SELECT * FROM trace_frames
    UNION ALL
    SELECT * FROM capture_frames
),
-- each distinct frame name meets the rules once: the first matching rule decides
frame_actions AS (
    SELECT n.name, arg_min(r.action, r.rule_order) AS action
    FROM (SELECT DISTINCT name FROM python_frames WHERE file IS NOT NULL
          UNION
          SELECT name FROM capture_split WHERE file IS NOT NULL) AS n
    -- a substring every match contains first (warehouse.rules.match_literals): it spares most pairs the
    -- pattern's compilation
    JOIN launch_site_rules AS r
        ON CASE WHEN coalesce(array_length(r.literals), 0) = 0
              OR list_bool_or(list_transform(r.literals, lambda l: contains(lower(n.name), l)))
             THEN regexp_matches(n.name, r.pattern) ELSE false END
    GROUP BY n.name
),
flagged AS (
    SELECT s.*, s.file IS NOT NULL AND coalesce(a.action, 'site') = 'plumbing' AS is_plumbing,
           s.file IS NOT NULL AND coalesce(a.action, 'site') = 'site' AS is_site
    FROM stack_frames AS s
    LEFT JOIN frame_actions AS a ON a.name = s.name
),
-- per stack: the first frame outside plumbing, the innermost frame with a file, the module chain
stacks AS (
    SELECT source, run_id, rank, key_id,
           min(depth) FILTER (WHERE is_site) AS site_depth,
           min(depth) FILTER (WHERE file IS NOT NULL) AS inner_depth,
           arg_min(file, depth) FILTER (WHERE is_site) AS site_file,
           arg_min(line, depth) FILTER (WHERE is_site) AS site_line,
           arg_min(function, depth) FILTER (WHERE is_site) AS site_function,
           arg_min(file, depth) FILTER (WHERE file IS NOT NULL) AS inner_file,
           arg_min(line, depth) FILTER (WHERE file IS NOT NULL) AS inner_line,
           arg_min(function, depth) FILTER (WHERE file IS NOT NULL) AS inner_function,
           arg_min(name, depth) AS leaf_name,
           string_agg(substr(name, 12), '.' ORDER BY depth DESC) FILTER (WHERE name LIKE 'nn.Module: %') AS module_path,
           arg_min(substr(name, 12), depth) FILTER (WHERE name LIKE 'nn.Module: %') AS module
    FROM flagged
    GROUP BY source, run_id, rank, key_id
),
-- the plumbing frames inside the site (walked past before it), per stack that has a site
skipped AS (
    SELECT f.source, f.run_id, f.rank, f.key_id, count(*) AS skipped
    FROM flagged AS f
    JOIN stacks AS st
      ON st.source = f.source AND st.run_id = f.run_id AND st.rank = f.rank AND st.key_id = f.key_id
    WHERE f.is_plumbing AND f.depth < st.site_depth
    GROUP BY f.source, f.run_id, f.rank, f.key_id
),
picked AS (
    SELECT st.source, st.run_id, st.rank, st.key_id, module_path, module,
           CASE WHEN site_depth IS NOT NULL THEN 'code' WHEN inner_depth IS NOT NULL THEN 'plumbing' ELSE 'frame' END
               AS site_class,
           coalesce(site_file, inner_file) AS file,
           CASE WHEN site_depth IS NOT NULL THEN site_line ELSE inner_line END AS line,
           CASE WHEN site_depth IS NOT NULL THEN site_function WHEN inner_depth IS NOT NULL THEN inner_function
                ELSE leaf_name END AS function,
           inner_file || '(' || CAST(inner_line AS VARCHAR) || '): ' || inner_function AS inner_site,
           CAST(coalesce(sk.skipped, 0) AS INTEGER) AS plumbing_frames
    FROM stacks AS st
    LEFT JOIN skipped AS sk
        ON sk.source = st.source AND sk.run_id = st.run_id AND sk.rank = st.rank AND sk.key_id = st.key_id
),
trace_site AS (
    SELECT k.run_id, k.rank, k.kernel_id, k.name, k.dur_ns, k.launch_call, k.module_fqn,
           p.file, p.line, p.function, p.site_class, p.inner_site, p.plumbing_frames, p.module_path, p.module,
           o.name AS cpu_op_name, o.input_dims AS cpu_op_input_dims
    FROM kernels AS k
    LEFT JOIN picked AS p
        ON p.source = 'trace' AND p.run_id = k.run_id AND p.rank = k.rank AND p.key_id = k.python_frame_id
    LEFT JOIN cpu_ops AS o
        ON o.run_id = k.run_id AND o.rank = k.rank AND o.op_id = k.cpu_op_id
),
capture_site AS (
    -- a capture row without a stack (none was recorded) keeps the innermost frame with a file as its site
    SELECT s.run_id, s.rank, s.kernel_id, s.cpu_op_name, s.cpu_op_input_dims, s.match, s.capture_file,
           coalesce(p.file, s.file) AS file, CASE WHEN p.file IS NOT NULL THEN p.line ELSE s.line END AS line,
           CASE WHEN p.file IS NOT NULL THEN p.function ELSE s.function END AS function,
           coalesce(p.site_class, CASE WHEN s.file IS NOT NULL THEN 'code' END) AS site_class,
           coalesce(p.inner_site, s.file || '(' || CAST(s.line AS VARCHAR) || '): ' || s.function) AS inner_site,
           coalesce(p.plumbing_frames, 0) AS plumbing_frames, p.module_path, p.module
    FROM kernel_sites AS s
    LEFT JOIN capture_stacks AS cs ON cs.run_id = s.run_id AND cs.rank = s.rank AND cs.stack = s.stack
    LEFT JOIN picked AS p
        ON p.source = 'capture' AND p.run_id = s.run_id AND p.rank = s.rank AND p.key_id = cs.key_id
),
chosen AS (
    SELECT
        t.*,
        c.file AS cap_file, c.line AS cap_line, c.function AS cap_function, c.site_class AS cap_class,
        c.inner_site AS cap_inner, c.plumbing_frames AS cap_plumbing, c.module_path AS cap_module_path,
        c.module AS cap_module, c.cpu_op_name AS cap_op, c.cpu_op_input_dims AS cap_dims, c.match AS cap_match,
        c.capture_file AS cap_source_file,
        CASE
            WHEN c.file IS NOT NULL AND (t.file IS NULL OR lower(coalesce(t.launch_call, '')) LIKE '%graphlaunch%')
                THEN 'capture'
            WHEN t.function IS NOT NULL THEN 'trace'
        END AS site_source
    FROM trace_site AS t
    LEFT JOIN capture_site AS c ON c.run_id = t.run_id AND c.rank = t.rank AND c.kernel_id = t.kernel_id
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
    CASE site_source WHEN 'capture' THEN cap_class WHEN 'trace' THEN site_class END AS site_class,
    CASE site_source WHEN 'capture' THEN cap_plumbing WHEN 'trace' THEN plumbing_frames END AS plumbing_frames,
    CASE site_source WHEN 'capture' THEN cap_inner WHEN 'trace' THEN inner_site END AS inner_site,
    coalesce(module_fqn, CASE site_source WHEN 'capture' THEN cap_module_path ELSE module_path END) AS module_path,
    coalesce(module_fqn, CASE site_source WHEN 'capture' THEN cap_module ELSE module END) AS module,
    site_source,
    CASE WHEN site_source = 'capture' THEN coalesce(cap_op, cpu_op_name) ELSE coalesce(cpu_op_name, cap_op) END
        AS cpu_op_name,
    CASE WHEN site_source = 'capture' THEN coalesce(cap_dims, cpu_op_input_dims)
         ELSE coalesce(cpu_op_input_dims, cap_dims) END AS cpu_op_input_dims,
    CASE WHEN site_source = 'capture' THEN cap_match END AS capture_match,
    CASE WHEN site_source = 'capture' THEN cap_source_file END AS capture_file
FROM chosen

-- one_time_work: one row per host event of a run that is one-time setup: work a process does once (or
-- once per new kernel, shape or handle), not in every iteration, so a profiled window that holds it shows
-- more host time and GPU idle than the steady state has. What counts is decided by what the event is,
-- by the rule table one_time_rules (sql/rules/one_time_work.csv, loaded by warehouse/rules.py): context
-- creation (a driver context call, or a device query / stream or event creation of 1 ms or more: the
-- runtime's lazy initialization behind it), module loading (CUPTI's Runtime Triggered Module Loading /
-- Lazy Function Loading overhead records, module load calls), library handle and communicator creation,
-- allocator growth (cudaMalloc / cudaFree / hipMalloc ... of 1 ms or more, in or before the rank's first
-- step only), a slow first launch (a launch call of 1 ms or more, in or before the rank's first step
-- only, that launched the rank's first activity of its name: the kernel's code loaded inside the call;
-- a long launch of a kernel that ran before is something else, a full launch queue) and torch.compile's
-- compilation ranges. The first rule (by rule_order) whose event class, pattern,
-- minimum duration and step condition hold names the event; an event no rule matches is not listed.
-- Rules with first_step_only hold only for an event that starts before the end of the rank's first step
-- (the step_spans row that starts first; the whole rank when the trace marks no step): in later steps
-- the same calls are a cost of the steady state (an allocator that keeps freeing, a full launch queue).
-- Columns:
--   run_id, rank   VARCHAR, INTEGER  the rank the event is on
--   op_id          BIGINT  cpu_ops.op_id of the event
--   step           BIGINT  the step (step_spans.step) whose host window holds the event's start; NULL:
--                  outside every step (before the first, between two, after the last)
--   kind           VARCHAR  context_creation / module_loading / library_init / allocator_growth /
--                  first_launch / compile (the rule's)
--   rule_name      VARCHAR  the rule that matched (sql/rules/one_time_work.csv)
--   name, cat      VARCHAR  the event's name and category (cuda_runtime, cuda_driver, overhead, cpu_op ...)
--   start_ns, dur_ns, end_ns   BIGINT  the event's host time
CREATE OR REPLACE VIEW one_time_work AS
WITH rules AS (SELECT * FROM one_time_rules),
candidates AS (
    SELECT run_id, rank, op_id, cat, name, start_ns, dur_ns,
           CASE WHEN cat IN ('cuda_runtime', 'cuda_driver') THEN 'call'
                WHEN cat = 'overhead' THEN 'overhead' ELSE 'range' END AS event
    FROM cpu_ops
    WHERE cat IN ('cuda_runtime', 'cuda_driver', 'overhead', 'cpu_op', 'user_annotation')
),
names AS (
    SELECT DISTINCT event, name FROM candidates
),
name_rules AS (
    -- each (event class, name) with the rules whose pattern matches it: the pattern's literals first, the
    -- regular expression only on the names that contain one (a pattern read from a table compiles per row)
    SELECT n.event, n.name, r.rule_order, r.rule_name, r.kind, r.min_dur_ns, r.first_step_only
    FROM names AS n
    JOIN rules AS r
      ON (r.event = n.event OR r.event = 'any')
     AND CASE WHEN coalesce(array_length(r.literals), 0) = 0
                   OR list_bool_or(list_transform(r.literals, lambda l: contains(lower(n.name), l)))
              THEN regexp_matches(n.name, r.pattern) ELSE false END
),
first_step AS (
    SELECT run_id, rank, arg_min(end_ns, start_ns) AS first_end_ns FROM step_spans GROUP BY run_id, rank
),
long_launches AS (
    -- the calls a first_launch rule could name (long enough), and the activity each launched
    SELECT c.run_id, c.rank, c.op_id, k.name AS activity, k.start_ns AS activity_start_ns
    FROM candidates AS c
    JOIN name_rules AS nr ON nr.event = c.event AND nr.name = c.name
    JOIN kernels AS k ON k.run_id = c.run_id AND k.rank = c.rank AND k.launch_op_id = c.op_id
    WHERE nr.kind = 'first_launch' AND c.dur_ns >= nr.min_dur_ns
),
first_launches AS (
    -- ... those whose activity is the rank's first of its name: the kernel's code was loaded in the call
    SELECT DISTINCT l.run_id, l.rank, l.op_id
    FROM long_launches AS l
    WHERE NOT EXISTS (SELECT 1 FROM kernels AS e
                      WHERE e.run_id = l.run_id AND e.rank = l.rank AND e.name = l.activity
                        AND e.start_ns < l.activity_start_ns)
),
matched AS (
    SELECT c.run_id, c.rank, c.op_id, c.cat, c.name, c.start_ns, c.dur_ns, nr.kind, nr.rule_name,
           ROW_NUMBER() OVER (PARTITION BY c.run_id, c.rank, c.op_id ORDER BY nr.rule_order) AS pick
    FROM candidates AS c
    JOIN name_rules AS nr ON nr.event = c.event AND nr.name = c.name
    LEFT JOIN first_step AS f ON f.run_id = c.run_id AND f.rank = c.rank
    WHERE c.dur_ns >= nr.min_dur_ns
      AND (NOT nr.first_step_only OR f.first_end_ns IS NULL OR c.start_ns < f.first_end_ns)
      AND (nr.kind <> 'first_launch'
           OR EXISTS (SELECT 1 FROM first_launches AS fl
                      WHERE fl.run_id = c.run_id AND fl.rank = c.rank AND fl.op_id = c.op_id))
)
SELECT m.run_id, m.rank, m.op_id,
       (SELECT min(s.step) FROM step_spans AS s
        WHERE s.run_id = m.run_id AND s.rank = m.rank AND s.start_ns <= m.start_ns AND m.start_ns < s.end_ns) AS step,
       m.kind, m.rule_name, m.name, m.cat, m.start_ns, m.dur_ns, m.start_ns + m.dur_ns AS end_ns
FROM matched AS m
WHERE m.pick = 1

-- graph_node_summary: one row per (run_id, phase, graph_id, graph_node_id): a CUDA-graph node of the run
-- (kernels.graph_id / graph_node_id, Kineto's `graph id` / `graph node id`), pooled over the run's ranks
-- (each rank replays its own copy of a graph; the same capture gives the same ids). A node keeps its
-- identity across replays and, for the same code, across runs: the line `tracehouse trend --graph-nodes`
-- follows ("node X got slower at commit Y"). Only activities inside a step count (kernels.step), as in
-- run_metrics; activities not replayed from a graph (graph_node_id NULL) have no row.
-- Columns:
--   run_id, phase      VARCHAR  the run and the phase of the node's activities (kernels.phase, 'unknown')
--   graph_id           BIGINT  the graph (NULL when the trace gives a node id without a graph id)
--   graph_node_id      BIGINT  the node
--   name               VARCHAR  the kernel the node ran (the first by name when it ran several: see names)
--   names              BIGINT  distinct kernel names the node ran (1 for a node of one capture)
--   category           VARCHAR  that kernel's category (_kernel_facts.category; the first by name)
--   module_fqn         VARCHAR  the module FQN of its mark_kernels annotation (NULL: not annotated)
--   ranks              BIGINT  ranks on which the node ran
--   launches           BIGINT  its activities (one per graph replay and rank)
--   total_ns           BIGINT  sum of their durations
--   median_ns          DOUBLE  median duration of one launch (continuous)
--   rank_steps         BIGINT  the (rank, step) pairs of the run's activities in this phase (every rank's
--                             steps, whether the node ran in them or not)
--   ns_per_step        DOUBLE  total_ns / rank_steps: the node's GPU time per step, as run_metrics'
--                             `_ns_per_step` metrics (the trend's value for the node)
--   spread_ns          DOUBLE  step-to-step noise of ns_per_step: 1.4826 × MAD over the rank-steps of the
--                             node's time in each (0 where it did not run) / sqrt(rank_steps), as
--                             run_metrics.spread
CREATE OR REPLACE VIEW graph_node_summary AS
WITH facts AS (
    SELECT run_id, phase_key AS phase, rank, step, coalesce(graph_id, 0) AS gid, graph_node_id, name, category,
           module_fqn, dur_ns
    FROM _kernel_facts
    WHERE step IS NOT NULL
),
rank_steps AS (
    SELECT DISTINCT run_id, phase, rank, step FROM facts
),
phase_steps AS (
    SELECT run_id, phase, count(*) AS rank_steps FROM rank_steps GROUP BY run_id, phase
),
node_facts AS (
    SELECT * FROM facts WHERE graph_node_id IS NOT NULL
),
per_node AS (
    SELECT run_id, phase, gid, graph_node_id, min(name) AS name, count(DISTINCT name) AS names,
           min(module_fqn) AS module_fqn, count(DISTINCT rank) AS ranks, count(*) AS launches,
           CAST(sum(dur_ns) AS BIGINT) AS total_ns, quantile_cont(dur_ns, 0.5) AS median_ns
    FROM node_facts
    GROUP BY run_id, phase, gid, graph_node_id
),
node_category AS (
    SELECT run_id, phase, gid, graph_node_id, name, min(category) AS category
    FROM node_facts
    GROUP BY run_id, phase, gid, graph_node_id, name
),
node_step_ns AS (
    SELECT run_id, phase, gid, graph_node_id, rank, step, sum(dur_ns) AS ns
    FROM node_facts
    GROUP BY run_id, phase, gid, graph_node_id, rank, step
),
per_step AS (
    -- every rank-step of the phase for every node, 0 where the node did not run
    SELECT n.run_id, n.phase, n.gid, n.graph_node_id, CAST(coalesce(x.ns, 0) AS DOUBLE) AS ns
    FROM per_node AS n
    JOIN rank_steps AS s ON s.run_id = n.run_id AND s.phase = n.phase
    LEFT JOIN node_step_ns AS x ON x.run_id = n.run_id AND x.phase = n.phase AND x.gid = n.gid
        AND x.graph_node_id = n.graph_node_id AND x.rank = s.rank AND x.step = s.step
),
centre AS (
    SELECT run_id, phase, gid, graph_node_id, median(ns) AS mid FROM per_step GROUP BY run_id, phase, gid, graph_node_id
),
mad AS (
    SELECT p.run_id, p.phase, p.gid, p.graph_node_id, median(abs(p.ns - c.mid)) AS mad
    FROM per_step AS p
    JOIN centre AS c ON c.run_id = p.run_id AND c.phase = p.phase AND c.gid = p.gid
        AND c.graph_node_id = p.graph_node_id
    GROUP BY p.run_id, p.phase, p.gid, p.graph_node_id
)
SELECT n.run_id, n.phase, CASE WHEN n.gid <> 0 THEN n.gid END AS graph_id, n.graph_node_id, n.name, n.names,
       c.category, n.module_fqn, n.ranks, n.launches, n.total_ns, n.median_ns, s.rank_steps,
       CAST(n.total_ns AS DOUBLE) / s.rank_steps AS ns_per_step,
       1.4826 * m.mad / sqrt(s.rank_steps) AS spread_ns
FROM per_node AS n
JOIN phase_steps AS s ON s.run_id = n.run_id AND s.phase = n.phase
JOIN node_category AS c ON c.run_id = n.run_id AND c.phase = n.phase AND c.gid = n.gid
    AND c.graph_node_id = n.graph_node_id AND c.name = n.name
JOIN mad AS m ON m.run_id = n.run_id AND m.phase = n.phase AND m.gid = n.gid AND m.graph_node_id = n.graph_node_id

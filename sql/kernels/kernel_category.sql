-- kernel_category: one row per distinct (name, kind) of GPU activity in `kernels`, with the category
-- that the name-only rules of the ordered rule table `category_rules` give it (warehouse/rules.py loads
-- that table from sql/rules/kernel_categories.csv, user rules first): the rule-by-name listing. Memcpy and
-- memset activities are `memory` by their kind, before any name rule; every other activity takes the
-- category of the first name-only rule (lowest rule_order, op_pattern and module_pattern NULL) whose pattern (RE2 / Java
-- regex, searched anywhere in the name) matches its name; a name that no rule matches is `other`.
-- This is NOT the category of every activity of that name: rules with an op_pattern look at the op that
-- launched the activity (its name and input shapes), rules with a module_pattern at its nn.Module, so one kernel name can be `attention` under an
-- attention-shaped aten::bmm and `gemm` under aten::mm. The per-activity category, which every analysis
-- uses, is activity_category (and _kernel_facts.category); this view is its fallback where no op rule
-- applies, and the listing of which name rule files which name.
-- Columns:
--   name           VARCHAR  the activity name exactly as in `kernels` (kernel symbol, `Memcpy HtoD (...)`)
--   kind           VARCHAR  `kernel`, `memcpy` or `memset`, as in `kernels`
--   category       VARCHAR  one of gemm, attention, moe, communication, norm, activation, rope, quantize,
--                           sampling, elementwise, reduction, memory, convolution, embedding, other
--   rule_name      VARCHAR  the rule that decided: a rule_name of `category_rules` (user rules start with
--                           `user:`), `kind_memcpy` / `kind_memset` for copy and fill activities, or
--                           `unmatched` when no rule matched (category `other`)
--   rule_order     INTEGER  rule_order of that rule in category_rules (NULL: kind_* or unmatched)
--   rules_version  VARCHAR  version of the rule table that was applied (same on every row)
CREATE OR REPLACE VIEW kernel_category AS
WITH names AS (
    SELECT DISTINCT name, kind FROM kernels
),
version AS (
    SELECT max(rules_version) AS rules_version FROM category_rules
),
candidates AS (
    -- every rule that matches each name; a name without any match keeps one row with NULL rule columns
    SELECT
        n.name,
        n.kind,
        r.rule_order,
        r.rule_name,
        r.category
    FROM names AS n
    LEFT JOIN category_rules AS r
        ON n.kind NOT IN ('memcpy', 'memset')
        AND r.op_pattern IS NULL AND r.module_pattern IS NULL
        -- a substring every match contains first: it spares most pairs the pattern's compilation
        AND CASE WHEN coalesce(array_length(r.pattern_literals), 0) = 0
              OR list_bool_or(list_transform(r.pattern_literals, lambda l: contains(lower(n.name), l)))
             THEN regexp_matches(n.name, r.pattern) ELSE false END
),
ranked AS (
    SELECT
        name,
        kind,
        rule_name,
        rule_order,
        category,
        row_number() OVER (PARTITION BY name, kind ORDER BY rule_order) AS rn
    FROM candidates
)
SELECT
    ranked.name,
    ranked.kind,
    CASE
        WHEN ranked.kind IN ('memcpy', 'memset') THEN 'memory'
        ELSE coalesce(ranked.category, 'other')
    END AS category,
    CASE
        WHEN ranked.kind IN ('memcpy', 'memset') THEN 'kind_' || ranked.kind
        ELSE coalesce(ranked.rule_name, 'unmatched')
    END AS rule_name,
    CASE WHEN ranked.kind NOT IN ('memcpy', 'memset') THEN ranked.rule_order END AS rule_order,
    version.rules_version
FROM ranked
CROSS JOIN version
WHERE ranked.rn = 1;

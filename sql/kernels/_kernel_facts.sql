-- _kernel_facts: helper. One row per GPU activity with what most views need next to it: its category
-- (activity_category: per activity, so it can depend on the op that launched it), its launch site
-- (kernel_launch_site) and its phase.
-- Columns: every column of `kernels`, plus
--   category      VARCHAR  the activity's category (activity_category)
--   site          VARCHAR  'file(line): function' of its Python launch site (NULL: none known)
--   site_source   VARCHAR  'trace' or 'capture'
--   module_path   VARCHAR  the nn.Module chain around its launch (kernel_launch_site.module_path; NULL: none)
--   phase_key     VARCHAR  kernels.phase, 'unknown' when NULL (so that it can be grouped and joined)
CREATE OR REPLACE VIEW _kernel_facts AS
SELECT
    k.*,
    coalesce(o.category, c.category, 'other') AS category,
    s.site,
    s.site_source,
    s.module_path,
    coalesce(k.phase, 'unknown') AS phase_key
FROM kernels AS k
-- activity_category, written out: the name's category unless an op rule decides (_category_override, few rows)
LEFT JOIN kernel_category AS c ON c.name = k.name AND c.kind = k.kind
LEFT JOIN _category_override AS o ON o.run_id = k.run_id AND o.rank = k.rank AND o.kernel_id = k.kernel_id
LEFT JOIN kernel_launch_site AS s ON s.run_id = k.run_id AND s.rank = k.rank AND s.kernel_id = k.kernel_id;

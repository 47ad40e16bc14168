-- _kernel_facts: helper. One row per GPU activity with what most views need next to it: its category
-- (kernel_category), its launch site (kernel_launch_site) and its phase.
-- Columns: every column of `kernels`, plus
--   category      VARCHAR  the activity's category (kernel_category)
--   site          VARCHAR  'file(line): function' of its Python launch site (NULL: none known)
--   site_source   VARCHAR  'trace' or 'capture'
--   phase_key     VARCHAR  kernels.phase, 'unknown' when NULL (so that it can be grouped and joined)
CREATE OR REPLACE VIEW _kernel_facts AS
SELECT
    k.*,
    coalesce(c.category, 'other') AS category,
    s.site,
    s.site_source,
    coalesce(k.phase, 'unknown') AS phase_key
FROM kernels AS k
LEFT JOIN kernel_category AS c ON c.name = k.name AND c.kind = k.kind
LEFT JOIN kernel_launch_site AS s ON s.run_id = k.run_id AND s.rank = k.rank AND s.kernel_id = k.kernel_id;

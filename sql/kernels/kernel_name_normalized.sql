-- kernel_name_normalized: one row per distinct (name, kind) of GPU activity: the name with everything that
-- changes when the same operation is compiled or tuned differently taken out, so that two runs' kernels
-- can be matched when their exact names differ ("the same GEMM with a new tile config").
-- Steps, in order (each a regexp_replace, so the view transpiles to Spark as is):
--   1. a leading `void ` (the return type of a demangled symbol)
--   2. template arguments `<...>`, innermost first, up to 11 levels of nesting; stray `<`, `>` left over
--   3. parameter lists and casts `(...)`, innermost first, up to 3 levels; lambda scopes `{...}`
--   4. tile and shape tokens `128x256x64` (digits joined by `x`)
--   5. hashes: runs of 12 or more hexadecimal characters
--   6. numeric tokens `_80_` and a trailing number (`triton_poi_fused_add_0` → `triton_poi_fused_add`,
--      `Kernel2` → `Kernel`); no back-references, so the Java regex of Spark reads them the same
--   7. repeated, leading and trailing `_`, `:` and blanks
-- Examples: `nvjet_tst_64x8_64x16_4x1_v_bz_splitK_TNT` → `nvjet_tst_v_bz_splitK_TNT`;
-- `void flashinfer::norm::RMSNormKernel<8u, __nv_bfloat16>(...)` → `flashinfer::norm::RMSNormKernel`;
-- `Memcpy DtoH (Device -> Pinned)` → `Memcpy DtoH`.
-- Columns:
--   name              VARCHAR  the activity name exactly as in `kernels`
--   kind              VARCHAR  kernel, memcpy or memset
--   category          VARCHAR  its category (kernel_category)
--   normalized_name   VARCHAR  the normalized name (never empty: falls back to the exact name)
CREATE OR REPLACE VIEW kernel_name_normalized AS
WITH s1 AS (
    SELECT name, kind, category, regexp_replace(name, '^void ', '') AS n FROM kernel_category
),
s2 AS (
    -- template arguments, innermost first
    SELECT name, kind, category,
           regexp_replace(regexp_replace(regexp_replace(regexp_replace(regexp_replace(regexp_replace(
           regexp_replace(regexp_replace(regexp_replace(regexp_replace(regexp_replace(regexp_replace(n,
               '<[^<>]*>', '', 'g'), '<[^<>]*>', '', 'g'), '<[^<>]*>', '', 'g'), '<[^<>]*>', '', 'g'),
               '<[^<>]*>', '', 'g'), '<[^<>]*>', '', 'g'), '<[^<>]*>', '', 'g'), '<[^<>]*>', '', 'g'),
               '<[^<>]*>', '', 'g'), '<[^<>]*>', '', 'g'), '<[^<>]*>', '', 'g'),
               ' *[<>]+ *', '', 'g') AS n
    FROM s1
),
s3 AS (
    -- parameter lists, casts and lambda scopes
    SELECT name, kind, category,
           regexp_replace(regexp_replace(regexp_replace(regexp_replace(regexp_replace(n,
               '\{[^{}]*\}', '', 'g'), '\{[^{}]*\}', '', 'g'),
               '\([^()]*\)', '', 'g'), '\([^()]*\)', '', 'g'), '\([^()]*\)', '', 'g') AS n
    FROM s2
),
s4 AS (
    -- tile sizes, hashes, numeric tokens
    SELECT name, kind, category,
           regexp_replace(regexp_replace(regexp_replace(regexp_replace(regexp_replace(n,
               '[0-9]+(x[0-9]+)+', '', 'g'),
               '[0-9a-fA-F]{12,}', '', 'g'),
               '_[0-9]+_', '_', 'g'), '_[0-9]+_', '_', 'g'),
               '_?[0-9]+$', '', 'g') AS n
    FROM s3
),
s5 AS (
    SELECT name, kind, category,
           regexp_replace(regexp_replace(regexp_replace(regexp_replace(trim(n), '_+', '_', 'g'), '(::)+', '::', 'g'),
               '^[_: ]+', ''), '[_: ,]+$', '') AS n
    FROM s4
)
SELECT name, kind, category, CASE WHEN n = '' THEN name ELSE n END AS normalized_name
FROM s5;

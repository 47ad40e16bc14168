-- _run_vendor: helper of fusion_match and fusion_removable. One row per run: the GPU vendor whose kernels
-- the run shows, so that a fusion that exists on one vendor's GPUs only (a CUDA-only fused kernel, an
-- AITER kernel of ROCm) is never suggested on the other's.
-- Decided by the first that applies:
--   device name  runs.hardware (the trace's device name, or --label hardware=...): 'amd' when it names an
--                AMD device (AMD, Instinct, Radeon, MI<3 digits>), 'nvidia' when it names an NVIDIA one
--                (NVIDIA, Tesla, GeForce, Quadro, RTX, or a data-centre part: A100, H100, H200, GH200, B200,
--                GB200, V100, L4, L40, T4)
--   launch calls the runtime calls that launched its activities (_kernel_facts.launch_call): HIP calls
--                (hipLaunchKernel, hipGraphLaunch ...) only -> 'amd'; CUDA calls (cudaLaunchKernel,
--                cuLaunchKernel ...) only -> 'nvidia'
--   otherwise    NULL (unknown: a trace with neither a device name nor launch calls, or with both kinds)
-- Columns:
--   run_id         VARCHAR  the run
--   vendor         VARCHAR  nvidia, amd or NULL (unknown)
--   vendor_basis   VARCHAR  'device name', 'launch calls' or NULL (unknown)
CREATE OR REPLACE VIEW _run_vendor AS
WITH calls AS (
    SELECT run_id,
           count(*) FILTER (WHERE lower(launch_call) LIKE 'hip%') AS hip_calls,
           count(*) FILTER (WHERE lower(launch_call) LIKE 'cu%') AS cuda_calls
    FROM _kernel_facts
    WHERE launch_call IS NOT NULL
    GROUP BY run_id
),
named AS (
    SELECT r.run_id,
           CASE WHEN regexp_matches(coalesce(r.hardware, ''), '(?i)(amd|instinct|radeon|(^|[^a-z0-9])mi[0-9]{3})')
                THEN 'amd'
                WHEN regexp_matches(coalesce(r.hardware, ''),
                                    '(?i)(nvidia|tesla|geforce|quadro|rtx|(^|[^a-z0-9])(a100|h100|h200|gh200|b200|gb200|v100|l4|l40s?|t4)([^a-z0-9]|$))')
                THEN 'nvidia' END AS by_name,
           CASE WHEN c.hip_calls > 0 AND c.cuda_calls = 0 THEN 'amd'
                WHEN c.cuda_calls > 0 AND c.hip_calls = 0 THEN 'nvidia' END AS by_calls
    FROM runs AS r
    LEFT JOIN calls AS c ON c.run_id = r.run_id
)
SELECT run_id,
       coalesce(by_name, by_calls) AS vendor,
       CASE WHEN by_name IS NOT NULL THEN 'device name' WHEN by_calls IS NOT NULL THEN 'launch calls' END
           AS vendor_basis
FROM named

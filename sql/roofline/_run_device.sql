-- _run_device: helper of _kernel_work and collective_bandwidth. One row per run whose device the peak
-- table knows: the row of device_peaks (sql/rules/device_peaks.csv, or the user's file named by
-- TRACEHOUSE_DEVICE_PEAKS, whose rows come first and win) whose pattern matches runs.hardware (the
-- trace's device name, or --label hardware=...), first by rule_order; else, for a trace whose device
-- name matches no row (ROCm traces may leave it empty), the row whose props_match equals the first
-- device's properties written `cc=<computeMajor>.<computeMinor> sms=<numSms> mem_gib=<totalGlobalMem
-- rounded to GiB>`. A run no row matches has no row here (its peaks are unknown, never guessed).
-- Columns:
--   run_id            VARCHAR  the run
--   device            VARCHAR  the device_peaks row's device
--   peaks_source      VARCHAR  its source
--   matched_by        VARCHAR  pattern or props
--   bf16_tflops, fp8_tflops, fp4_tflops, tf32_tflops, fp32_tflops   DOUBLE  dense compute peaks (TFLOP/s)
--   hbm_tbps          DOUBLE  HBM peak (TB/s)
--   link_gbps         DOUBLE  GPU-to-GPU link peak per direction (GB/s)
CREATE OR REPLACE VIEW _run_device AS
SELECT run_id, device, peaks_source, matched_by, bf16_tflops, fp8_tflops, fp4_tflops, tf32_tflops, fp32_tflops,
       hbm_tbps, link_gbps
FROM (
    SELECT r.run_id, p.device, p.source AS peaks_source,
           CASE WHEN p.pattern IS NOT NULL AND regexp_matches(coalesce(r.hardware, ''), p.pattern) THEN 'pattern'
                ELSE 'props' END AS matched_by,
           p.bf16_tflops, p.fp8_tflops, p.fp4_tflops, p.tf32_tflops, p.fp32_tflops, p.hbm_tbps, p.link_gbps,
           ROW_NUMBER() OVER (PARTITION BY r.run_id
                              ORDER BY CASE WHEN p.pattern IS NOT NULL AND regexp_matches(coalesce(r.hardware, ''), p.pattern)
                                            THEN 0 ELSE 1 END, p.rule_order) AS rn
    FROM runs AS r
    JOIN device_peaks AS p
      ON (p.pattern IS NOT NULL AND r.hardware IS NOT NULL AND r.hardware <> '' AND regexp_matches(r.hardware, p.pattern))
      OR (p.props_match IS NOT NULL AND p.props_match =
            'cc=' || json_extract_string(r.device_properties, '$[0].computeMajor') || '.'
            || json_extract_string(r.device_properties, '$[0].computeMinor')
            || ' sms=' || json_extract_string(r.device_properties, '$[0].numSms')
            || ' mem_gib=' || CAST(round(TRY_CAST(json_extract_string(r.device_properties, '$[0].totalGlobalMem') AS DOUBLE)
                                         / 1073741824.0) AS BIGINT))
) AS ranked
WHERE rn = 1;

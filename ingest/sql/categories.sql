-- Stage 2a: one spelling of every event category, whatever version of the PyTorch profiler wrote the
-- trace. Run by ingest/decode.py before type_events.sql, which names each event's category with
-- kineto_category(ph, cat, pid); no later stage knows that other spellings exist (docs/tables.md,
-- "Kineto traces": the versions read and what each wrote).
-- The canonical spelling is the modern Kineto one (libkineto ActivityType names, flows `ac2g`/`fwdbwd`):
--   2021 Kineto (PyTorch 1.8-1.9): Operator -> cpu_op, Runtime -> cuda_runtime, Driver -> cuda_driver,
--     Kernel -> kernel, Memcpy -> gpu_memcpy, Memset -> gpu_memset, User (GPU-side ranges on
--     "stream N user") -> gpu_user_annotation, flows `async` (named `launch`) -> ac2g;
--   2022 Kineto: flows `async_cpu_to_gpu` / `async_gpu` -> ac2g, `forward_backward` / `fwd_bwd` -> fwdbwd;
--   the autograd profiler's export_chrome_trace (PyTorch <= 1.7, a bare array): events without a
--     category on pid "CPU functions" -> cpu_op, on pid "CUDA functions" / "GPU functions" -> kernel,
--     flows `cpu_to_cuda` -> ac2g;
--   any spelling of a modern name in other letter case (`Kernel` of PyTorch 1.13, `gpu_user_Annotation`)
--     -> its lower-case name.
-- Any other category (`Trace`, a vendor's own) is kept as written.
CREATE OR REPLACE MACRO kineto_category(ph, cat, pid) AS
CASE
    WHEN cat IS NULL THEN
        CASE WHEN ph = 'X' AND pid = 'CPU functions' THEN 'cpu_op'
             WHEN ph = 'X' AND pid IN ('CUDA functions', 'GPU functions') THEN 'kernel'
        END
    WHEN lower(cat) IN ('operator') THEN 'cpu_op'
    WHEN lower(cat) IN ('runtime') THEN 'cuda_runtime'
    WHEN lower(cat) IN ('driver') THEN 'cuda_driver'
    WHEN lower(cat) IN ('memcpy') THEN 'gpu_memcpy'
    WHEN lower(cat) IN ('memset') THEN 'gpu_memset'
    WHEN lower(cat) IN ('user') THEN 'gpu_user_annotation'
    WHEN lower(cat) IN ('async_gpu', 'async_cpu_to_gpu', 'cpu_to_cuda') THEN 'ac2g'
    WHEN lower(cat) = 'async' AND ph IN ('s', 'f', 't') THEN 'ac2g'
    WHEN lower(cat) IN ('forward_backward', 'fwd_bwd') THEN 'fwdbwd'
    WHEN lower(cat) IN (
        'cpu_op', 'user_annotation', 'gpu_user_annotation', 'gpu_memcpy', 'gpu_memset', 'kernel',
        'external_correlation', 'cuda_runtime', 'cuda_driver', 'cpu_instant_event', 'python_function',
        'overhead', 'mtia_runtime', 'mtia_ccp_events', 'mtia_insight', 'cuda_sync', 'cuda_event',
        'mtia_counters', 'glow_runtime', 'cuda_profiler_range', 'hpu_op', 'xpu_runtime', 'xpu_driver',
        'collective_comm', 'privateuse1_runtime', 'privateuse1_driver', 'xpu_scope_profiler', 'xpu_sync',
        'ac2g', 'fwdbwd'
    ) THEN lower(cat)
    ELSE cat
END;

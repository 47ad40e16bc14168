"""tracehouse: a SQL warehouse for GPU profiler (Kineto / PyTorch profiler) traces.

The package holds the CLI (`tracehouse.cli`, the `tracehouse` command), the one exception hierarchy
(`tracehouse.errors`) and the demo (`tracehouse.demo`); the layers it drives are the packages beside it
(ingest, warehouse, sql, reports: ARCHITECTURE.md).
"""

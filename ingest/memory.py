"""DuckDB's memory limit for ingest: from the memory the machine has free, spilling to disk past it.

TRACEHOUSE_MEMORY_LIMIT fixes it (e.g. `640MB`, the low-memory setting: with Python and the reader's
buffers a worker then stays under 1 GB whatever the trace size; bench/run.py --only rss measures it on a
4 GB trace). Unset, it is half of the memory available when the connection is made (MemAvailable), shared
by the rank workers that run side by side (TRACEHOUSE_RANK_WORKERS, set by ingest.run.RankPool in each
worker), and never below MIN_MEMORY_LIMIT. Spilling stays the fallback: at a fixed 640 MB a 1 GB trace spent
29 % of its ingest spilling (16.1 s of it at 4 GB).
"""

from __future__ import annotations

import os

MIN_MEMORY_LIMIT = 640 * 10**6


def available_memory() -> int:
    """Bytes of memory available to new allocations (Linux MemAvailable, else the free pages; 0 where
    neither can be read)."""
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, AttributeError):
        return 0


def memory_limit(env: dict | None = None, available: int | None = None) -> str:
    """The limit as DuckDB's setting text ('1234MB'). env: the environment (default os.environ);
    available: bytes free (default available_memory())."""
    env = os.environ if env is None else env
    fixed = (env.get("TRACEHOUSE_MEMORY_LIMIT") or "").strip()
    if fixed:
        return fixed
    try:
        workers = max(1, int(env.get("TRACEHOUSE_RANK_WORKERS") or 1))
    except ValueError:
        workers = 1
    free = available_memory() if available is None else available
    return f"{max(MIN_MEMORY_LIMIT, free // 2 // workers) // 10**6}MB"


def work_threads() -> int:
    """Threads one ingest connection uses: TRACEHOUSE_THREADS (ingest.run.RankPool sets it for ranks
    ingested side by side), else the cores, at most 2."""
    return int(os.environ.get("TRACEHOUSE_THREADS") or max(1, min(2, os.cpu_count() or 1)))

"""Ingest's threads under the memory policy (warehouse.memory, which sets every connection's limit)."""

from __future__ import annotations

import os

from tracehouse.warehouse import memory


def work_threads() -> int:
    """Threads one ingest connection uses: TRACEHOUSE_THREADS (ingest.run.RankPool sets it for ranks
    ingested side by side), else the policy's (one per 512 MB of the limit), at most 2: beyond two, the
    decode's pieces cost more to join than they save."""
    if (os.environ.get(memory.THREADS_SETTING) or "").strip().isdigit():
        return memory.threads()
    return min(2, memory.threads())

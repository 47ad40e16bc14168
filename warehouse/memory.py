"""The one memory policy: the DuckDB settings of every connection tracehouse opens (ingest's work
connections, the derive, the export, the readers), so that one setting bounds them all.

- memory_limit: TRACEHOUSE_MEMORY_LIMIT (DuckDB's size text: `640MB`, `4GB`) where set; else DEFAULT_SHARE
  (half) of the machine's memory (a container's cgroup limit where one is set), within
  [MIN_DEFAULT, MAX_DEFAULT] = [640 MB, 16 GB]: the derive of a 1 GB run needs more than 2 GB (a 2 GB
  default ran it out of memory), so the default stays what ingest and derive had before the policy. Ingest's rank workers, which run side by side, share it
  (TRACEHOUSE_RANK_WORKERS, set in each worker by ingest.run.RankPool); a fixed setting is each process's.
- temp_directory: DuckDB spills past the limit into a folder the caller names (inside the warehouse's
  staging area for ingest and export, inside the derive's work folder; removed when the work ends).
- threads: TRACEHOUSE_THREADS where set; else the cores, one per THREAD_MEMORY (512 MB) of the limit, at
  least one: every thread of a sort or join holds its own buffers, and at 640 MB two threads ran a 1 GB
  trace's final join out of memory where one spilled and finished.
- preserve_insertion_order: false where no row order is relied on (the derive, the export: every query
  there says its ORDER BY); ingest keeps it (an event's id is its position in the file).

LOW_MEMORY (`TRACEHOUSE_MEMORY_LIMIT=640MB`) is the low-memory setting: the ingest and the derive of a 1 GB
trace each stay under 1 GB of peak RSS (800 and 823 MB; bench/memory_bench.py, bench/results.md), slower,
spilling. A 4 GB trace's derive stays under 1 GB but has not been seen to finish (bench/results.md). An
out-of-memory is said in one line naming the setting to raise (out_of_memory_line), by ingest, the derive
and the readers (tracehouse.cli, warehouse.query).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from tracehouse.warehouse.quoting import sql_string

SETTING = "TRACEHOUSE_MEMORY_LIMIT"
THREADS_SETTING = "TRACEHOUSE_THREADS"
WORKERS_SETTING = "TRACEHOUSE_RANK_WORKERS"
LOW_MEMORY = "640MB"
DEFAULT_SHARE = 2  # the default limit is 1/DEFAULT_SHARE of the machine's memory ...
MIN_DEFAULT = 640 * 10**6  # ... at least this ...
MAX_DEFAULT = 16 * 10**9  # ... at most this
THREAD_MEMORY = 512 * 10**6  # one thread per this much of the limit
_UNITS = {
    "": 1,
    "B": 1,
    "KB": 10**3,
    "MB": 10**6,
    "GB": 10**9,
    "TB": 10**12,
    "KIB": 1 << 10,
    "MIB": 1 << 20,
    "GIB": 1 << 30,
    "TIB": 1 << 40,
}


def machine_memory() -> int:
    """Bytes this process may use: a container's cgroup limit where one is set, else physical memory (0
    where neither can be read)."""
    for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            text = Path(path).read_text().strip()
        except OSError:
            continue
        if text.isdigit() and int(text) < 1 << 60:
            return int(text)
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 0


def parse_size(text: str) -> int | None:
    """Bytes of a DuckDB size text ('640MB', '1.5 GiB'), or None when it is not one."""
    match = re.fullmatch(r"\s*([\d.]+)\s*([A-Za-z]*)\s*", str(text))
    if not match or match.group(2).upper() not in _UNITS:
        return None
    try:
        return int(float(match.group(1)) * _UNITS[match.group(2).upper()])
    except ValueError:
        return None


def default_limit(total: int | None = None, workers: int = 1) -> str:
    """The default limit: half of `total` (default machine_memory()) within [640 MB, 16 GB], shared by
    `workers` processes side by side (each at least 320 MB)."""
    total = machine_memory() if total is None else total
    share = min(MAX_DEFAULT, max(MIN_DEFAULT, total // DEFAULT_SHARE))
    return f"{max(MIN_DEFAULT // 2, share // max(1, workers)) // 10**6}MB"


def memory_limit(env: dict | None = None, total: int | None = None) -> str:
    """DuckDB's memory_limit text for a connection of this process. env: the environment (default
    os.environ); total: the machine's bytes (default machine_memory())."""
    env = os.environ if env is None else env
    fixed = (env.get(SETTING) or "").strip()
    if fixed:
        return fixed
    try:
        workers = max(1, int(env.get(WORKERS_SETTING) or 1))
    except ValueError:
        workers = 1
    return default_limit(total, workers)


def threads(limit: str | None = None, env: dict | None = None, cores: int | None = None) -> int:
    """DuckDB's threads for a connection: TRACEHOUSE_THREADS, else the cores, one per 512 MB of the limit."""
    env = os.environ if env is None else env
    fixed = (env.get(THREADS_SETTING) or "").strip()
    if fixed.isdigit() and int(fixed) > 0:
        return int(fixed)
    cores = cores or os.cpu_count() or 1
    size = parse_size(limit if limit is not None else memory_limit(env)) or MAX_DEFAULT
    return max(1, min(cores, size // THREAD_MEMORY))


def settings(
    spill_dir: Path | str | None = None, ordered: bool = True, env: dict | None = None
) -> dict[str, str]:
    """The DuckDB settings of one connection: memory_limit and threads by the policy, temp_directory
    spill_dir (None: DuckDB's own), preserve_insertion_order as `ordered`."""
    limit = memory_limit(env)
    out = {"memory_limit": limit, "threads": str(threads(limit, env))}
    if spill_dir is not None:
        out["temp_directory"] = str(spill_dir)
    out["preserve_insertion_order"] = "true" if ordered else "false"
    return out


def apply(con, values: dict[str, str]) -> None:
    """SET each setting on a DuckDB connection (values are the policy's own texts, quoted here)."""
    for name, value in values.items():
        con.execute(f"SET {name} = {sql_string(str(value))}")


def is_out_of_memory(exc: BaseException) -> bool:
    """Whether an error is DuckDB (or Python) running out of its memory."""
    if isinstance(exc, MemoryError):
        return True
    return type(exc).__name__ == "OutOfMemoryException" or "Out of Memory Error" in str(exc)


def out_of_memory_line(what: str, env: dict | None = None) -> str:
    """One line: what ran out of memory, the limit it had and the setting to raise (twice the limit)."""
    limit = memory_limit(env)
    size = parse_size(limit)
    more = f"{2 * size // 10**6}MB" if size else "4GB"
    return f"{what}: out of memory at the memory limit {limit}; raise it, e.g. {SETTING}={more}"

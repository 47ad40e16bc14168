"""Measuring for bench/run.py: wall and CPU time of repeated calls (best of the rounds), rates, and the
report the benchmarks add their rows and details to."""

from __future__ import annotations

import gc
import resource
import sys
import time
from dataclasses import dataclass, field

MB = 1e6


# --------------------------------------------------------------------------------------------------
# measuring


def cpu_seconds() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


@dataclass
class Timing:
    wall: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)

    @property
    def best(self) -> float:
        return min(self.wall)

    @property
    def best_cpu(self) -> float:
        return min(self.cpu)


def measure(timings: dict[str, Timing], name: str, fn, *args):
    """Run fn(*args) once, add its wall and CPU time to timings[name], and return its result."""
    gc.collect()
    c0, t0 = cpu_seconds(), time.perf_counter()
    result = fn(*args)
    t1, c1 = time.perf_counter(), cpu_seconds()
    timing = timings.setdefault(name, Timing())
    timing.wall.append(t1 - t0)
    timing.cpu.append(c1 - c0)
    return result


def mbps(nbytes: int, seconds: float) -> float:
    return nbytes / MB / seconds if seconds > 0 else float("inf")


def say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# --------------------------------------------------------------------------------------------------
# results


@dataclass
class Row:
    bench: str
    what: str
    value: str
    target: str = ""
    verdict: str = ""


def verdict(ok: bool | None) -> str:
    return "" if ok is None else ("ok" if ok else "BELOW")


@dataclass
class Report:
    rows: list[Row] = field(default_factory=list)
    details: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def add(self, *args, **kw) -> None:
        self.rows.append(Row(*args, **kw))


def md_table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)

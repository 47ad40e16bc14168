"""A history of benchmark runs across commits: what `tracehouse demo` and the trend tests ingest.

Each commit of each series is one run of the same workload with another seed (the synthesizer's own
run-to-run variation in kernel durations and host gaps), labelled with a commit, a commit time and a
series. From `regression_at` on, kernels matching `slow_kernel` run `factor` times longer: the known
regression a trend must find, and nothing else.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path

from synth.scenario import write_scenario

DEFAULT_SERIES = (("decode-tp2", 2), ("decode-tp4", 4))
START = datetime(2026, 10, 1, 9, 0, tzinfo=timezone.utc)


@dataclass(frozen=True)
class HistoryRun:
    path: Path
    series: str
    commit: str
    commit_time: str
    index: int  # position of the commit in the series, 0 = oldest
    regressed: bool

    @property
    def labels(self) -> dict[str, str]:
        return {"series": self.series, "commit": self.commit, "commit_time": self.commit_time,
                "model": "DeepSeek-V3-mini", "config": self.series, "branch": "main"}


def commit_sha(index: int) -> str:
    return hashlib.sha1(f"tracehouse-demo-commit-{index}".encode()).hexdigest()[:12]


def write_history(out_dir: str | Path, commits: int = 12, series=DEFAULT_SERIES, regression_at: int = 8,
                  slow_kernel: tuple[str, float] = ("nvjet", 1.08), scenario: str = "serving-decode",
                  steps: int = 3, layers: int = 2, seed: int = 0) -> list[HistoryRun]:
    """Write `commits` runs for every series under out_dir/<series>/<nn>-<sha>/; returns them in order."""
    out = Path(out_dir)
    runs = []
    for name, ranks in series:
        for i in range(commits):
            sha = commit_sha(i)
            regressed = i >= regression_at
            run_dir = out / name / f"{i:02d}-{sha}"
            write_scenario(scenario, run_dir, ranks=ranks, steps=steps, layers=layers,
                           seed=seed * 1000 + i, slow_kernel=slow_kernel if regressed else None,
                           run_label=f"{name}@{sha}")
            when = (START + timedelta(hours=6 * i)).strftime("%Y-%m-%dT%H:%M:%SZ")
            runs.append(HistoryRun(run_dir, name, sha, when, i, regressed))
    return runs

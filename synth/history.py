"""A history of benchmark runs across commits: what `tracehouse demo` and the trend tests ingest.

Each commit of each series is one run of the same workload with another seed (the synthesizer's own
run-to-run variation: every kernel duration is redrawn, ±2.5 %, and every host gap), labelled with a
commit, a commit time and a series. From `regression_at` on, kernels matching `slow_kernel` run
`factor` times longer: the known regression a trend must find, and nothing else. `drift` (from, kernel
regex, factor) adds a small change before it (from `from` up to `regression_at`): one that a trend must
*not* flag, e.g. every GEMM +1 %, inside the noise. `seed` picks the noise realization: histories with
different seeds share nothing but the workload.
"""

from __future__ import annotations

import hashlib
import shutil
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path

from tracehouse.synth.scenario import write_scenario

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
    slow_kernel: tuple[str, float] | None = None  # what this run was synthesized with (regression or drift)

    @property
    def labels(self) -> dict[str, str]:
        return {
            "series": self.series,
            "commit": self.commit,
            "commit_time": self.commit_time,
            "model": "DeepSeek-V3-mini",
            "config": self.series,
            "branch": "main",
        }


def commit_sha(index: int) -> str:
    return hashlib.sha1(f"tracehouse-demo-commit-{index}".encode()).hexdigest()[:12]


def write_history(
    out_dir: str | Path,
    commits: int = 12,
    series=DEFAULT_SERIES,
    regression_at: int = 8,
    slow_kernel: tuple[str, float] = ("nvjet", 1.08),
    scenario: str = "serving-decode",
    steps: int = 3,
    layers: int = 2,
    seed: int = 0,
    drift: tuple[int, str, float] | None = None,
    captures: bool = True,
    slow_node: tuple[int, float] | None = None,
) -> list[HistoryRun]:
    """Write `commits` runs for every series under out_dir/<series>/<nn>-<sha>/; returns them in order.

    captures=False drops the capture traces of serving-decode runs (a third of a small run's ingest
    time; the trend's metrics do not depend on them). slow_node (index, factor): the regression is one
    CUDA-graph node instead (write_scenario's slow_node, from regression_at on; pass slow_kernel=None for it
    alone); the runs then carry graph node ids (graph_nodes=True), so a trend can follow the node."""
    out = Path(out_dir)
    runs = []
    for name, ranks in series:
        for i in range(commits):
            sha = commit_sha(i)
            regressed = i >= regression_at
            slow = (
                slow_kernel
                if regressed
                else ((drift[1], drift[2]) if drift is not None and i >= drift[0] else None)
            )
            run_dir = out / name / f"{i:02d}-{sha}"
            write_scenario(
                scenario,
                run_dir,
                ranks=ranks,
                steps=steps,
                layers=layers,
                seed=seed * 1000 + i,
                slow_kernel=slow,
                run_label=f"{name}@{sha}",
                graph_nodes=slow_node is not None,
                slow_node=slow_node if regressed else None,
            )
            if not captures:
                shutil.rmtree(run_dir / "capture_traces", ignore_errors=True)
            when = (START + timedelta(hours=6 * i)).strftime("%Y-%m-%dT%H:%M:%SZ")
            runs.append(HistoryRun(run_dir, name, sha, when, i, regressed, slow))
    return runs

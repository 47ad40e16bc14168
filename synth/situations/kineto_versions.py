"""The same simulated training run, written as older versions of the PyTorch profiler wrote it.

The 2021 Kineto (PyTorch 1.8/1.9) spelled every category differently (`Operator`, `Runtime`, `Kernel`,
`Memcpy`, flows `async`/`launch`, ProfilerStep#N as an `Operator`), and the autograd profiler's
export_chrome_trace (PyTorch <= 1.7) wrote a bare array of uncategorised events on pids "CPU functions"
and "CUDA functions" with `cpu_to_cuda` flows from the op. A real 2021 ResNet-50 trace landed with no step
("the trace marks no steps" over six ProfilerStep#N), no op for any kernel and a critical path over a
sliver of the window: every stage looked for the modern spellings only.

`kineto-2021` and `autograd-profiler` run the simulator's one-rank training workload (synth/sim.py,
three ProfilerSteps) and write it with synth/kineto.py's spelling of that version; the expectations come
from the simulated schedule (synth/truth.py), which is the same whatever the spelling: each step's host
window (its ProfilerStep#N annotation), its GPU activities, those with a launch and those launched inside
an op, its busy time. tests/test_kineto_versions.py also ingests the modern spelling of the same run and
compares the tables row by row.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from ..scenario import write_scenario
from ..truth import load_truth
from . import situation

RUN = {"ranks": 1, "steps": 3, "layers": 1, "seed": 3}


def simulated_run(out: Path, spelling: str) -> dict:
    """Write the one-rank training run in `spelling` into out (the trace only); return its expectations."""
    with tempfile.TemporaryDirectory() as tmp:
        write_scenario("training", tmp, spelling=spelling, **RUN)
        truth = load_truth(tmp)
        for name in truth["files"].values():
            shutil.copyfile(Path(tmp) / name, out / name)
    steps = {
        # the workload names step k `ProfilerStep#{k + 1}`
        str(row["step"] + 1): {
            "host_start_ns": row["host_start_ns"],
            "host_end_ns": row["host_end_ns"],
            "activities": row["n_activities"],
            "linked": row["n_linked"],
            "with_op": row["n_with_op"],
            "gpu_busy_ns": row["busy_ns"],
        }
        for row in truth["steps"]
    }
    return {"spelling": spelling, "run": RUN, "steps": steps}


@situation(
    "kineto-2021",
    "a training run written as the 2021 Kineto (PyTorch 1.8/1.9) wrote it: Operator / Runtime / Kernel / "
    "Memcpy / Memset categories, `async` launch flows, ProfilerStep#N as an Operator; read as the modern "
    "spelling: the same steps, launches and ops",
)
def kineto_2021(out: Path) -> dict:
    return simulated_run(out, "kineto-2021")


@situation(
    "autograd-profiler",
    "a training run written as torch.autograd.profiler's export_chrome_trace (PyTorch <= 1.7) wrote it: a "
    "bare array, ops and GPU work without a category on pids 'CPU functions' / 'CUDA functions', "
    "`cpu_to_cuda` flows from the op; the same steps, ops and busy time",
)
def autograd_profiler(out: Path) -> dict:
    return simulated_run(out, "autograd")

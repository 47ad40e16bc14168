"""Situations: small synthetic traces of one shape each, with the interpretation a correct analysis gives.

Real traces showed the analyses telling the wrong story in recurring situations (a blocking copy at the
end of a step, a DataLoader stall, a backward thread, eager attention, GPU work queued before the
window ...). Each situation here writes a trace of that shape (synth/situations/timeline.py) and a
`ground_truth.json` whose `expect` block says what the views must conclude: the critical stream, the
GPU share of the critical path, an idle gap's class, a kernel's category, a launch site. Tests read the
expectations (tests/test_situations.py); `tracehouse synth SITUATION -o DIR` writes one for a user.

A module registers its situations with `@situation(name, summary)`; every module of this package is
imported, so a new situation is a new function in a module, nothing else.
"""

from __future__ import annotations

import importlib
import json
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tracehouse.errors import InvalidArgument


@dataclass(frozen=True)
class Situation:
    name: str
    summary: str
    write: Callable[[Path], dict[str, Any]]  # writes the trace files into a folder, returns `expect`


SITUATIONS: dict[str, Situation] = {}


def situation(name: str, summary: str) -> Callable:
    def register(fn: Callable[[Path], dict[str, Any]]) -> Callable[[Path], dict[str, Any]]:
        if name in SITUATIONS:
            raise ValueError(f"situation {name!r} registered twice")
        SITUATIONS[name] = Situation(name, summary, fn)
        return fn

    return register


def _load() -> None:
    for mod in pkgutil.iter_modules(__path__):
        if mod.name != "timeline":
            importlib.import_module(f"{__name__}.{mod.name}")


def write_situation(name: str, out_dir: str | Path) -> Path:
    """Write situation `name` into out_dir (trace files + ground_truth.json); return out_dir."""
    if name not in SITUATIONS:
        raise InvalidArgument(f"unknown situation {name!r}; choose one of {', '.join(sorted(SITUATIONS))}")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    s = SITUATIONS[name]
    expect = s.write(out)
    truth = {
        "schema": "tracehouse-situation-truth/1",
        "situation": name,
        "summary": s.summary,
        "time_unit": "ns",
        "expect": expect,
    }
    (out / "ground_truth.json").write_text(
        json.dumps(truth, indent=2, sort_keys=True) + "\n", encoding="utf-8"
    )
    return out


_load()

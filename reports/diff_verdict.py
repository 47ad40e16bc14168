"""The diff's comparability verdict: before any figure, whether two runs compare step for step, and if not,
on what basis they are compared.

It reads each run's row of sql/run_comparability (framework, model, hardware, what its steps are, how many,
their phases and batch sizes) and its data-quality flags (sql/data_quality), and composes:
- the basis: `per_step` when both runs' steps are steps (marked by the program, or inferred from repeating
  bursts of launch calls); `per_launch` when a run has no step (`whole`: its one step is the whole profiled
  window, so "per step" would be "per window", and two windows need not hold the same work);
- the status: `comparable`, `comparable with caveats` (every check that failed or could not be made is a
  caveat), or `not comparable per step` (the per-launch basis: the per-step headline is withheld);
- one line per check, both runs' values beside it.
Which flags qualify: an error or a warning on either run (an info flag says how to read a figure; it is
listed with the others, not a caveat); the step-marker flags are the basis's own check.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# flags whose subject is the step basis check itself (said there, not again among the caveats)
STEP_FLAGS = {"no_step_markers", "few_steps"}
IDENTITY = (("model", "model"), ("hardware", "hardware"), ("framework", "framework"))


@dataclass
class Check:
    what: str  # model, hardware, framework, phases, batch sizes, steps, step markers, data quality
    base: str
    target: str
    outcome: (
        str  # same, differs, unknown (neither run says), one side (only one says), withheld, flagged, clean
    )
    note: str  # what it means for the diff ('' when nothing)


@dataclass
class Flag:
    flag: str
    severity: str  # error / warning / info (sql/data_quality)
    rows: int  # how many ranks / steps it was raised on
    message: str


@dataclass
class Verdict:
    status: str  # comparable / comparable with caveats / not comparable per step
    basis: str  # per_step / per_launch
    reason: str  # why the basis: '' for per_step, else which run has no step markers
    caveats: list[str] = field(default_factory=list)
    checks: list[Check] = field(default_factory=list)
    base_flags: list[Flag] = field(default_factory=list)
    target_flags: list[Flag] = field(default_factory=list)


def _text(value) -> str:
    return "–" if value is None or value == "" else str(value)


def _identity_check(what: str, b, t) -> tuple[Check, str | None]:
    if b is None and t is None:
        return Check(what, "–", "–", "unknown", "neither trace says"), None
    if b is None or t is None:
        note = f"only the {'target' if b is None else 'base'} says: cannot confirm it is the same"
        return Check(what, _text(b), _text(t), "one side", note), f"{what}: {note}"
    if b != t:
        return Check(what, b, t, "differs", f"different {what}"), f"different {what} ({b} → {t})"
    return Check(what, b, t, "same", ""), None


def _basis(base: dict, target: dict) -> tuple[str, str]:
    """(basis, reason): per_launch when a run has no step marker and no inferred step (its one step per rank is
    the whole trace window, `whole`) or no step at all."""
    missing = [
        side for side, c in (("base", base), ("target", target)) if c["step_basis"] in ("whole", "none")
    ]
    if not missing:
        return "per_step", ""
    if len(missing) == 2:
        return "per_launch", "neither run has step markers (each one's step is its whole trace window)"
    return "per_launch", f"the {missing[0]} run has no step markers (its one step is the whole trace window)"


def _step_checks(base: dict, target: dict, basis: str, launches: tuple[int, int]) -> tuple[list, list]:
    checks, caveats = [], []
    sb, st = base["step_basis"], target["step_basis"]
    if basis == "per_launch":
        checks.append(Check("step markers", sb, st, "withheld", "no per-step figure: compared per launch"))
    elif "inferred" in (sb, st):
        note = "steps inferred from repeating bursts of launch calls, not marked by the program"
        checks.append(Check("step markers", sb, st, "differs" if sb != st else "same", note))
        caveats.append(note)
    else:
        checks.append(Check("step markers", sb, st, "same", ""))
    b, t = base["steps"], target["steps"]
    if basis == "per_launch":
        lb, lt = launches
        note = (
            f"the windows hold {lb} and {lt} launches (× {lt / lb:.3f}): a change in launch count is the "
            "window's, not the program's"
            if lb and lt
            else "a run has no launch in its window"
        )
        checks.append(Check("steps", str(b), str(t), "differs" if lb != lt else "same", note))
    elif b != t:
        note = f"different number of steps ({b} → {t}): each figure is a mean over its run's steps"
        checks.append(Check("steps", str(b), str(t), "differs", note))
        caveats.append(note)
    else:
        checks.append(Check("steps", str(b), str(t), "same", ""))
    return checks, caveats


def _flags(rows: list) -> list[Flag]:
    return [Flag(flag, severity, int(n), message) for flag, severity, n, message in rows]


def _flag_caveat(side: str, flags: list[Flag]) -> str | None:
    named = [f"{f.flag} ({f.severity})" for f in flags if f.severity != "info" and f.flag not in STEP_FLAGS]
    return f"{side} has data-quality flags: {', '.join(named)}" if named else None


def verdict(base: dict, target: dict) -> Verdict:
    """The verdict of two runs' facts (warehouse.diff_facts.run_facts: `comparability`, `flags`, `launches`)."""
    cb, ct = base["comparability"], target["comparability"]
    basis, reason = _basis(cb, ct)
    checks, caveats = [], []
    for what, key in IDENTITY:
        check, caveat = _identity_check(what, cb[key], ct[key])
        checks.append(check)
        caveats += [caveat] if caveat else []
    for what, key in (("phases", "phases"), ("batch sizes", "batch_sizes")):
        b, t = cb[key], ct[key]
        if b != t:
            note = f"different {what} ({_text(b)} → {_text(t)})"
            checks.append(Check(what, _text(b), _text(t), "differs", note))
            caveats.append(note)
        else:
            checks.append(Check(what, _text(b), _text(t), "same" if b is not None else "unknown", ""))
    step_checks, step_caveats = _step_checks(cb, ct, basis, (base["launches"], target["launches"]))
    checks += step_checks
    caveats += step_caveats
    bflags, tflags = _flags(base["flags"]), _flags(target["flags"])
    flagged = [c for c in (_flag_caveat("base", bflags), _flag_caveat("target", tflags)) if c]
    checks.append(
        Check(
            "data quality",
            f"{len(bflags)} flag{'s' if len(bflags) != 1 else ''}",
            f"{len(tflags)} flag{'s' if len(tflags) != 1 else ''}",
            "flagged" if flagged else "clean",
            "; ".join(flagged),
        )
    )
    caveats += flagged
    if basis == "per_launch":
        status = "not comparable per step"
    else:
        status = "comparable with caveats" if caveats else "comparable"
    return Verdict(status, basis, reason, caveats, checks, bflags, tflags)

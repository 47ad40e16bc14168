"""Keep the fast tier fast: the tests whose call took BUDGET seconds or more go to tests/slow_tests.txt.

    TRACEHOUSE_TEST_FAST=1 .venv/bin/python -m pytest -q -n auto -m "not slow" --durations=0 > durations.log
    .venv/bin/python tests/tier.py durations.log            # adds the fast tier's tests over the budget
    .venv/bin/python tests/tier.py --budget 1.0 durations.log

The fast tier (`make test-fast`) is for development: under 3 minutes on the 2-core dev machine. Besides
the tests slow by what they need (tests/conftest.py SLOW_NEEDS: real traces, Spark, the browser,
whole reports), a test whose call phase took BUDGET seconds or more in a measured fast-tier run (pytest
--durations=0, 2 workers on 2 cores) is listed in tests/slow_tests.txt, one node id a line, and marked
slow by conftest: `make test` (CI) still runs it. A fixture's setup is not counted (it is shared by the
module's other tests). Listed tests stay listed; delete a line to measure it again.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

LIST = Path(__file__).with_name("slow_tests.txt")
BUDGET_S = 1.0
LINE = re.compile(r"^(\d+(?:\.\d+)?)s call\s+(\S.*)$")
HEADER = (
    "# tests of the fast tier whose call took >= {budget} s in a measured run: marked slow (tests/tier.py)\n"
)


def over_budget(log: str, budget: float) -> list[str]:
    """Node ids of the calls in a `pytest --durations=0` log that took `budget` seconds or more."""
    out = []
    for line in log.splitlines():
        found = LINE.match(line.strip())
        if found and float(found.group(1)) >= budget:
            out.append(found.group(2).strip())
    return out


def listed(path: Path = LIST) -> set[str]:
    if not path.is_file():
        return set()
    return {
        s for s in (line.strip() for line in path.read_text().splitlines()) if s and not s.startswith("#")
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("log", type=Path, help="the output of a pytest run with --durations=0")
    ap.add_argument("--budget", type=float, default=BUDGET_S, help="seconds (default %(default)s)")
    args = ap.parse_args(argv)
    before = listed()
    found = over_budget(args.log.read_text(), args.budget)
    if not found and "slowest" not in args.log.read_text():
        print(f"{args.log}: no durations found (run pytest with --durations=0)", file=sys.stderr)
        return 1
    after = before | set(found)
    LIST.write_text(HEADER.format(budget=args.budget) + "".join(f"{t}\n" for t in sorted(after)))
    print(f"{len(after) - len(before)} added, {len(after)} listed in {LIST}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

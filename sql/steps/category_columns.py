"""The per-category columns of `steps` and `step_latency`, written from the category vocabulary.

The categories are rule data (`warehouse.rules.CATEGORIES`: the vocabulary every rule of
sql/rules/kernel_categories.csv and a user's --rules file must use). The wide columns that docs/tables.md
promises (`steps.<category>_ns` for every category; `step_latency`'s own few, the rest folded into its
other_ns) are not typed by hand: the lines between a `-- generated: <block>` comment and `-- end
generated` in sql/steps/steps.sql and sql/steps/step_latency.sql are written here from the vocabulary, so
a category added to it becomes a column of both views by running

    python -m tracehouse.sql.steps.category_columns            # rewrite the generated lines
    python -m tracehouse.sql.steps.category_columns --check    # exit 1 when a view's lines are not what it writes

(tests/test_report_views.py runs the check). The view files stay plain SQL that the catalogue, Spark's
transpiler and the view cases read as they are.
"""

from __future__ import annotations

import re
import sys
import textwrap
from pathlib import Path

from tracehouse.warehouse.rules import CATEGORIES

HERE = Path(__file__).resolve().parent

#: step_latency's own category columns; every other category folds into its other_ns
LATENCY_OWN = ("gemm", "attention", "moe", "communication", "norm", "elementwise")

BLOCK = re.compile(
    r"(?m)^(?P<indent>[ \t]*)-- generated: (?P<name>[\w ]+)\n(?P<body>.*?)^[ \t]*-- end generated\n",
    re.DOTALL,
)


def _wrapped(items: list[str], indent: str, width: int = 108) -> str:
    """The items, comma-separated, as many on a line as fit in width (an item is never split)."""
    lines = [indent + items[0]]
    for item in items[1:]:
        if len(lines[-1]) + len(item) + 2 > width:
            lines[-1] += ","
            lines.append(indent + item)
        else:
            lines[-1] += ", " + item
    return "\n".join(lines) + "\n"


def blocks() -> dict[tuple[str, str], str]:
    """{(file, block): its generated lines}."""
    folded = [c for c in CATEGORIES if c not in LATENCY_OWN]
    fold = textwrap.wrap(
        "sum(" + " + ".join(f"{c}_ns" for c in folded) + ") AS other_ns",
        width=100,
        initial_indent="       ",
        subsequent_indent="           ",
        break_on_hyphens=False,
    )
    return {
        ("steps.sql", "per category"): ",\n".join(
            f"           sum(dur_ns) FILTER (WHERE category = '{c}') AS {c}_ns" for c in CATEGORIES
        )
        + "\n",
        ("steps.sql", "category columns"): _wrapped(
            [f"coalesce(c.{c}_ns, 0) AS {c}_ns" for c in CATEGORIES], "    "
        ).rstrip("\n")
        + ",\n",
        ("step_latency.sql", "category columns"): _wrapped(
            [f"sum({c}_ns) AS {c}_ns" for c in LATENCY_OWN if c != "other"], "       "
        ).rstrip("\n")
        + ",\n"
        + "\n".join(fold)
        + "\n",
    }


def rewritten(path: Path) -> str:
    """The file's text with its generated lines as `blocks` writes them."""
    wanted = blocks()

    def replace(found: re.Match) -> str:
        body = wanted[(path.name, found.group("name").strip())]
        indent = found.group("indent")
        return f"{indent}-- generated: {found.group('name')}\n{body}{indent}-- end generated\n"

    return BLOCK.sub(replace, path.read_text())


def stale() -> list[str]:
    """The view files whose generated lines differ from what `blocks` writes."""
    return [
        name
        for name in ("steps.sql", "step_latency.sql")
        if rewritten(HERE / name) != (HERE / name).read_text()
    ]


def main(argv: list[str]) -> int:
    if "--check" in argv:
        out = stale()
        for name in out:
            print(
                f"sql/steps/{name}: the category columns are not the vocabulary's: run python -m tracehouse.sql.steps.category_columns"
            )
        return 1 if out else 0
    for name in ("steps.sql", "step_latency.sql"):
        (HERE / name).write_text(rewritten(HERE / name))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

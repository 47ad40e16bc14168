"""The kernel category rule table: shipped data, versioned, extendable by the user.

The rules live in ``sql/rules/kernel_categories.csv`` (columns ``rule_order, rule_name, category, pattern,
op_pattern, op_shape, note``): an ordered list of conditions on a GPU activity; the first match by
``rule_order`` decides the activity's category. A rule's ``pattern`` is a regular expression matched against
the activity's name; a rule may also (``op_pattern``, optional) require a launching op: the innermost
``cpu_op`` around the activity's launch call, or one of the cpu_ops enclosing it (``OP_LEVELS`` levels in
all), whose name matches ``op_pattern`` and whose input dims satisfy ``op_shape`` (optional, one of
``OP_SHAPES``), or (``module_pattern``, optional) require the innermost ``nn.Module`` frame around the launch
(with_stack traces) to match. Name-only rules decide ``sql/kernels/kernel_category.sql`` (per name); every rule decides
``sql/kernels/activity_category.sql`` (per activity). Patterns are
RE2 (DuckDB's ``regexp_matches``) and must also mean the same in Java regex (Spark's ``RLIKE``): no
lookarounds, no backreferences, ``(?i)`` for case-insensitive matching. A match is a search, not a full
match: anchor with ``^``/``$`` where needed.

The version of the shipped table is in ``sql/rules/kernel_categories.version.json``
(``{"rules_version": ..., "sha256": ...}``); ``sha256`` is the hash of the CSV file so a test can tell
when the rules changed without a version bump. A user file in the same CSV format (``note`` optional) is
placed before the shipped rules, so user rules win; the loaded table then reports the version
``<shipped>+user.<first 12 hex of the user file's sha256>`` and prefixes user rule names with ``user:``.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import duckdb
from tracehouse.warehouse import local_db

from tracehouse.errors import TracehouseError

if TYPE_CHECKING:
    import pyarrow as pa

RULES_DIR = Path(__file__).resolve().parents[1] / "sql" / "rules"
SHIPPED_RULES = RULES_DIR / "kernel_categories.csv"
VERSION_FILE = RULES_DIR / "kernel_categories.version.json"

#: The shipped vocabulary of categories (docs/words.md, "category").
CATEGORIES: tuple[str, ...] = (
    "gemm",
    "attention",
    "moe",
    "communication",
    "norm",
    "activation",
    "rope",
    "quantize",
    "sampling",
    "elementwise",
    "reduction",
    "memory",
    "convolution",
    "embedding",
    "other",
)

REQUIRED_COLUMNS: tuple[str, ...] = ("rule_order", "rule_name", "category", "pattern")
OPTIONAL_COLUMNS: tuple[str, ...] = ("op_pattern", "op_shape", "module_pattern", "note")

#: How many cpu_ops of the launching op chain an ``op_pattern`` is tried on: the innermost cpu_op around the
#: launch call (level 0) and the cpu_ops enclosing it, up to level OP_LEVELS - 1 (sql/kernels/activity_category.sql).
OP_LEVELS = 5

#: The shape conditions a rule can put on its launching op's `Input Dims` (sql/kernels/activity_category.sql and
#: sql/rules/README.md define them exactly). `scores` also defines the run's attention score tensors that the
#: other three compare with.
OP_SHAPES: tuple[str, ...] = ("scores", "scores_matmul", "on_scores")

#: How many Python frames below an ``nn.Module`` frame a ``module_pattern`` reaches (without entering a nested
#: module): the launch's innermost frame must be the module frame or within MODULE_LEVELS - 1 levels below it.
MODULE_LEVELS = 7

# Constructs that RE2 or Java regex lack, or that mean different things in the two.
_NOT_PORTABLE: tuple[tuple[str, str], ...] = (
    (r"\(\?<?[=!]", "lookaround (?=, (?!, (?<=, (?<!) is not supported by RE2"),
    (r"\\[1-9]", "backreference (\\1..\\9) is not supported by RE2"),
    (r"\(\?P?<[A-Za-z]", "named groups are spelled differently in RE2 and Java; use a plain group"),
    (r"[*+?}]\+", "possessive quantifiers are not supported by RE2"),
    (r"\(\?>", "atomic groups are not supported by RE2"),
    (r"\\[AZzGQE]", "\\A, \\Z, \\z, \\G, \\Q..\\E differ between RE2 and Java; use ^ and $"),
    (r"\[\[:", "POSIX classes ([[:alpha:]]) are not supported by Java regex"),
    (r"\\p\{", "Unicode classes differ between RE2 and Java"),
)


class RulesError(TracehouseError, ValueError):
    """A category rule file that cannot be used: names the file, the line and what is wrong."""

    hint = (
        "fix the rule file (columns rule_order,rule_name,category,pattern[,op_pattern,op_shape,note]) "
        "and run again"
    )


def _read_version() -> tuple[str, str]:
    meta = json.loads(VERSION_FILE.read_text(encoding="utf-8"))
    return str(meta["rules_version"]), str(meta.get("sha256", ""))


RULES_VERSION: str = _read_version()[0]


def shipped_rules_sha256() -> str:
    """sha256 of the shipped CSV as it is on disk (compare with the one recorded beside the version)."""
    return hashlib.sha256(SHIPPED_RULES.read_bytes()).hexdigest()


def check_pattern(pattern: str, where: str, con: object | None) -> None:
    for construct, why in _NOT_PORTABLE:
        if re.search(construct, pattern):
            raise RulesError(f"{where}: pattern {pattern!r} is not portable: {why}")
    if con is None:  # pragma: no cover - duckdb is a dependency; Python's re is the nearest stand-in
        try:
            re.compile(pattern)
        except re.error as exc:
            raise RulesError(f"{where}: invalid regular expression {pattern!r}: {exc}") from None
        return
    # the engine the view runs on is the judge: RE2 as DuckDB compiles it
    try:
        con.execute("SELECT regexp_matches('', ?)", [pattern]).fetchall()  # type: ignore[attr-defined]
    except duckdb.Error as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise RulesError(f"{where}: invalid RE2 regular expression {pattern!r}: {first}") from None


def regex_judge() -> object | None:
    return local_db.connect()


def read_rule_csv(
    text: str,
    source: str,
    required: tuple[str, ...],
    optional: tuple[str, ...] | None,
    expected: str,
    empty: str,
    error: type[Exception] = RulesError,
) -> Iterator[tuple[int, dict[str, str]]]:
    """The rows of a rule table's CSV text, as (line number, {column: stripped cell}): the one reader of
    kernel_categories.csv, fusion_patterns.csv, launch_site_plumbing.csv, device_peaks.csv and the user's
    files in their formats.

    The first non-blank record is the header (a UTF-8 BOM dropped); blank records are skipped; a
    record with more fields than the header is refused (an unquoted comma in a pattern); a short one
    leaves the missing cells out of its dict. `required`: columns the header must have; `optional`: the
    others it may have (None: any). `expected` ends a header problem's message (what the header should
    be); `empty` is the message of a file with no header. Problems raise `error`, naming source:line.
    """
    reader = csv.reader(io.StringIO(text))
    header: list[str] | None = None
    for record in reader:
        line = reader.line_num
        if not record or all(not cell.strip() for cell in record):
            continue
        if header is None:
            header = [cell.strip().lstrip("\ufeff") for cell in record]
            missing = [c for c in required if c not in header]
            # a misspelt optional column (op_patern) would otherwise be ignored: its rules change meaning
            unknown = [] if optional is None else [c for c in header if c not in required + optional]
            if missing or unknown:
                problems = ([f"lacks column(s) {', '.join(missing)}"] if missing else []) + (
                    [f"has unknown column(s) {', '.join(unknown)}"] if unknown else []
                )
                raise error(
                    f"{source}:{line}: header {' and '.join(problems)}"
                    + (f"; {expected}" if expected else "")
                )
            continue
        if len(record) > len(header):
            raise error(
                f"{source}:{line}: {len(record)} fields but the header has {len(header)} "
                "(quote fields that contain commas)"
            )
        yield line, dict(zip(header, (cell.strip() for cell in record)))
    if header is None:
        raise error(f"{source}: {empty}")


def _parse(text: str, source: str, con: object | None) -> list[dict[str, object]]:
    """Parse and validate one rule file; its rules sorted by rule_order."""
    rows: list[dict[str, object]] = []
    seen_names: dict[str, int] = {}
    seen_orders: dict[int, int] = {}
    header = f"{','.join(REQUIRED_COLUMNS)}[,{','.join(OPTIONAL_COLUMNS)}]"
    for line, row in read_rule_csv(
        text,
        source,
        REQUIRED_COLUMNS,
        OPTIONAL_COLUMNS,
        f"expected {header}",
        f"empty rule file; expected a header {header}",
    ):
        where = f"{source}:{line}"
        name = row.get("rule_name", "")
        if not name:
            raise RulesError(f"{where}: empty rule_name")
        where = f"{source}:{line} (rule {name!r})"
        try:
            order = int(row.get("rule_order", ""))
        except ValueError:
            raise RulesError(f"{where}: rule_order {row.get('rule_order')!r} is not an integer") from None
        category = row.get("category", "")
        if category not in CATEGORIES:
            raise RulesError(
                f"{where}: unknown category {category!r}; expected one of: {', '.join(CATEGORIES)}"
            )
        pattern = row.get("pattern", "")
        op_pattern = row.get("op_pattern", "")
        op_shape = row.get("op_shape", "")
        module_pattern = row.get("module_pattern", "")
        if not pattern and not op_pattern and not module_pattern:
            raise RulesError(
                f"{where}: empty pattern (a rule needs a pattern, an op_pattern or a module_pattern)"
            )
        if op_pattern and module_pattern:
            raise RulesError(
                f"{where}: a rule has an op_pattern or a module_pattern, not both (write two rules)"
            )
        if module_pattern:
            check_pattern(module_pattern, where, con)
        if pattern:
            check_pattern(pattern, where, con)
        if op_pattern:
            check_pattern(op_pattern, where, con)
        if op_shape and op_shape not in OP_SHAPES:
            raise RulesError(
                f"{where}: unknown op_shape {op_shape!r}; expected one of: {', '.join(OP_SHAPES)}"
            )
        if op_shape and not op_pattern:
            raise RulesError(
                f"{where}: op_shape {op_shape!r} needs an op_pattern (the op whose dims it reads)"
            )
        if name in seen_names:
            raise RulesError(f"{where}: rule_name repeats the one on line {seen_names[name]}")
        if order in seen_orders:
            raise RulesError(f"{where}: rule_order {order} repeats the one on line {seen_orders[order]}")
        seen_names[name], seen_orders[order] = line, line
        rows.append(
            {
                "rule_order": order,
                "rule_name": name,
                "category": category,
                "pattern": pattern,
                "op_pattern": op_pattern or None,
                "op_shape": op_shape or None,
                "module_pattern": module_pattern or None,
            }
        )
    rows.sort(key=lambda r: r["rule_order"])  # type: ignore[arg-type, return-value]
    return rows


def match_literals(pattern: str | None) -> list[str]:
    """Lowercase substrings, one of which the lowercased text of every match of `pattern` contains ([]:
    none is sure, or no pattern). `(?i)(rms_?norm|layer_?norm)` gives ["norm"]; `^(Cijk_|nvjet_)`
    ["cijk_", "nvjet_"]; `.*` [].

    The views test these (`contains(lower(name), literal)`) before the regular expression: DuckDB compiles
    a pattern read from a table once per row it is tried on (~0.1 ms each: 46 name rules on 32 kernel
    names were most of a kernel_summary query), and the substring test spares that for the pairs that
    cannot match. A necessary condition only, so the rows are the same; lowercasing both sides keeps it
    necessary under `(?i)` (for ASCII names: RE2 folds a few non-ASCII letters, such as U+017F to s,
    that lower() leaves alone)."""
    if not pattern:
        return []
    try:
        from re import _parser as sre_parse  # type: ignore[attr-defined]
    except ImportError:  # pragma: no cover - Python < 3.11
        import sre_parse  # type: ignore[no-redef]
    try:
        parsed = sre_parse.parse(pattern)
    except Exception:  # noqa: BLE001 - the loader has already validated it with RE2
        return []
    found = _needed(list(parsed), sre_parse)
    return sorted(found) if found else []


def _needed(items: list, sre_parse) -> set[str] | None:
    """For a sequence of parsed regex items: a set of lowercase literals one of which every match
    contains, the most selective one found (its shortest literal the longest); None when none is sure."""
    choices: list[set[str]] = []
    run: list[str] = []
    for op, arg in items + [(None, None)]:
        if op is sre_parse.LITERAL:
            run.append(chr(arg))
            continue
        if run:
            choices.append({"".join(run).lower()})
            run = []
        if op is sre_parse.SUBPATTERN:
            need = _needed(list(arg[-1]), sre_parse)
        elif op is sre_parse.BRANCH:
            branches = [_needed(list(branch), sre_parse) for branch in arg[1]]
            need = None if any(b is None for b in branches) else set().union(*branches)
        elif op in (sre_parse.MAX_REPEAT, sre_parse.MIN_REPEAT) and arg[0] >= 1:
            need = _needed(list(arg[2]), sre_parse)
        else:
            need = None
        if need:
            choices.append(need)
    if not choices:
        return None
    return max(choices, key=lambda need: (min(len(x) for x in need), -len(need)))


def load_category_rules(user_file: str | Path | None = None) -> pa.Table:
    """The effective rule table: user rules (if any) first, then the shipped ones.

    Columns: ``rule_order`` (int32, 1-based position in the effective order: the lowest wins),
    ``rule_name`` (user rules prefixed ``user:``), ``category``, ``pattern`` (RE2/Java regex searched in
    the activity name; '' matches every name), ``op_pattern`` (regex searched in the names of the launching
    op chain; NULL: the rule is on the name alone), ``op_shape`` (a shape condition of OP_SHAPES on that op's
    input dims; NULL: none), ``module_pattern`` (regex searched in the name of the innermost ``nn.Module: ...``
    Python frame around the launch; NULL: none), ``pattern_literals``, ``op_pattern_literals`` and
    ``module_pattern_literals`` (each pattern's match_literals: a prefilter, never a condition of its own)
    and ``rules_version`` (the same on every row: the version of the whole table).
    Raises RulesError (a ValueError) naming the file and line of a bad rule.
    """
    import pyarrow as pa  # only to build the rule table (ingest reads RULES_VERSION, never the rules)

    con = regex_judge()
    try:
        shipped = _parse(SHIPPED_RULES.read_text(encoding="utf-8"), str(SHIPPED_RULES), con)
        version = RULES_VERSION
        user: list[dict[str, object]] = []
        if user_file is not None:
            path = Path(user_file)
            try:
                data = path.read_bytes()
            except OSError as exc:
                raise RulesError(
                    f"{path}: cannot read the category rule file: {exc.strerror or exc}"
                ) from None
            try:
                text = data.decode("utf-8")
            except UnicodeDecodeError:
                raise RulesError(f"{path}: the category rule file is not UTF-8 text") from None
            user = _parse(text, str(path), con)
            for row in user:
                if not str(row["rule_name"]).startswith("user:"):
                    row["rule_name"] = f"user:{row['rule_name']}"
            version = f"{RULES_VERSION}+user.{hashlib.sha256(data).hexdigest()[:12]}"
    finally:
        if con is not None:
            con.close()  # type: ignore[attr-defined]
    rules = user + shipped
    return pa.table(
        {
            "rule_order": pa.array(range(1, len(rules) + 1), type=pa.int32()),
            "rule_name": pa.array([r["rule_name"] for r in rules], type=pa.string()),
            "category": pa.array([r["category"] for r in rules], type=pa.string()),
            "pattern": pa.array([r["pattern"] for r in rules], type=pa.string()),
            "op_pattern": pa.array([r["op_pattern"] for r in rules], type=pa.string()),
            "op_shape": pa.array([r["op_shape"] for r in rules], type=pa.string()),
            "module_pattern": pa.array([r["module_pattern"] for r in rules], type=pa.string()),
            **{
                f"{column}_literals": pa.array(
                    [match_literals(r[column]) for r in rules],
                    type=pa.list_(pa.string()),  # type: ignore[arg-type]
                )
                for column in ("pattern", "op_pattern", "module_pattern")
            },
            "rules_version": pa.array([version] * len(rules), type=pa.string()),
        }
    )


# ---- the one-time work rule table (sql/rules/one_time_work.csv, read by sql/steps/one_time_work.sql) ----------
ONE_TIME_RULES = RULES_DIR / "one_time_work.csv"
ONE_TIME_VERSION_FILE = RULES_DIR / "one_time_work.version.json"
ONE_TIME_KINDS: tuple[str, ...] = (
    "context_creation",
    "module_loading",
    "library_init",
    "allocator_growth",
    "first_launch",
    "compile",
)
#: which host events a rule is tried on: `call` a CUDA/HIP runtime or driver call (cat cuda_runtime /
#: cuda_driver), `overhead` a profiler overhead record (CUPTI's module loading), `range` a cpu_op or
#: user_annotation range, `any` all three
ONE_TIME_EVENTS: tuple[str, ...] = ("call", "overhead", "range", "any")
ONE_TIME_COLUMNS: tuple[str, ...] = (
    "rule_order",
    "rule_name",
    "kind",
    "event",
    "pattern",
    "min_dur_ns",
    "first_step_only",
)


def one_time_rules_version() -> str:
    return str(json.loads(ONE_TIME_VERSION_FILE.read_text(encoding="utf-8"))["rules_version"])


def load_one_time_rules() -> pa.Table:
    """The shipped one-time work rules (sql/rules/one_time_work.csv): which host events are one-time setup
    (context creation, module loading, library handles, allocator growth, a slow first launch, compile).

    Columns: rule_order (int32), rule_name, kind (ONE_TIME_KINDS), event (ONE_TIME_EVENTS), pattern (RE2/Java
    regex searched in the event's name), literals (match_literals of the pattern: a prefilter), min_dur_ns
    (int64: the event counts only at or above this duration), first_step_only (bool: only in or before
    the rank's first step), rules_version. Raises RulesError naming the line of a bad rule."""
    import pyarrow as pa

    source = str(ONE_TIME_RULES)
    rows: list[dict[str, object]] = []
    seen: dict[str, int] = {}
    orders: dict[int, int] = {}
    con = regex_judge()
    try:
        for line, row in read_rule_csv(
            ONE_TIME_RULES.read_text(encoding="utf-8"),
            source,
            ONE_TIME_COLUMNS,
            ("note",),
            f"expected {','.join(ONE_TIME_COLUMNS)}[,note]",
            "empty rule file",
        ):
            name = row.get("rule_name", "")
            where = f"{source}:{line} (rule {name!r})"
            if not name or name in seen:
                raise RulesError(f"{where}: empty or repeated rule_name")
            try:
                order, min_dur = int(row.get("rule_order", "")), int(row.get("min_dur_ns", ""))
            except ValueError:
                raise RulesError(f"{where}: rule_order and min_dur_ns must be integers") from None
            if order in orders:
                raise RulesError(f"{where}: rule_order {order} repeats the one on line {orders[order]}")
            if row.get("kind") not in ONE_TIME_KINDS:
                raise RulesError(
                    f"{where}: unknown kind {row.get('kind')!r}; expected one of {ONE_TIME_KINDS}"
                )
            if row.get("event") not in ONE_TIME_EVENTS:
                raise RulesError(
                    f"{where}: unknown event {row.get('event')!r}; expected one of {ONE_TIME_EVENTS}"
                )
            if row.get("first_step_only") not in ("true", "false"):
                raise RulesError(f"{where}: first_step_only must be true or false")
            check_pattern(row.get("pattern", ""), where, con)
            seen[name], orders[order] = line, line
            rows.append({**row, "rule_order": order, "min_dur_ns": min_dur})
    finally:
        if con is not None:
            con.close()  # type: ignore[attr-defined]
    rows.sort(key=lambda r: r["rule_order"])  # type: ignore[arg-type, return-value]
    version = one_time_rules_version()
    return pa.table(
        {
            "rule_order": pa.array([r["rule_order"] for r in rows], type=pa.int32()),
            "rule_name": pa.array([r["rule_name"] for r in rows], type=pa.string()),
            "kind": pa.array([r["kind"] for r in rows], type=pa.string()),
            "event": pa.array([r["event"] for r in rows], type=pa.string()),
            "pattern": pa.array([r["pattern"] for r in rows], type=pa.string()),
            "literals": pa.array(
                [match_literals(str(r["pattern"])) for r in rows], type=pa.list_(pa.string())
            ),
            "min_dur_ns": pa.array([r["min_dur_ns"] for r in rows], type=pa.int64()),
            "first_step_only": pa.array([r["first_step_only"] == "true" for r in rows], type=pa.bool_()),
            "rules_version": pa.array([version] * len(rows), type=pa.string()),
        }
    )

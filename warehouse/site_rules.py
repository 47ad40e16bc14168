"""The launch-site plumbing rule table: which Python frames are launcher plumbing, not a launch site.

The rules live in ``sql/rules/launch_site_plumbing.csv`` (columns ``rule_order, rule_name, action,
pattern, note``): an ordered list of regular expressions searched in a Python frame's name (the
profiler's ``path/file.py(123): function``). The first match by ``rule_order`` decides the frame's
``action``: ``plumbing`` (framework or library machinery between the caller and the kernel: torch
internals, the Triton runtime, Inductor's generated code, kernel-library bindings ...) or ``site`` (a
rule that keeps a frame that a later rule would call plumbing). A frame no rule matches is a site.
``sql/kernels/kernel_launch_site.sql`` walks each launch's stack from the innermost frame outwards and takes
the first frame with a source file that is not plumbing.

Patterns follow the category rules' dialect (RE2 and Java regex, see warehouse/rules.py). The version is
in ``sql/rules/launch_site_plumbing.version.json`` with the CSV's sha256. A user file of the same format
(``TRACEHOUSE_SITE_RULES``, or the argument) goes before the shipped rules, so user rules win; the
version becomes ``<shipped>+user.<first 12 hex of its sha256>`` and user rule names get ``user:``.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pyarrow as pa
from tracehouse.warehouse.rules import (
    RULES_DIR,
    RulesError,
    check_pattern,
    match_literals,
    read_rule_csv,
    regex_judge,
)

SHIPPED_SITE_RULES = RULES_DIR / "launch_site_plumbing.csv"
SITE_VERSION_FILE = RULES_DIR / "launch_site_plumbing.version.json"
USER_SITE_RULES_ENV = "TRACEHOUSE_SITE_RULES"
ACTIONS: tuple[str, ...] = ("plumbing", "site")
REQUIRED: tuple[str, ...] = ("rule_order", "rule_name", "action", "pattern")


def site_rules_version() -> str:
    return str(json.loads(SITE_VERSION_FILE.read_text(encoding="utf-8"))["rules_version"])


def shipped_site_rules_sha256() -> str:
    return hashlib.sha256(SHIPPED_SITE_RULES.read_bytes()).hexdigest()


def user_site_rules_file() -> str | None:
    """The user's rule file named by TRACEHOUSE_SITE_RULES (None when unset or empty)."""
    return os.environ.get(USER_SITE_RULES_ENV) or None


def _parse(text: str, source: str, con: object | None) -> list[dict[str, object]]:
    rows: list[dict[str, object]] = []
    names: dict[str, int] = {}
    orders: dict[int, int] = {}
    header = f"{','.join(REQUIRED)}[,note]"
    for line, row in read_rule_csv(
        text, source, REQUIRED, None, f"expected {header}", f"empty rule file; expected a header {header}"
    ):
        name = row.get("rule_name", "")
        if not name:
            raise RulesError(f"{source}:{line}: empty rule_name")
        where = f"{source}:{line} (rule {name!r})"
        try:
            order = int(row.get("rule_order", ""))
        except ValueError:
            raise RulesError(f"{where}: rule_order {row.get('rule_order')!r} is not an integer") from None
        action = row.get("action", "")
        if action not in ACTIONS:
            raise RulesError(f"{where}: unknown action {action!r}; expected one of: {', '.join(ACTIONS)}")
        pattern = row.get("pattern", "")
        if not pattern:
            raise RulesError(f"{where}: empty pattern")
        check_pattern(pattern, where, con)
        if name in names:
            raise RulesError(f"{where}: rule_name repeats the one on line {names[name]}")
        if order in orders:
            raise RulesError(f"{where}: rule_order {order} repeats the one on line {orders[order]}")
        names[name], orders[order] = line, line
        rows.append({"rule_order": order, "rule_name": name, "action": action, "pattern": pattern})
    rows.sort(key=lambda r: r["rule_order"])  # type: ignore[arg-type, return-value]
    return rows


def load_site_rules(user_file: str | Path | None = None) -> pa.Table:
    """The effective plumbing rules: user rules (if any) first, then the shipped ones.

    Columns: rule_order (int32, 1-based effective order: the lowest wins), rule_name, action
    (plumbing | site), pattern, literals (lowercase substrings one of which every match contains, empty
    when none is sure: warehouse.rules.match_literals), rules_version (of the whole table). Raises
    RulesError on a bad rule."""
    con = regex_judge()
    try:
        rules = _parse(SHIPPED_SITE_RULES.read_text(encoding="utf-8"), str(SHIPPED_SITE_RULES), con)
        version = site_rules_version()
        if user_file is not None:
            path = Path(user_file)
            try:
                data = path.read_bytes()
            except OSError as exc:
                raise RulesError(
                    f"{path}: cannot read the launch-site rule file: {exc.strerror or exc}"
                ) from None
            try:
                text = data.decode("utf-8")
            except UnicodeDecodeError:
                raise RulesError(f"{path}: the launch-site rule file is not UTF-8 text") from None
            user = _parse(text, str(path), con)
            for row in user:
                if not str(row["rule_name"]).startswith("user:"):
                    row["rule_name"] = f"user:{row['rule_name']}"
            rules = user + rules
            version = f"{version}+user.{hashlib.sha256(data).hexdigest()[:12]}"
    finally:
        if con is not None:
            con.close()  # type: ignore[attr-defined]
    return pa.table(
        {
            "rule_order": pa.array(range(1, len(rules) + 1), type=pa.int32()),
            "rule_name": pa.array([r["rule_name"] for r in rules], type=pa.string()),
            "action": pa.array([r["action"] for r in rules], type=pa.string()),
            "pattern": pa.array([r["pattern"] for r in rules], type=pa.string()),
            "literals": pa.array(
                [match_literals(str(r["pattern"])) for r in rules], type=pa.list_(pa.string())
            ),
            "rules_version": pa.array([version] * len(rules), type=pa.string()),
        }
    )

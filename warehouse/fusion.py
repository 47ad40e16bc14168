"""The fusion catalogue: known fused kernels of SGLang, vLLM and TensorRT-LLM, shipped as data.

The catalogue lives in ``sql/rules/fusion_patterns.csv`` (format in ``sql/rules/fusion_patterns.README.md``):
one row per pattern, with the split kernels as an ordered list of steps (``split_1`` .. ``split_3``, each
a name regex plus the categories a kernel must have to count for that step), the fused kernel (regex and
categories), the framework, the source path of the fused implementation in that framework's tree, a
one-line rationale and a reference, the vendor whose GPUs run the fused kernel (``nvidia``, ``amd`` or
``any``) and the steps whose time the fused kernel removes. ``sql/fusion/fusion_match.sql`` matches it
against a run.

The version is in ``sql/rules/fusion_patterns.version.json`` (``{"catalog_version": ..., "sha256": ...}``);
``sha256`` is the hash of the CSV so a test can tell when the catalogue changed without a version bump.

``register_fusion_patterns(con)`` loads and validates the file and registers two tables:
- ``fusion_patterns``: pattern_id, framework, name, n_splits, fused_pattern, fused_categories,
  source_path, rationale, reference, catalog_version, pattern_key, requires_category, shape_rule,
  catalog_order (the line order of the file, 1-based), vendor (nvidia, amd or any)
- ``fusion_pattern_steps``: pattern_id, step (1-based), pattern, categories (``;``-separated), ops (regex of
  the launching host op, NULL: any), removed (the fused kernel removes this step's time; the other steps'
  work stays, done inside the fused kernel)
Regexes follow the rules of the category table (RE2 and Java regex alike; see warehouse/rules.py).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import duckdb
import pyarrow as pa
from tracehouse.warehouse.rules import CATEGORIES, RULES_DIR, RulesError, read_rule_csv, regex_judge
from tracehouse.warehouse.rules import check_pattern as _check_rule_pattern

from tracehouse.errors import TracehouseError

CATALOG_FILE = RULES_DIR / "fusion_patterns.csv"
VERSION_FILE = RULES_DIR / "fusion_patterns.version.json"

#: Frameworks a pattern may name (the values of runs.framework for these engines).
FRAMEWORKS: tuple[str, ...] = ("sglang", "vllm", "tensorrt-llm")
MAX_SPLITS = 3
#: Shape rules a pattern may name (column shape_rule; see sql/fusion/fusion_match.sql for what each checks).
SHAPE_RULES: tuple[str, ...] = ("same_input", "gate_product", "logits_2d", "same_input_2d")
#: Vendors a pattern may name (column vendor): the fused kernel exists on that vendor's GPUs only; `any`: on
#: both. A pattern of one vendor gives no row on a run of the other (fusion_match, the run's vendor).
VENDORS: tuple[str, ...] = ("nvidia", "amd", "any")
#: Optional columns (a user file may leave them out): the pattern's key (patterns of different frameworks
#: that fuse the same op sequence share it), the category the phase must show, the shape rule, and per
#: step a regex of the launching host op.
OPTIONAL_COLUMNS: tuple[str, ...] = (
    "pattern_key",
    "requires_category",
    "shape_rule",
    "split_1_ops",
    "split_2_ops",
    "split_3_ops",
    "vendor",
    "removes",
)
REQUIRED_COLUMNS: tuple[str, ...] = (
    "pattern_id",
    "framework",
    "name",
    "split_1",
    "split_1_categories",
    "split_2",
    "split_2_categories",
    "split_3",
    "split_3_categories",
    "fused",
    "fused_categories",
    "source_path",
    "rationale",
    "reference",
)


class FusionCatalogError(TracehouseError, ValueError):
    """A fusion catalogue that cannot be used: names the file, the line and what is wrong."""

    hint = "fix the fusion catalogue (see sql/rules/fusion_patterns.README.md) and run again"


def catalog_version() -> str:
    return str(json.loads(VERSION_FILE.read_text(encoding="utf-8"))["catalog_version"])


def recorded_sha256() -> str:
    return str(json.loads(VERSION_FILE.read_text(encoding="utf-8")).get("sha256", ""))


def catalog_sha256() -> str:
    return hashlib.sha256(CATALOG_FILE.read_bytes()).hexdigest()


def check_pattern(pattern: str, where: str, con: object | None) -> None:
    """The category table's regex rules (portable RE2/Java, compiles in DuckDB), as a catalogue error."""
    try:
        _check_rule_pattern(pattern, where, con)
    except RulesError as exc:
        raise FusionCatalogError(str(exc)) from None


def _categories(text: str, where: str) -> str:
    cats = [c.strip() for c in text.split(";") if c.strip()]
    if not cats:
        raise FusionCatalogError(f"{where}: no category given")
    bad = [c for c in cats if c not in CATEGORIES]
    if bad:
        raise FusionCatalogError(
            f"{where}: unknown category {bad[0]!r}; expected one of: {', '.join(CATEGORIES)}"
        )
    return ";".join(cats)


def _split_steps(row: dict, where: str, con) -> list[tuple[str, str, str | None]]:
    """The pattern's split kernels in order: (regex, categories, ops regex or None), split_1 .. split_N with no
    gap; at least two."""
    steps: list[tuple[str, str, str | None]] = []
    for i in range(1, MAX_SPLITS + 1):
        regex, cats = row.get(f"split_{i}", ""), row.get(f"split_{i}_categories", "")
        ops = row.get(f"split_{i}_ops", "") or ""
        if not regex:
            for j in range(i + 1, MAX_SPLITS + 1):
                if row.get(f"split_{j}", ""):
                    raise FusionCatalogError(f"{where}: split_{j} given but split_{i} is empty")
            if cats or ops:
                raise FusionCatalogError(f"{where}: split_{i}_categories/_ops without split_{i}")
            break
        check_pattern(regex, f"{where} split_{i}", con)
        if ops:
            check_pattern(ops, f"{where} split_{i}_ops", con)
        steps.append((regex, _categories(cats, f"{where} split_{i}_categories"), ops or None))
    if len(steps) < 2:
        raise FusionCatalogError(f"{where}: a pattern needs at least two split kernels (split_1, split_2)")
    return steps


def _removed_steps(text: str, n_steps: int, where: str) -> set[int]:
    """The steps whose time the fused kernel removes (column removes, `;`-separated step numbers); empty:
    every step but the last. At least one step is removed and at least one stays."""
    if not text.strip():
        return set(range(1, n_steps))
    try:
        steps = {int(x) for x in text.split(";") if x.strip()}
    except ValueError:
        raise FusionCatalogError(
            f"{where}: removes {text!r} is not a list of step numbers like 1;2"
        ) from None
    if not steps or not steps <= set(range(1, n_steps + 1)):
        raise FusionCatalogError(
            f"{where}: removes {text!r} names a step the pattern does not have (1..{n_steps})"
        )
    if len(steps) == n_steps:
        raise FusionCatalogError(
            f"{where}: removes {text!r} names every step; the fused kernel does one's work"
        )
    return steps


def _pattern(row: dict, pid: str, where: str, con, order: int) -> dict[str, object]:
    """One checked pattern of the catalogue (the catalog_order-th)."""
    if row.get("framework") not in FRAMEWORKS:
        raise FusionCatalogError(
            f"{where}: framework {row.get('framework')!r} is not one of {', '.join(FRAMEWORKS)}"
        )
    steps = _split_steps(row, where, con)
    fused = row.get("fused", "")
    if not fused:
        raise FusionCatalogError(f"{where}: empty fused regex")
    check_pattern(fused, f"{where} fused", con)
    for col in ("name", "source_path", "rationale", "reference"):
        if not row.get(col):
            raise FusionCatalogError(f"{where}: empty {col}")
    shape_rule = row.get("shape_rule", "") or None
    if shape_rule is not None and shape_rule not in SHAPE_RULES:
        raise FusionCatalogError(f"{where}: shape_rule {shape_rule!r} is not one of {', '.join(SHAPE_RULES)}")
    vendor = row.get("vendor", "") or "any"
    if vendor not in VENDORS:
        raise FusionCatalogError(f"{where}: vendor {vendor!r} is not one of {', '.join(VENDORS)}")
    required = row.get("requires_category", "") or None
    if required is not None and required not in CATEGORIES:
        raise FusionCatalogError(f"{where}: requires_category {required!r} is not a category")
    return {
        "pattern_key": row.get("pattern_key", "") or pid,
        "requires_category": required,
        "shape_rule": shape_rule,
        "vendor": vendor,
        "removes": _removed_steps(row.get("removes", "") or "", len(steps), where),
        "catalog_order": order,
        "pattern_id": pid,
        "framework": row["framework"],
        "name": row["name"],
        "steps": steps,
        "fused_pattern": fused,
        "fused_categories": _categories(row.get("fused_categories", ""), f"{where} fused_categories"),
        "source_path": row["source_path"],
        "rationale": row["rationale"],
        "reference": row["reference"],
    }


def parse_catalog(text: str, source: str) -> list[dict[str, object]]:
    """Parse and validate the catalogue text: one dict per pattern, with ``steps`` [(regex, categories)]."""
    con = regex_judge()
    try:
        out: list[dict[str, object]] = []
        seen: dict[str, int] = {}
        for line, row in read_rule_csv(
            text, source, REQUIRED_COLUMNS, None, "", "empty fusion catalogue", FusionCatalogError
        ):
            pid = row.get("pattern_id", "")
            if not pid:
                raise FusionCatalogError(f"{source}:{line}: empty pattern_id")
            where = f"{source}:{line} (pattern {pid!r})"
            if pid in seen:
                raise FusionCatalogError(f"{where}: pattern_id repeats the one on line {seen[pid]}")
            seen[pid] = line
            out.append(_pattern(row, pid, where, con, len(out) + 1))
        return out
    finally:
        if con is not None:
            con.close()  # type: ignore[attr-defined]


def load_fusion_catalog(path: str | Path | None = None) -> tuple[pa.Table, pa.Table]:
    """(fusion_patterns, fusion_pattern_steps) as Arrow tables, from the shipped file or ``path``."""
    file = Path(path) if path is not None else CATALOG_FILE
    patterns = parse_catalog(file.read_text(encoding="utf-8"), str(file))
    version = (
        catalog_version()
        if path is None
        else f"{catalog_version()}+file.{hashlib.sha256(file.read_bytes()).hexdigest()[:12]}"
    )
    head = pa.table(
        {
            "pattern_id": pa.array([p["pattern_id"] for p in patterns], pa.string()),
            "framework": pa.array([p["framework"] for p in patterns], pa.string()),
            "name": pa.array([p["name"] for p in patterns], pa.string()),
            "n_splits": pa.array([len(p["steps"]) for p in patterns], pa.int32()),  # type: ignore[arg-type]
            "fused_pattern": pa.array([p["fused_pattern"] for p in patterns], pa.string()),
            "fused_categories": pa.array([p["fused_categories"] for p in patterns], pa.string()),
            "source_path": pa.array([p["source_path"] for p in patterns], pa.string()),
            "rationale": pa.array([p["rationale"] for p in patterns], pa.string()),
            "reference": pa.array([p["reference"] for p in patterns], pa.string()),
            "catalog_version": pa.array([version] * len(patterns), pa.string()),
            "pattern_key": pa.array([p["pattern_key"] for p in patterns], pa.string()),
            "requires_category": pa.array([p["requires_category"] for p in patterns], pa.string()),
            "shape_rule": pa.array([p["shape_rule"] for p in patterns], pa.string()),
            "catalog_order": pa.array([p["catalog_order"] for p in patterns], pa.int32()),
            "vendor": pa.array([p["vendor"] for p in patterns], pa.string()),
        }
    )
    rows = [
        (p["pattern_id"], i + 1, regex, cats, ops, i + 1 in p["removes"])  # type: ignore[operator]
        for p in patterns
        for i, (regex, cats, ops) in enumerate(p["steps"])
    ]  # type: ignore[arg-type]
    steps = pa.table(
        {
            "pattern_id": pa.array([r[0] for r in rows], pa.string()),
            "step": pa.array([r[1] for r in rows], pa.int32()),
            "pattern": pa.array([r[2] for r in rows], pa.string()),
            "categories": pa.array([r[3] for r in rows], pa.string()),
            "ops": pa.array([r[4] for r in rows], pa.string()),
            "removed": pa.array([r[5] for r in rows], pa.bool_()),
        }
    )
    return head, steps


def register_fusion_patterns(con: duckdb.DuckDBPyConnection, path: str | Path | None = None) -> None:
    """Create the tables fusion_patterns and fusion_pattern_steps in ``con``."""
    head, steps = load_fusion_catalog(path)
    con.register("_fusion_patterns_arrow", head)
    con.register("_fusion_pattern_steps_arrow", steps)
    con.execute("CREATE OR REPLACE TABLE fusion_patterns AS SELECT * FROM _fusion_patterns_arrow")
    con.execute("CREATE OR REPLACE TABLE fusion_pattern_steps AS SELECT * FROM _fusion_pattern_steps_arrow")
    con.unregister("_fusion_patterns_arrow")
    con.unregister("_fusion_pattern_steps_arrow")

"""The device peak table: what each GPU can do at most, for the roofline and the collective bandwidth views.

The figures live in ``sql/rules/device_peaks.csv`` (one row per device, matched to the trace's device
name by ``pattern``, a regular expression, first match by ``rule_order``; ``props_match`` matches a trace
that leaves the name empty by its device properties, ``cc=<major>.<minor> sms=<SMs/CUs> mem_gib=<memory
rounded to GiB>``). Each row says where its figures come from (``source``). Columns:

  bf16_tflops  dense FP16/BF16 tensor (matrix) peak, TFLOP/s (no sparsity)
  fp8_tflops   dense FP8 peak; fp4_tflops dense FP4 peak; tf32_tflops dense TF32 (FP32 matmul) peak
  fp32_tflops  FP32 vector peak
  hbm_tbps     HBM bandwidth, TB/s (10^12 bytes/s)
  link_gbps    the GPU-to-GPU link's bandwidth per direction, GB/s (10^9 bytes/s), the figure
               nccl-tests' busbw is compared to

Datasheet peaks are an upper bound; measured ceilings are often well below (about half for HBM-bound
decode kernels). A user file of the same columns, named by ``TRACEHOUSE_DEVICE_PEAKS``, goes before
the shipped rows (user rows win), e.g. with measured ceilings for the device at hand. The version is
``sql/rules/device_peaks.version.json`` (``peaks_version`` and the CSV's sha256).
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pyarrow as pa
from tracehouse.warehouse.rules import RULES_DIR, RulesError, check_pattern, read_rule_csv, regex_judge

SHIPPED_PEAKS = RULES_DIR / "device_peaks.csv"
PEAKS_VERSION_FILE = RULES_DIR / "device_peaks.version.json"
USER_PEAKS_ENV = "TRACEHOUSE_DEVICE_PEAKS"
FIGURES: tuple[str, ...] = (
    "bf16_tflops",
    "fp8_tflops",
    "fp4_tflops",
    "tf32_tflops",
    "fp32_tflops",
    "hbm_tbps",
    "link_gbps",
)
COLUMNS: tuple[str, ...] = ("rule_order", "device", "pattern", "props_match", *FIGURES, "source", "note")


def peaks_version() -> str:
    return str(json.loads(PEAKS_VERSION_FILE.read_text(encoding="utf-8"))["peaks_version"])


def shipped_peaks_sha256() -> str:
    return hashlib.sha256(SHIPPED_PEAKS.read_bytes()).hexdigest()


def user_peaks_file() -> str | None:
    """The user's peak file named by TRACEHOUSE_DEVICE_PEAKS (None when unset or empty)."""
    return os.environ.get(USER_PEAKS_ENV) or None


def _parse(text: str, source: str, con: object | None) -> list[dict[str, object]]:
    rows: list[dict[str, object]] = []
    orders: dict[int, int] = {}
    required = ("rule_order", "device", "pattern")
    for line, row in read_rule_csv(
        text,
        source,
        required,
        tuple(c for c in COLUMNS if c not in required),
        f"expected {','.join(COLUMNS)}",
        f"empty peak file; expected a header {','.join(COLUMNS)}",
    ):
        device = row.get("device", "")
        where = f"{source}:{line} (device {device!r})"
        if not device:
            raise RulesError(f"{source}:{line}: empty device")
        try:
            order = int(row.get("rule_order", ""))
        except ValueError:
            raise RulesError(f"{where}: rule_order {row.get('rule_order')!r} is not an integer") from None
        if order in orders:
            raise RulesError(f"{where}: rule_order {order} repeats the one on line {orders[order]}")
        orders[order] = line
        pattern = row.get("pattern", "")
        if not pattern and not row.get("props_match"):
            raise RulesError(f"{where}: give a pattern or a props_match")
        if pattern:
            check_pattern(pattern, where, con)
        out: dict[str, object] = {
            "rule_order": order,
            "device": device,
            "pattern": pattern or None,
            "props_match": row.get("props_match") or None,
            "source": row.get("source") or None,
        }
        for figure in FIGURES:
            cell = row.get(figure, "")
            if cell == "":
                out[figure] = None
                continue
            try:
                value = float(cell)
            except ValueError:
                raise RulesError(f"{where}: {figure} {cell!r} is not a number") from None
            if not value > 0:
                raise RulesError(f"{where}: {figure} {cell!r} must be positive")
            out[figure] = value
        rows.append(out)
    rows.sort(key=lambda r: r["rule_order"])  # type: ignore[arg-type, return-value]
    return rows


def load_device_peaks(user_file: str | Path | None = None) -> pa.Table:
    """The effective peak table: user rows (if any) first, then the shipped ones.

    Columns: rule_order (int32, 1-based effective order), device, pattern, props_match, the FIGURES
    (double, NULL: not known), source, peaks_version. Raises RulesError on a bad row."""
    con = regex_judge()
    try:
        rows = _parse(SHIPPED_PEAKS.read_text(encoding="utf-8"), str(SHIPPED_PEAKS), con)
        version = peaks_version()
        if user_file is not None:
            path = Path(user_file)
            try:
                data = path.read_bytes()
            except OSError as exc:
                raise RulesError(f"{path}: cannot read the device peak file: {exc.strerror or exc}") from None
            try:
                text = data.decode("utf-8")
            except UnicodeDecodeError:
                raise RulesError(f"{path}: the device peak file is not UTF-8 text") from None
            user = _parse(text, str(path), con)
            for row in user:
                row["source"] = f"user file {path.name}" + (f": {row['source']}" if row["source"] else "")
            rows = user + rows
            version = f"{version}+user.{hashlib.sha256(data).hexdigest()[:12]}"
    finally:
        if con is not None:
            con.close()  # type: ignore[attr-defined]
    table = {
        "rule_order": pa.array(range(1, len(rows) + 1), type=pa.int32()),
        "device": pa.array([r["device"] for r in rows], type=pa.string()),
        "pattern": pa.array([r["pattern"] for r in rows], type=pa.string()),
        "props_match": pa.array([r["props_match"] for r in rows], type=pa.string()),
    }
    for figure in FIGURES:
        table[figure] = pa.array([r[figure] for r in rows], type=pa.float64())
    table["source"] = pa.array([r["source"] for r in rows], type=pa.string())
    table["peaks_version"] = pa.array([version] * len(rows), type=pa.string())
    return pa.table(table)

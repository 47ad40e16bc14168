"""warehouse.rules.read_rule_csv: the one reader of the rule tables' CSV (categories, fusion patterns,
launch-site plumbing, device peaks), so a user file is read the same way whichever table it extends."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from tracehouse.warehouse.fusion import FusionCatalogError, load_fusion_catalog
from tracehouse.warehouse.peaks import load_device_peaks
from tracehouse.warehouse.rules import RulesError, load_category_rules, read_rule_csv
from tracehouse.warehouse.site_rules import load_site_rules

ROOT = Path(__file__).resolve().parents[1]

# loader, a valid header, a valid row for it, the error it raises
LOADERS = {
    "categories": (
        load_category_rules,
        "rule_order,rule_name,category,pattern",
        "1,mine,gemm,^my_gemm$",
        RulesError,
    ),
    "site": (
        load_site_rules,
        "rule_order,rule_name,action,pattern",
        "1,mine,plumbing,^my_wrapper",
        RulesError,
    ),
    "peaks": (
        load_device_peaks,
        "rule_order,device,pattern,bf16_tflops",
        "1,my gpu,(?i)mygpu,100",
        RulesError,
    ),
}


def read(text: str, **kw) -> list[tuple[int, dict[str, str]]]:
    args = {"required": ("a", "b"), "optional": ("c",), "expected": "expected a,b[,c]", "empty": "empty file"}
    args.update(kw)
    return list(read_rule_csv(text, "f.csv", **args))


def test_reader_rows_lines_and_cells():
    text = '\ufeffa, b ,c\n\n1, x ,"p,q"\n  ,  ,\n2,y\n'
    assert read(text) == [(3, {"a": "1", "b": "x", "c": "p,q"}), (5, {"a": "2", "b": "y"})]


@pytest.mark.parametrize(
    ("text", "kw", "message"),
    [
        ("", {}, "f.csv: empty file"),
        ("\n  \n", {}, "f.csv: empty file"),
        ("a,c\n", {}, "f.csv:1: header lacks column(s) b; expected a,b[,c]"),
        ("a,b,d\n", {}, "f.csv:1: header has unknown column(s) d; expected a,b[,c]"),
        ("a,bb\n", {}, "f.csv:1: header lacks column(s) b and has unknown column(s) bb; expected a,b[,c]"),
        ("a,b\n1,p,q\n", {}, "f.csv:2: 3 fields but the header has 2 (quote fields that contain commas)"),
        ("a\n", {"expected": ""}, "f.csv:1: header lacks column(s) b"),
    ],
)
def test_reader_refuses(text, kw, message):
    with pytest.raises(RulesError) as info:
        read(text, **kw)
    assert str(info.value) == message


def test_reader_any_other_column_when_optional_is_none():
    assert read("a,b,anything\n1,2,3\n", optional=None) == [(2, {"a": "1", "b": "2", "anything": "3"})]


@pytest.mark.parametrize("table", sorted(LOADERS))
def test_every_loader_reads_a_user_file_through_it(tmp_path, table):
    load, header, row, error = LOADERS[table]
    good = tmp_path / "good.csv"
    good.write_text(f"\ufeff{header}\n\n{row}\n")
    assert any("my" in str(v) for v in load(good).to_pylist()[0].values())
    cases = {
        "empty.csv": ("", r"empty"),
        "comma.csv": (
            f"{header}\n{row},extra,more\n",
            r":2: \d+ fields but the header has \d+ \(quote fields",
        ),
        "header.csv": ("rule_order,x_y\n1,2\n", r":1: header lacks column\(s\) "),
    }
    for name, (text, message) in cases.items():
        bad = tmp_path / name
        bad.write_text(text)
        with pytest.raises(error, match=message):
            load(bad)


def test_fusion_catalogue_reads_through_it(tmp_path):
    bad = tmp_path / "fusion.csv"
    bad.write_text("pattern_id,framework\nx,sglang\n")
    with pytest.raises(FusionCatalogError, match=r"fusion.csv:1: header lacks column\(s\) name, split_1"):
        load_fusion_catalog(bad)
    bad.write_text("")
    with pytest.raises(FusionCatalogError, match="empty fusion catalogue"):
        load_fusion_catalog(bad)


def test_one_csv_reader():
    readers = [
        f"{p.relative_to(ROOT)}"
        for p in sorted((ROOT / "warehouse").rglob("*.py"))
        if re.search(r"\bcsv\.(reader|DictReader)\(", p.read_text()) and p.name != "rules.py"
    ]
    assert not readers, f"read rule CSV through warehouse.rules.read_rule_csv, not again in {readers}"

"""The declared schema (warehouse/schema.py): what ingest writes is what it declares (column names, types
and order) for synthesized situations, an Nsight Systems export and the real traces; a new warehouse's
zero-row files come from it; the checker and the type pinning at the write do what they say."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import real_trace_files
from tracehouse.warehouse.schema import (
    COLUMNS,
    SCHEMA_PARTITION,
    STORED_TABLES,
    cast_select,
    column_docs,
    duckdb_type,
    mismatches,
    schema,
)
from tracehouse.warehouse.store import ALL_TABLES, Warehouse


def nonconforming(root: Path) -> list[str]:
    """Every Parquet file of every table that differs from the declared schema, with how."""
    problems = []
    for table in STORED_TABLES:
        files = sorted((root / "tables" / table).glob("*/*.parquet"))
        assert files, f"no {table} files under {root}"
        for f in files:
            problems += [f"{f.relative_to(root)}: {m}" for m in mismatches(table, pq.read_schema(f))]
    return problems


def test_every_stored_table_is_declared_in_the_stores_order():
    assert STORED_TABLES == ALL_TABLES
    for table in STORED_TABLES:
        names = [c[0] for c in COLUMNS[table]]
        assert len(names) == len(set(names)), table
        assert all(doc.strip() for _, _, doc in COLUMNS[table]), table
        assert (names[0] == "run_id") == (table == "runs"), table  # per-rank tables: run_id is the folder
        if table != "runs":
            assert names[0] == "rank"


def test_a_new_warehouse_gets_its_zero_row_files_from_the_declaration(tmp_path):
    from tracehouse.warehouse.catalog import connect, ensure_schema_files

    wh = Warehouse(tmp_path / "wh")
    ensure_schema_files(wh)
    for table in STORED_TABLES:
        [f] = (wh.table_dir(table) / SCHEMA_PARTITION).glob("*.parquet")
        assert pq.read_metadata(f).num_rows == 0
        assert mismatches(table, pq.read_schema(f)) == []
    # the base views see the declared columns, in order and with the declared types (run_id from the folder)
    con = connect(wh)
    for table in STORED_TABLES:
        described = [(r[0], r[1]) for r in con.execute(f"DESCRIBE {table}").fetchall()]
        # DuckDB's own spelling of each declared type (it quotes only the struct fields it must)
        declared = [
            (n, con.execute(f"SELECT typeof(CAST(NULL AS {duckdb_type(k)}))").fetchone()[0])
            for n, k, _ in COLUMNS[table]
        ]
        expected = declared if table == "runs" else declared + [("run_id", "VARCHAR")]
        assert [n for n, _ in described] == [n for n, _ in expected], table
        assert described == expected, table
        assert con.execute(f"SELECT count(*) FROM {table}").fetchone()[0] == 0


def test_ingest_writes_the_declared_schema_for_every_situation(situation_warehouse):
    wh, runs, _ = situation_warehouse
    assert len(runs) > 20
    problems = nonconforming(wh.root)
    assert not problems, "\n".join(problems[:40])


def test_an_nsight_systems_export_lands_in_the_declared_schema(tmp_path):
    from tracehouse.ingest.load import ingest_paths
    from tracehouse.synth.nsys import write_export

    path = tmp_path / "run" / "profile.sqlite"
    path.parent.mkdir()
    write_export(path)
    [outcome] = ingest_paths(Warehouse(tmp_path / "wh"), [path.parent], analyse=False)
    assert outcome.stored and not outcome.problems, outcome
    assert outcome.n_kernels > 0
    assert nonconforming(tmp_path / "wh") == []


def test_ingest_writes_the_declared_schema_for_the_real_traces(real_warehouse):
    """Every real trace of ../shared (NVIDIA, AMD, graphs, several ranks, edge cases), one run each."""
    wh, run_of = real_warehouse
    assert len(run_of) == len(real_trace_files()) > 0
    problems = nonconforming(wh.root)
    assert not problems, "\n".join(problems[:40])


def test_the_checker_finds_a_changed_type_a_missing_and_a_moved_column():
    good = schema("flows")
    assert mismatches("flows", good) == []
    retyped = good.set(good.get_field_index("src_ns"), pa.field("src_ns", pa.float64()))
    assert mismatches("flows", retyped) == ["flows.src_ns: double where int64 is declared"]
    missing = good.remove(good.get_field_index("kind"))
    assert "missing ['kind']" in mismatches("flows", missing)[0]
    moved = pa.schema([good.field(1), good.field(0)] + list(good)[2:])
    assert mismatches("flows", moved) and "differ from the declared" in mismatches("flows", moved)[0]
    extra = good.append(pa.field("surprise", pa.string()))
    assert "not declared ['surprise']" in mismatches("flows", extra)[0]
    # nullability and the names Parquet gives list / map entries are not the schema
    runs = schema("runs")
    relaxed = pa.schema([pa.field(f.name, f.type, nullable=False) for f in runs])
    assert mismatches("runs", relaxed) == []
    assert mismatches("kernel_sites", pq.read_schema(_written(schema("kernel_sites")))) == []


def _written(s: pa.Schema) -> pa.BufferReader:
    sink = pa.BufferOutputStream()
    pq.write_table(s.empty_table(), sink)
    return pa.BufferReader(sink.getvalue())


def test_the_write_pins_each_column_to_its_declared_type(tmp_path):
    """A staging table whose columns came out of the data with other types (a DOUBLE where BIGINT is
    declared, an INTEGER for a BIGINT, a BIGINT for an INTEGER) and in another order is written as declared."""
    con = duckdb.connect()
    con.execute("""CREATE TABLE staged AS SELECT 'ac2g' AS kind, 7.0::DOUBLE AS src_ns, 9::INTEGER AS dst_ns,
                   '12' AS flow_id, 1::INTEGER AS src_event_id, 2::BIGINT AS dst_event_id""")
    out = tmp_path / "flows.parquet"
    con.execute(f"COPY (SELECT 3::INTEGER AS rank, {cast_select('flows', 'staged')} FROM staged) TO '{out}'")
    assert mismatches("flows", pq.read_schema(out)) == []
    assert pq.read_table(out).to_pylist() == [
        {
            "rank": 3,
            "flow_id": "12",
            "kind": "ac2g",
            "src_event_id": 1,
            "dst_event_id": 2,
            "src_ns": 7,
            "dst_ns": 9,
        }
    ]


def test_each_declared_type_is_what_duckdb_writes_for_its_duckdb_type(tmp_path):
    """duckdb_type is the inverse of DuckDB's Parquet writer for every declared column."""
    con = duckdb.connect()
    for table in STORED_TABLES:
        out = tmp_path / f"{table}.parquet"
        columns = ", ".join(f'CAST(NULL AS {duckdb_type(k)}) AS "{n}"' for n, k, _ in COLUMNS[table])
        con.execute(f"COPY (SELECT {columns}) TO '{out}' (FORMAT parquet)")
        assert mismatches(table, pq.read_schema(out)) == [], table


def test_schema_describes_a_tables_columns(tmp_path):
    from tracehouse.warehouse.catalog import connect, ensure_schema_files
    from tracehouse.warehouse.schema_docs import describe

    wh = Warehouse(tmp_path / "wh")
    ensure_schema_files(wh)
    rows = {name: doc for name, _, doc in describe(connect(wh), "kernels")}
    assert rows["dur_ns"] == column_docs("kernels")["dur_ns"] == "duration (ns)"
    assert rows["run_id"].startswith("the run (runs.run_id)")
    assert set(rows) - {"(row)"} == {n for n, _, _ in COLUMNS["kernels"]} | {"run_id"}


# The columns of each schema_version (warehouse.schema.columns_digest). A change to a declared column's
# name, type or order fails here until SCHEMA_VERSION is bumped and its digest added: runs.schema_version
# then tells the files of the old layout from the new.
DIGESTS = {
    1: "7bbb0b95830cc2305cbd8160a4ed9ac11cdcfb67532b9b4287941dad1694590e",
    2: "e07dd6031b98bb67556b669ef3affa1b26999d04ed54a601d7e48712fcc219ce",
    3: "9fa671c3ccd80cf3d388b78882cd3dbcd28d7fe2a12e1bc97db5de57e3234b48",
    4: "d818c00e31e14fc6f8203983a47debb085f0feac72eccbc7d76167ace5c4ffc4",
}  # 2: + step_requests; 3: + kernels.graph_id, graph_node_id, graph_annotation, module_fqn;
# 4: + kernel_sites.capture_waits


def test_a_changed_column_bumps_the_schema_version(monkeypatch):
    from tracehouse.warehouse import schema as declared

    assert declared.columns_digest() == DIGESTS[declared.SCHEMA_VERSION]
    retyped = {t: list(c) for t, c in declared.COLUMNS.items()}
    retyped["streams"][4] = ("activities", declared.I64, "GPU activities on the stream")
    monkeypatch.setattr(declared, "COLUMNS", retyped)
    assert declared.columns_digest() != DIGESTS[declared.SCHEMA_VERSION]  # the digest sees a type change


def test_the_runs_row_says_which_schema_wrote_it(situation_warehouse):
    from tracehouse.warehouse.catalog import connect
    from tracehouse.warehouse.schema import SCHEMA_VERSION

    wh, _, _ = situation_warehouse
    versions = connect(wh).execute("SELECT DISTINCT schema_version FROM runs").fetchall()
    assert versions == [(SCHEMA_VERSION,)]


def test_write_rows_reads_back_as_pyarrows_conversion_of_the_same_rows(tmp_path):
    """write_rows writes the declared table through DuckDB; every value kind the declared tables hold
    (64-bit integers past 2^53, UTC timestamps to the microsecond, maps as dicts or pairs in their order,
    lists of structs, NULLs, a column or a struct key left out, non-ASCII text) reads back as pyarrow's
    own conversion of the rows, in the declared schema."""
    from datetime import datetime, timezone

    from tracehouse.warehouse.schema import write_rows

    runs = [
        {
            "run_id": "0123456789abcdef",
            "ingested_at": datetime(2026, 12, 3, 9, 1, 2, 345678, tzinfo=timezone.utc),
            "files": [{"name": "a", "path": "/x/ä", "size": 2**40, "rank": 3, "json_bytes": 2**53 + 1}],
            "labels": {"b": "1", "a": "2"},
            "world_size": None,
            "base_time_ns": 1733212345678901234,
            "event_counts": [("z", 1), ("a", 2**62)],
            "warnings": [],
            "metadata": '{"x": "\\u0000"}',
        },
        {"run_id": None, "labels": None, "files": []},
    ]
    sites = [{"rank": 0, "kernel_id": 2**40, "stack": ["a.py(1): f", "b.py(2): g"], "line": 7}]
    requests = [{"rank": 1, "step": 3, "request_id": "r-1", "tokens": 512, "phase": "prefill"}]
    cases = [("runs", runs), ("kernel_sites", sites), ("step_requests", requests), ("runs", [])]
    for i, (table, rows) in enumerate(cases):
        write_rows(table, rows, tmp_path / f"{i}.parquet")
        found = pq.read_table(tmp_path / f"{i}.parquet")
        expected = pa.Table.from_pylist(rows, schema=schema(table))
        assert mismatches(table, found.schema) == [], table
        assert found.to_pylist() == expected.to_pylist(), table
    with pytest.raises(duckdb.Error, match="x"):  # a value not of its column's type: an error, never a NULL
        write_rows("step_requests", [{"rank": 0, "step": "x"}], tmp_path / "bad.parquet")


def test_an_ingest_process_imports_neither_pyarrow_nor_pandas(tmp_path):
    """Ingest writes every file through DuckDB (write_rows for the rows it builds in Python), so a trace's
    ingest process never imports pyarrow (0.15-0.2 s with the numpy it imports) nor pandas (pyarrow imports
    it, where installed, on its first conversion of Python values: 0.3-0.5 s more)."""
    import subprocess
    import sys

    from tracehouse.synth import write_scenario

    trace = write_scenario("training", tmp_path / "trace", seed=3, ranks=1, steps=1, layers=1)
    code = (
        "import sys; from pathlib import Path; from ingest.load import ingest_paths; "
        "from warehouse.store import Warehouse; "
        f"ingest_paths(Warehouse(Path({str(tmp_path / 'wh')!r})), [Path({str(trace)!r})], derive='none'); "
        "print(sorted(m for m in ('pyarrow', 'numpy', 'pandas') if m in sys.modules))"
    )
    found = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert found.stdout.strip() == "[]", found.stderr

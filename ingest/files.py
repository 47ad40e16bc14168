"""Which files are traces, and the file-level facts every ingest path shares (rank traces, capture traces,
Nsight Systems exports): a problem with one file, its hash, the bytes a pool of workers will read.

The bottom of ingest/: it imports no other ingest module, so ingest.run, ingest.capture and ingest.nsys
all stand on it without importing each other for these.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

TRACE_SUFFIXES = (".json", ".json.gz", ".pt.trace.json", ".pt.trace.json.gz")
NOT_TRACES = {
    "execution_details.json",
    "ground_truth.json",
    "ground_truth.json.gz",
}  # synth writes the .gz when large
REPORT_SUFFIXES = (".nsys-rep", ".qdrep")  # Nsight Systems reports: refused with a hint (ingest.nsys)
EXPORT_SUFFIXES = (".sqlite", ".sqlite3")  # Nsight Systems SQLite exports (ingest.nsys)


@dataclass
class FileProblem:
    path: str
    message: str


def is_export_name(path: Path) -> bool:
    """Names picked up inside a run directory beside Kineto traces (Nsight Systems exports, and reports,
    refused with a hint)."""
    return path.name.lower().endswith(EXPORT_SUFFIXES + REPORT_SUFFIXES)


SQLITE_MAGIC = b"SQLite format 3\x00"


def is_report(path: Path) -> bool:
    return path.name.lower().endswith(REPORT_SUFFIXES)


def is_sqlite(path: Path) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(16) == SQLITE_MAGIC
    except OSError:
        return False


def is_nsys_input(path: Path) -> bool:
    """A file ingest.nsys reads or refuses: an SQLite database (by its bytes) or an .nsys-rep report (here,
    so that ingesting JSON traces does not import the Nsight reader and sqlite3)."""
    return path.is_file() and (is_report(path) or is_sqlite(path))


def is_trace_file(path: Path) -> bool:
    return (
        path.is_file()
        and (path.name.endswith(TRACE_SUFFIXES) or is_export_name(path))
        and path.name not in NOT_TRACES
    )


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(8 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def files_size(paths: list[Path]) -> int:
    """The files' size in bytes (a missing file counts 0: its own error comes when it is read)."""
    total = 0
    for path in paths:
        try:
            total += Path(path).stat().st_size
        except OSError:
            pass
    return total

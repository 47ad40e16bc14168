"""Ingest's DuckDB memory limit (ingest.memory): half the free memory, shared by the rank workers, never
below 640 MB; TRACEHOUSE_MEMORY_LIMIT fixes it; a worker of the rank pool gets its share."""

from __future__ import annotations

from tracehouse.ingest.memory import MIN_MEMORY_LIMIT, available_memory, memory_limit

GB = 10**9


def test_half_of_the_free_memory():
    assert memory_limit(env={}, available=16 * GB) == "8000MB"


def test_shared_by_the_workers_side_by_side():
    assert memory_limit(env={"TRACEHOUSE_RANK_WORKERS": "4"}, available=16 * GB) == "2000MB"


def test_never_below_the_floor():
    assert memory_limit(env={}, available=GB) == f"{MIN_MEMORY_LIMIT // 10**6}MB" == "640MB"
    assert memory_limit(env={}, available=0) == "640MB"  # free memory unreadable
    assert memory_limit(env={"TRACEHOUSE_RANK_WORKERS": "8"}, available=4 * GB) == "640MB"


def test_the_environment_fixes_it():
    assert memory_limit(env={"TRACEHOUSE_MEMORY_LIMIT": "640MB"}, available=64 * GB) == "640MB"
    assert memory_limit(env={"TRACEHOUSE_MEMORY_LIMIT": " 3GB "}, available=GB) == "3GB"


def test_a_bad_worker_count_is_one_worker():
    assert memory_limit(env={"TRACEHOUSE_RANK_WORKERS": "x"}, available=16 * GB) == "8000MB"


def test_free_memory_is_read_from_the_machine():
    free = available_memory()
    assert free > 0
    import os

    assert free <= os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def test_the_work_connection_sets_it(tmp_path, monkeypatch):
    from tracehouse.ingest.rank import work_connection

    monkeypatch.setenv("TRACEHOUSE_MEMORY_LIMIT", "700MB")
    con = work_connection(tmp_path)
    (text,) = con.execute("SELECT current_setting('memory_limit')").fetchone()
    assert text.replace(" ", "") in ("667.5MiB", "667.5MB", "700.0MB")  # DuckDB reports it in MiB
    monkeypatch.delenv("TRACEHOUSE_MEMORY_LIMIT")
    monkeypatch.setenv("TRACEHOUSE_RANK_WORKERS", "1000")  # a share below the floor: the floor
    con = work_connection(tmp_path)
    (text,) = con.execute("SELECT current_setting('memory_limit')").fetchone()
    assert text.replace(" ", "") in ("610.3MiB", "640.0MB")


def test_pool_workers_know_how_many_share_the_machine(monkeypatch):
    import os

    from tracehouse.ingest import run

    monkeypatch.setattr(os, "environ", dict(os.environ))
    run._set_threads(1, 2)
    assert os.environ["TRACEHOUSE_RANK_WORKERS"] == "2" and os.environ["TRACEHOUSE_THREADS"] == "1"

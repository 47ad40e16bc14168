# The two things a newcomer runs: `make demo` (the main job) and `make test`. Both set up .venv first.
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: test test-fast demo bench lint format clean fuzz screenshots
# the lint and the format first (the pinned ruff's default rules and its formatter, pyproject.toml): a
# finding or an unformatted file fails the tests, in CI too (`make format` rewrites the files).
# Every test, both tiers (~2,550): 20-21 min with -n auto on 2 cores from a fresh clone in session 26 (.ci/run;
# 19-24 min in session 25);
# 27 min in session 22 (.ci/run;
# 32 min in session 21, 58 min in session 20); 36 min in session 23, the first run with the Spark group in
# effect (test_spark's views computed once: 548 worker-s, 671 before), its other tests 1.5-1.7x slower each
# than in session 22 (session 24 found the likely cause: a nice'd benchmark in another terminal session took a
# full share of a core, the kernel's autogroup scheduling); 45 min in session 24's profile run (bench/results.md
# "Where the suite's time goes"): over the 15 min it should take.
# Spark (tests/test_spark.py, the Spark view cases) is about a third of it. --dist loadgroup: every test that
# needs Spark is in one xdist group (tests/conftest.py), so one worker runs them all in one JVM (pytest < 9.2,
# pyproject.toml: with 9.2 the group is ignored).
# Session 19: each source ingested once per session (tests/warehouses.py), setup 445 -> 353 CPU-s (bench/results.md)
test: $(VENV)/.installed
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(PY) -m pytest -q -n auto --dist loadgroup

# for development (90-100 s on 2 cores, session 26): unit, view and synthesized-situation tests (~1,400), not those marked
# slow by what it needs (the real traces of ../shared, Spark, the browser, killed processes, whole reports,
# diffs, trends and exports of whole runs: tests/conftest.py SLOW_NEEDS), nor any test over 1 s in a measured
# run (tests/slow_tests.txt, kept by tests/tier.py); its time: bench/results.md
test-fast: $(VENV)/.installed
	TRACEHOUSE_TEST_FAST=1 $(PY) -m pytest -q -n auto -m "not slow"

# the demo needs the core only: no pyspark (~490 MB), no test tools
demo: $(VENV)/.installed-core
	$(VENV)/bin/tracehouse demo

# PNGs of the run, trend and diff pages at 1400 px in headless Chromium (CHROMIUM=/usr/bin/chromium)
screenshots: $(VENV)/.installed-core
	$(PY) bench/screenshots.py screenshots

bench: $(VENV)/.installed
	$(PY) bench/run.py

# Fuzz the decoder for FUZZ_SECONDS (atheris is optional, installed here on first use; see bench/fuzz_decoder.py).
FUZZ_SECONDS ?= 600
fuzz: $(VENV)/.installed
	$(PY) -c "import atheris" 2>/dev/null || $(PY) -m pip install -q atheris
	mkdir -p .fuzz && cd .fuzz && $(abspath $(PY)) ../bench/fuzz_decoder.py -max_total_time=$(FUZZ_SECONDS) -print_final_stats=1

lint: $(VENV)/.installed
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

format: $(VENV)/.installed
	$(VENV)/bin/ruff format .

$(VENV)/.installed-core: pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e .
	touch $@

# the tests and Spark targets: the test tools and pyspark on top of the core
$(VENV)/.installed: $(VENV)/.installed-core
	$(PY) -m pip install -q -e '.[test,spark]'
	touch $@

clean:
	rm -rf $(VENV) tracehouse-data .pytest_cache .fuzz

# The two things a newcomer runs: `make demo` (the main job) and `make test`. Both set up .venv first.
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: test demo bench lint clean
test: $(VENV)/.installed
	$(PY) -m pytest -q

demo: $(VENV)/.installed
	$(VENV)/bin/tracehouse demo

bench: $(VENV)/.installed
	$(PY) bench/run.py

lint: $(VENV)/.installed
	$(VENV)/bin/ruff check .

$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	touch $@

clean:
	rm -rf $(VENV) tracehouse-data .pytest_cache

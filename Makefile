# Quick start: `make demo` runs the default experiment, `make test` runs the test suite.
# Both create .venv and install fedlight into it on first use (offline-capable where the
# package index or its local mirror is reachable).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: demo test lint bench

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $@

demo: $(VENV)/.installed
	$(PY) -m fedlight

test: $(VENV)/.installed
	$(PY) -m ruff check fedlight tests benchmarks examples
	$(PY) -m ruff format --check fedlight tests benchmarks examples
	$(PY) -m pytest -q -n auto

bench: $(VENV)/.installed
	$(PY) benchmarks/w1.py --data-root ../shared/data

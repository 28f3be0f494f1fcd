# Quick start: `make demo` runs the default experiment, `make test` runs the test suite (and
# builds the documentation site strictly), `make docs` builds the site into site/, `make results`
# regenerates the results pages from their run records.
# Each creates .venv and installs fedlight into it on first use (offline-capable where the
# package index or its local mirror is reachable).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# The documentation site, offline (nothing fetched), failing on any warning (a broken link, a page
# mkdocstrings cannot render); open site/index.html (search needs a server: `mkdocs serve`).
MKDOCS := NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict

.PHONY: demo test lint docs bench results

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --no-cache-dir -e '.[dev]'
	touch $@

demo: $(VENV)/.installed
	$(PY) -m fedlight

test: $(VENV)/.installed
	$(PY) -m ruff check fedlight tests benchmarks scripts hydra_plugins examples
	$(PY) -m ruff format --check fedlight tests benchmarks scripts hydra_plugins examples
	$(PY) -m pytest -q -n auto
	$(MKDOCS)

docs: $(VENV)/.installed
	$(MKDOCS)

# DATA_ROOT: the folder holding MNIST (MNIST/raw/*-ubyte; torchvision's download)
DATA_ROOT ?= data
bench: $(VENV)/.installed
	$(PY) benchmarks/w1.py --data-root $(DATA_ROOT)

# Every results page again from its committed run records (docs/results/pages.yaml)
results: $(VENV)/.installed
	$(PY) -m scripts.results pages

# stripeml: `make demo` and `make test` work on a fresh machine with python3 and git.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test test-slow lint bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/stripeml demo

test: $(STAMP)
	$(VENV)/bin/ruff check src tests bench
	$(PY) -m pytest -q -n 2 tests

test-slow: $(STAMP)
	$(PY) -m pytest -q -n 2 -m slow tests

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests bench
	$(VENV)/bin/ruff format --check src tests bench

bench: $(STAMP)
	$(PY) bench/run.py

clean:
	rm -rf $(VENV) build *.egg-info src/*.egg-info

# stripeml: `make demo` and `make test` work on a fresh machine with python3 and git.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test test-slow lint bench bench-deps fuzz clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

# The light SqueezeNet shipped with the onnx package, checked against onnxruntime.
ONNX_DEMO = $(PY) -c "import onnx, os; print(os.path.join(os.path.dirname(onnx.__file__), 'backend', 'test', 'data', 'light', 'light_squeezenet.onnx'))"

demo: $(STAMP)
	$(VENV)/bin/stripeml demo --target interp
	$(VENV)/bin/stripeml demo --target cpu
	$(VENV)/bin/stripeml onnx "$$($(ONNX_DEMO))" --random --check --bench 5
	$(PY) examples/train_digits.py --quick

# mypy reads its settings (files, strictness, untyped third-party modules) from pyproject.toml.
test: $(STAMP)
	$(VENV)/bin/ruff check src tests bench
	$(VENV)/bin/mypy
	$(PY) -m pytest -q -n 2 tests

test-slow: $(STAMP)
	$(PY) -m pytest -q -n 2 -m slow tests

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests bench
	$(VENV)/bin/mypy
	$(VENV)/bin/ruff format --check src tests bench

# The differential fuzzer (tests/fuzz/, docs/reliability.md): N random programs on every
# target against a brute-force reference, M parser mutations; failures are minimised into
# tests/fuzz/regressions/.  J workers at low priority; EXCLUDE=none also runs the known bugs.
N ?= 2000
M ?= 20000
SEED ?= 1
J ?= 1
EXCLUDE ?= now
fuzz: $(STAMP)
	cd tests && PYTHONPATH=../src $(abspath $(PY)) -m fuzz --programs $(N) --mutations $(M) --seed $(SEED) \
		--workers $(J) --exclude $(EXCLUDE) --json ../build/fuzz/summary.json

bench: $(STAMP)
	$(PY) bench/run.py

# The `bench` extra of pyproject.toml (the same pins; never a dependency, never in CI):
# PyTorch, a baseline for bench/bench_cpu.py, and transformers, which with it exports the
# model set of bench/models.py (bench_onnx.py --set).  torch 2.13.0 is the CPU build
# already on the machine's disk; another version downloads gigabytes.
bench-deps: $(STAMP)
	$(VENV)/bin/pip install torch==2.13.0 transformers==5.24.0

clean:
	rm -rf $(VENV) build *.egg-info src/*.egg-info

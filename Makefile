# Two commands on a fresh machine: `make test` and `make demo`.
# Both create .venv, install CPU torch first (a plain `torch` requirement with no
# torch present would pull a multi-GB CUDA build), then the package.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.evo-installed
TORCH_SPEC ?= torch==2.13.0
DEMO_DIR ?= $(shell mktemp -u /tmp/evo-demo-XXXXXX)

.PHONY: setup lint system-deps test test-all demo bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q "$(TORCH_SPEC)"
	$(PY) -m pip install -q -e '.[dev]'
	touch $(STAMP)

setup: $(STAMP)

# bubblewrap and chromium from apt where missing and installable (root or passwordless sudo); else their tests skip.
system-deps:
	@scripts/system_deps.sh

# Lint first: a layering break or an unused import fails in seconds, before the tests' minutes.
lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/lint-imports

# One pytest worker per core, whole files per worker (a module's fixtures are built once), each worker's torch on
# one thread: the tiny model gains little from a second thread. TEST_WORKERS=1 runs the suite serially.
TEST_WORKERS ?= auto
test: setup lint system-deps
	OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 $(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile -m "not slow and not gpu"

test-all: setup system-deps
	$(PY) -m pytest -q

demo: setup
	$(PY) scripts/demo.py $(DEMO_DIR)

bench: setup
	for b in bench/*.py; do $(PY) $$b || exit 1; done

clean:
	rm -rf $(VENV) build dist *.egg-info

# Two commands do all set-up: `make test` and `make demo`.
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
# torch-scatter/torch-sparse have no wheels for current torch: build them once into a cache outside the repo.
WHEEL_CACHE ?= $(HOME)/.cache/streamgnn/wheels
SHARED_WHEELS := $(wildcard ../shared/wheels)
FIND_LINKS := --find-links $(WHEEL_CACHE) $(if $(SHARED_WHEELS),--find-links $(SHARED_WHEELS))
TORCH_PIN := torch==2.13.0
EXTRA_PINS := torch-scatter==2.1.2 torch-sparse==0.6.18
export OMP_WAIT_POLICY ?= passive

.PHONY: setup test test-fast lint format demo bench clean

$(VENV)/.installed: pyproject.toml Makefile
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip wheel setuptools
	$(PIP) install -q $(TORCH_PIN) numpy
	mkdir -p $(WHEEL_CACHE)
	$(PIP) install -q --no-index --no-deps $(FIND_LINKS) $(EXTRA_PINS) 2>/dev/null || \
	  ( $(PIP) wheel --no-build-isolation --no-deps -w $(WHEEL_CACHE) $(EXTRA_PINS) && \
	    $(PIP) install -q --no-index --no-deps $(FIND_LINKS) $(EXTRA_PINS) )
	$(PIP) install -q $(FIND_LINKS) -e '.[dev]' $(TORCH_PIN)
	touch $@

setup: $(VENV)/.installed

lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/lint-imports  # the import layers (pyproject.toml, [tool.importlinter])

format: setup
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

# two workers (pytest-xdist): the suite's tests wait for events, not for time, so they share the cores; most of
# a test's time is one process's Python, so two workers nearly halve the wall time on a 2-core host. Tests go
# out one at a time, the slow modules first (tests/conftest.py, SLOW_MODULES), so neither worker idles at the end.
# The Numba kernels are compiled into their cache once before the first test (tests/warm_kernels.py)
TEST_WORKERS ?= 2
TEST_DIST := -n $(TEST_WORKERS) --dist load --maxschedchunk 1
test: setup lint
	$(VENV)/bin/pytest -q -p no:cacheprovider $(TEST_DIST)

# the inner loop: everything but the tests marked integration (tests/conftest.py)
test-fast: setup lint
	$(VENV)/bin/pytest -q -p no:cacheprovider $(TEST_DIST) -m "not integration"

demo: setup
	$(VENV)/bin/streamgnn demo

bench: setup
	$(VENV)/bin/streamgnn bench store --quick

clean:
	rm -rf $(VENV)

# kernforge: `make demo` sets up a virtual environment and runs the main job;
# `make test` runs the import-layer contracts, ruff, mypy and the default test suite;
# `make test-slow` the tests marked slow (CI runs both); `make gpu-check` is for a machine with
# an NVIDIA GPU (CuPy installed): the GPU tests and the benchmarks, then a short table.
VENV ?= .venv
PYTHON ?= python3
BIN := $(VENV)/bin
# the tests start kernforge in many child processes and rewrite the asserts of ~300 test
# modules: bytecode kept in __pycache__ (git ignores it) spares later runs and children that
# work, also where the environment asks Python not to write it (PYTHONDONTWRITEBYTECODE)
PYTEST := env -u PYTHONDONTWRITEBYTECODE $(BIN)/pytest
# the default suite in TEST_JOBS worker processes (pytest-xdist): most tests wait on compilers
# and child processes, so two workers on the 2-core CI machine take about 2/3 of the time of one
TEST_JOBS ?= 2

.PHONY: setup demo test test-slow gpu-check clean
setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	touch $@

demo: setup
	$(BIN)/kernforge demo

test: setup
	$(BIN)/lint-imports
	$(BIN)/ruff check src tests benchmarks examples tools
	$(BIN)/mypy
	$(PYTEST) -q -n $(TEST_JOBS)

test-slow: setup
	$(PYTEST) -q -m 'slow and not gpu'

gpu-check: setup
	$(BIN)/python benchmarks/gpu_check.py

clean:
	rm -rf $(VENV) runs .pytest_cache

# kernforge: `make demo` sets up a virtual environment and runs the main job;
# `make test` runs the import-layer contracts, ruff, mypy and the default test suite;
# `make test-slow` the tests marked slow (CI runs both); `make gpu-check` is for a machine with
# an NVIDIA GPU (CuPy installed): the GPU tests and the benchmarks, then a short table.
VENV ?= .venv
PYTHON ?= python3
BIN := $(VENV)/bin

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
	$(BIN)/pytest -q

test-slow: setup
	$(BIN)/pytest -q -m 'slow and not gpu'

gpu-check: setup
	$(BIN)/python benchmarks/gpu_check.py

clean:
	rm -rf $(VENV) runs .pytest_cache

# kernforge: `make demo` sets up a virtual environment and runs the main job;
# `make test` runs the import-layer contracts, ruff, mypy and the test suite (what CI runs).
VENV ?= .venv
PYTHON ?= python3
BIN := $(VENV)/bin

.PHONY: setup demo test gpu-check clean
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
	$(BIN)/ruff check src tests scripts examples
	$(BIN)/mypy
	$(BIN)/pytest -q

gpu-check:  # on a machine with an NVIDIA GPU (see scripts/gpu-check.sh)
	bash scripts/gpu-check.sh

clean:
	rm -rf $(VENV) runs .pytest_cache

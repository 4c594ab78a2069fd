# Two entry points for a fresh machine: `make demo` (set up, run the default simulation)
# and `make test` (set up, run the tests). Both create .venv when it is missing.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: demo test lint setup clean

$(BIN)/srl: pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e ".[dev,fast]"
	@touch $(BIN)/srl

setup: $(BIN)/srl

demo: setup
	$(BIN)/srl

test: setup
	$(BIN)/pytest

lint: setup
	$(BIN)/ruff check .

clean:
	rm -rf $(VENV) outputs .pytest_cache

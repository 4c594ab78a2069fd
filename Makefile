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

# The profilers' tests (srl-profile fsdp / kernels / weight-sync on the CPU) need torch. torch 2.13.0's
# CPU wheel lies on this project's machines and CI (pip takes it from there: about 1 minute,
# 750 MB); elsewhere pip would fetch a CUDA build of several GB: `make test TORCH=` skips it and
# those tests skip.
TORCH ?= torch==2.13.0
$(VENV)/.torch: $(BIN)/srl
ifneq ($(TORCH),)
	$(BIN)/pip install -q "$(TORCH)"
endif
	@touch $@

demo: setup
	$(BIN)/srl

test: setup $(VENV)/.torch
	$(BIN)/pytest

lint: setup
	$(BIN)/ruff check .

clean:
	rm -rf $(VENV) outputs .pytest_cache

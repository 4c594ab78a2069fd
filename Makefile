# Two entry points for a fresh machine: `make demo` (set up, run the default simulation)
# and `make test` (set up, run the tests). Both create .venv when it is missing.
# `make demo` installs only the core (no jax, no test tools); `make test` adds the `dev` and
# `fast` extras. Each install step prints pip's progress: nothing is swallowed.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
CORE_STAMP := $(VENV)/.simrl-core
TEST_STAMP := $(VENV)/.simrl-test

.PHONY: demo test lint setup setup-test clean

$(BIN)/python:
	@echo "== creating $(VENV) with $(PY)"
	$(PY) -m venv $(VENV)
	$(BIN)/pip install --progress-bar on --upgrade pip

$(CORE_STAMP): pyproject.toml | $(BIN)/python
	@echo "== installing SimRL (core only: simpy, numpy, attrs, cattrs, click, altair)"
	$(BIN)/pip install --progress-bar on -e .
	@touch $@

$(TEST_STAMP): pyproject.toml | $(BIN)/python
	@echo "== installing SimRL with the dev and fast extras (pytest, hypothesis, ruff, tox, rich, jax)"
	$(BIN)/pip install --progress-bar on -e ".[dev,fast]"
	@touch $@ $(CORE_STAMP)

setup: $(CORE_STAMP)

setup-test: $(TEST_STAMP)

# The profilers' tests (srl-profile fsdp / kernels / weight-sync on the CPU) need torch. torch 2.13.0's
# CPU wheel lies on this project's machines and CI (pip takes it from there: about 1 minute,
# 750 MB); elsewhere pip would fetch a CUDA build of several GB: `make test TORCH=` skips it and
# those tests skip.
TORCH ?= torch==2.13.0
$(VENV)/.torch: $(TEST_STAMP)
ifneq ($(TORCH),)
	@echo "== installing $(TORCH) for the profilers' tests (make test TORCH= skips it)"
	$(BIN)/pip install --progress-bar on "$(TORCH)"
endif
	@touch $@

demo: setup
	$(BIN)/srl

# Two workers, a test file per worker (--dist loadfile: a file's JAX programs compile once, in one process):
# most of the suite's time is single-threaded (SimPy, XLA compiles). `make test PYTEST_WORKERS=0` runs it in one process.
PYTEST_WORKERS ?= 2

test: setup-test $(VENV)/.torch
ifeq ($(PYTEST_WORKERS),0)
	$(BIN)/pytest --durations=25
else
	$(BIN)/pytest -n $(PYTEST_WORKERS) --dist loadfile --durations=25
endif

lint: setup-test
	$(BIN)/ruff check .

clean:
	rm -rf $(VENV) outputs .pytest_cache

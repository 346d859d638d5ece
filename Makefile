# The README's two commands, `make demo` and `make test`, set up everything they need on a
# fresh machine: the virtual environment, the Python packages, the JVM jars (Maven) and the
# local Kafka broker (started and stopped by the run itself).

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
PYTEST_ARGS ?=

.PHONY: help install jars postgres test test-fast test-slow demo bench lint up down clean

help:
	@echo "make demo       run the demo pipeline end to end (sets everything up)"
	@echo "make test       run the whole test suite (sets everything up)"
	@echo "make test-fast  everything but the tests marked slow"
	@echo "make bench      run the benchmarks in bench/ (each prints a RESULT line)"
	@echo "make up|down    start/stop the local Kafka broker (devstack)"
	@echo "make lint       ruff"

install: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	@touch $@

jars: $(STAMP)
	$(BIN)/devstack jars

# The Postgres reader tests start a real PostgreSQL server; install its binaries if missing.
postgres:
	scripts/install-postgres.sh

test: jars postgres
	$(BIN)/python -m pytest $(PYTEST_ARGS)

test-fast: jars postgres
	$(BIN)/python -m pytest -m "not slow" $(PYTEST_ARGS)

test-slow: jars postgres
	$(BIN)/python -m pytest -m slow $(PYTEST_ARGS)

demo: jars
	$(BIN)/python -m flows.demo

bench: jars
	@set -e; for b in bench/*.py; do echo "== $$b"; $(BIN)/python $$b; done

lint: $(STAMP)
	$(BIN)/ruff check .

up: jars
	$(BIN)/devstack up

down: $(STAMP)
	$(BIN)/devstack down

clean: down
	rm -rf .devstack .pytest_cache .hypothesis

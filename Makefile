# The README's two commands, `make demo` and `make test`, set up everything they need on a
# fresh machine: the virtual environment, the Python packages, the JVM jars (Maven) and the
# local Kafka broker (started and stopped by the run itself).

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
PYTEST_ARGS ?=
SUITE  := -m "not cluster" --durations=25 --junitxml=build/test-report.xml

.PHONY: help install jars postgres browser-tools test test-serial test-fast test-slow test-cluster demo bench soak lint up down clean

help:
	@echo "make demo       run the demo pipeline end to end (sets everything up)"
	@echo "make test       run the test suite, all but the cluster suites (sets everything up)"
	@echo "make test-cluster the suites that start a Spark or a Kafka cluster of their own"
	@echo "make test-fast  everything but the tests marked slow"
	@echo "make test-serial the same suite as one pytest run"
	@echo "make bench      run the benchmarks in bench/ (each prints a RESULT line)"
	@echo "make soak       10 minutes of small transactions against a running writer"
	@echo "make up|down    start/stop the local Kafka broker (devstack)"
	@echo "make lint       ruff format --check, ruff check, mypy"

install: $(STAMP)

# The library with every extra, at the versions of constraints.txt. `flows/` and `devstack/` are
# not in the library's wheel: a .pth file puts this repository on the venv's path (they import
# from anywhere, as tests and benchmarks expect); .venv/bin/devstack runs `python -m devstack`.
$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -c constraints.txt -e '.[dev]'
	echo '$(CURDIR)' > "$$($(BIN)/python -c 'import sysconfig; print(sysconfig.get_path("purelib"))')/flow_platform_repo.pth"
	printf '#!/bin/sh\nexec "%s" -m devstack "$$@"\n' '$(CURDIR)/$(BIN)/python' > $(BIN)/devstack
	chmod +x $(BIN)/devstack
	@touch $@

jars: $(STAMP)
	$(BIN)/devstack jars

# The Postgres reader tests start a real PostgreSQL server; install its binaries if missing.
postgres:
	scripts/install-postgres.sh

# The "see it run" tests (tests/ops) drive headless chromium and start a Prometheus server.
browser-tools:
	scripts/install-browser-tools.sh

# Every test's time (setup, call and teardown) lands in build/test-report.xml (JUnit XML), for
# finding where the suite's minutes go; each shard prints its 25 slowest. The suite runs as two
# pytest runs side by side on one broker (tests/shards.py): one run leaves a core idle a third
# of the time. The suites that start a cluster of their own (Spark standalone, three Kafka
# brokers) are `make test-cluster`'s.
test: jars postgres browser-tools
	$(BIN)/python -m tests.shards $(SUITE) $(PYTEST_ARGS)

# The same suite as one pytest run: one output in order, one core.
test-serial: jars postgres browser-tools
	$(BIN)/python -m pytest $(SUITE) $(PYTEST_ARGS)

# The writer on a Spark standalone cluster and on three Kafka brokers, nodes killed and restarted.
test-cluster: jars postgres browser-tools
	$(BIN)/python -m pytest -m cluster --durations=10 --junitxml=build/test-cluster-report.xml $(PYTEST_ARGS)

# Everything but the tests marked slow, as `make test`'s two shards.
test-fast: jars postgres browser-tools
	$(BIN)/python -m tests.shards -m "not slow" $(PYTEST_ARGS)

test-slow: jars postgres browser-tools
	$(BIN)/python -m pytest -m slow $(PYTEST_ARGS)

demo: jars
	$(BIN)/python -m flows.demo

# The soak is not a benchmark of a step: `make soak` runs it (10 minutes).
bench: jars
	@set -e; for b in bench/*.py; do \
		[ "$$b" = bench/soak.py ] && continue; echo "== $$b"; $(BIN)/python $$b; done

soak: jars
	$(BIN)/python bench/soak.py --minutes 10

# Formatting, lint and types; every check runs, the target fails if any did. Not part of `test`.
lint: $(STAMP)
	@status=0; \
	$(BIN)/ruff format --check . || status=1; \
	$(BIN)/ruff check . || status=1; \
	$(BIN)/mypy || status=1; \
	exit $$status

up: jars
	$(BIN)/devstack up

down: $(STAMP)
	$(BIN)/devstack down

clean: down
	rm -rf .devstack .pytest_cache .hypothesis

# Mnemoflow: `make run` starts everything, `make test` runs the whole suite. Nothing to install by hand.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: run down test test-full test-unit test-integration test-e2e test-security test-faults lint bench bench-quick bench-report static-model clean help

help:
	@echo "make run    - install (first time), start the embedded stack, workers, beat, gateway :8080, Flower :5555"
	@echo "make test   - the whole test suite against real PostgreSQL+pgvector, Valkey and Celery workers"
	@echo "make test-full - the suite with the fault scenarios at full size (not CI)"
	@echo "make down   - stop a stack started in the background (mnemoflow up --detach) or in another shell"
	@echo "make lint   - ruff + mypy + import contracts"
	@echo "make bench  - benchmarks (ingest throughput, query latency) printing figures and baselines"
	@echo "make bench-report - run the benchmarks and rewrite docs/benchmarks.md with their figures (~40 min; not CI)"
	@echo "make static-model - optional: distill the fast 'static' embedding model from MiniLM (~2 min, once)"

# The Python client (clients/python, mnemoflow_client) is a distribution of its own; the CLI is built on it.
$(STAMP): pyproject.toml clients/python/pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e ".[dev]" -e ./clients/python
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/mnemoflow up

down: $(STAMP)
	$(BIN)/mnemoflow down

# pytest exits 5 when it collected no tests: that is a failure here.
test: $(STAMP)
	$(BIN)/pytest tests; rc=$$?; if [ $$rc -eq 5 ]; then echo "pytest ran no tests" >&2; exit 1; fi; exit $$rc

# The acceptance suite at full size (tests/faults: 20 stack starts, longer fault runs); not part of CI.
test-full: $(STAMP)
	MNEMOFLOW_TEST_FULL=1 $(BIN)/pytest tests; rc=$$?; if [ $$rc -eq 5 ]; then echo "pytest ran no tests" >&2; exit 1; fi; exit $$rc

test-unit: $(STAMP)
	$(BIN)/pytest tests/unit

test-integration: $(STAMP)
	$(BIN)/pytest tests/integration

test-e2e: $(STAMP)
	$(BIN)/pytest tests/e2e

test-security: $(STAMP)
	$(BIN)/pytest tests/security

test-faults: $(STAMP)
	$(BIN)/pytest tests/faults

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/mypy
	$(BIN)/lint-imports

bench: $(STAMP)
	$(BIN)/python -m bench.embeddings
	$(BIN)/python -m bench.ingest
	$(BIN)/python -m bench.query

# Not part of CI: about 40 minutes here; docs/benchmarks.md is what it writes.
bench-report: $(STAMP)
	$(BIN)/python -m bench.report

bench-quick: $(STAMP)
	$(BIN)/python -m bench.ingest --sizes 2000
	$(BIN)/python -m bench.query --sizes 2000

# Optional, once: the `static` provider's model (a separate build venv keeps torch out of .venv).
static-model: $(STAMP)
	$(BIN)/python -m infra.build_static_model

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache

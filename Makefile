# Two commands do everything on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp
DEMO   := demo
DEMO_DIRS ?= 200000

.PHONY: install demo test test-faults lint typecheck unit bench cassandra-start cassandra-stop clean-demo

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

## demo: generate a synthetic metastore, run the nightly job on it, score it against ground truth
demo: install
	rm -rf $(DEMO) && mkdir -p $(DEMO)
	$(BIN)/dircleaner --store sqlite:///$(DEMO)/meta.db gen --dirs $(DEMO_DIRS) --seed 1 --truth $(DEMO)/truth.txt
	$(BIN)/dircleaner --store sqlite:///$(DEMO)/meta.db run --fpr 0.001 --rate 0 --audit-log $(DEMO)/audit.jsonl
	$(BIN)/python scripts/score.py --store sqlite:///$(DEMO)/meta.db --truth $(DEMO)/truth.txt --audit-log $(DEMO)/audit.jsonl

lint: install
	$(BIN)/ruff check dircleaner tests bench scripts

typecheck: install
	$(BIN)/mypy

## test: lint, type-check, and the whole suite, including a real Cassandra node it starts itself
test: lint typecheck
	scripts/with-cassandra $(BIN)/python -m pytest -q -p no:cacheprovider

## test-faults: a 3-node loopback cluster (RF 3); nodes stopped mid-clean (takes a few minutes)
test-faults: install
	scripts/cassandra stop
	scripts/cassandra start --nodes 3
	DIRCLEANER_FAULTS=1 $(BIN)/python -m pytest -q -p no:cacheprovider tests/faults; \
	status=$$?; scripts/cassandra stop; scripts/cassandra reset; exit $$status

bench: install
	$(BIN)/python -m pytest bench/ --benchmark-only -q

cassandra-start:
	scripts/cassandra start

cassandra-stop:
	scripts/cassandra stop

clean-demo:
	rm -rf $(DEMO)

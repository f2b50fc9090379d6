# labkit: two commands do all the set-up on a fresh machine.
#
#   make report   set up .venv, run every notebook headless, write reports/index.html
#   make test     set up .venv (+ chromium for browser tests), run the test suite
#   make lab      open the notebooks in JupyterLab on 127.0.0.1 (token printed)
#
# Variables: SIZE=quick|full  DEVICE=auto|cpu|cuda  PYTHON=python3  LAB_PORT=8888
#            PYTEST_ARGS="-k something"  ONLY="00_environment 06_compare_gpus"

SHELL  := /bin/bash
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
SIZE   ?= quick
DEVICE ?= auto
OUT    ?= reports
ONLY   ?=
PYTEST_ARGS ?=
STAMP  := $(VENV)/.labkit-setup.stamp

.PHONY: help setup report test test-vllm lab calibrate clean

help:
	@sed -n '2,9p' Makefile | sed 's/^# \{0,1\}//'

# Re-run the set-up only when what it installs from has changed.
$(STAMP): pyproject.toml package.json package-lock.json scripts/setup_venv.sh
	PYTHON=$(PYTHON) VENV=$(VENV) bash scripts/setup_venv.sh
	@touch $(STAMP)

setup: $(STAMP)

report: $(STAMP)
	$(PY) -m labkit report --size $(SIZE) --device $(DEVICE) --out $(OUT) $(if $(ONLY),--only $(ONLY),)

test: $(STAMP)
	@bash scripts/setup_browser.sh
	$(PY) -m pytest $(PYTEST_ARGS)

test-vllm:
	bash scripts/test_vllm.sh

lab: $(STAMP)
	VENV=$(VENV) bash scripts/lab.sh

calibrate: $(STAMP)
	$(PY) -m labkit calibrate --device $(DEVICE)

clean:
	rm -rf $(OUT) build .pytest_cache

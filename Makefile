# rlvr: `make demo` (install + the main job) and `make test` (install + the test suite).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
RLVR := $(VENV)/bin/rlvr
# torch is installed first and pinned: on this machine torch==2.13.0 is a local CPU wheel. If $(PYTHON) can
# already import a torch (a GPU box), the venv is made with --system-site-packages and that torch is kept.
TORCH_SPEC ?= torch==2.13.0
DEMO_DIR ?= runs/demo-$(shell date +%Y%m%d-%H%M%S)
PYTEST_ARGS ?=
BENCH_ARGS ?=

.PHONY: install demo test bench build-model clean help

help:
	@echo "make demo         install, then evaluate / GRPO-train / evaluate the built-in model (~10 min on 2 CPUs)"
	@echo "make test         install, then run the test suite"
	@echo "make bench        install TRL too, then run bench/run.py (rlvr vs TRL, engines, learner MFU, sync vs async; ~25 min)"
	@echo "make build-model  rebuild src/rlvr/models/builtin with scripts/build_base_model.py"
	@echo "make clean        remove .venv and runs/"

$(VENV)/.installed: pyproject.toml Makefile
	@if [ ! -x $(PY) ]; then \
	  if $(PYTHON) -c "import torch" 2>/dev/null; then $(PYTHON) -m venv --system-site-packages $(VENV); \
	  else $(PYTHON) -m venv $(VENV); fi; fi
	$(PY) -c "import torch" 2>/dev/null || $(PIP) install --quiet "$(TORCH_SPEC)"
	$(PIP) install --quiet -e ".[test]"
	$(PY) -c "import torch, rlvr; print('rlvr', rlvr.__version__, 'with torch', torch.__version__)"
	touch $@

install: $(VENV)/.installed

demo: install
	$(RLVR) train recipes/grpo.yaml run.dir=$(DEMO_DIR)

test: install
	$(PY) -m pytest -q --durations=15 $(PYTEST_ARGS)

bench: install
	$(PIP) install --quiet -e ".[test,bench]"
	$(PY) bench/run.py $(BENCH_ARGS)

build-model: install
	$(PY) scripts/build_base_model.py

clean:
	rm -rf $(VENV) runs .pytest_cache

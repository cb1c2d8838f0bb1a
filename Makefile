# Two commands do all set-up on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV ?= .venv
# Torch first and pinned, so no CUDA build is pulled in by accident.
TORCH_SPEC ?= torch==2.13.0
PY := $(VENV)/bin/python
PIP := $(PY) -m pip install --quiet --disable-pip-version-check
PYTEST_ARGS ?=

.PHONY: demo test lint typecheck docs bench clean

$(VENV)/.torch:
	$(PYTHON) -m venv $(VENV)
	$(PIP) "$(TORCH_SPEC)"
	touch $@

$(VENV)/.base: $(VENV)/.torch pyproject.toml
	$(PIP) -e .
	touch $@

$(VENV)/.dev: $(VENV)/.torch pyproject.toml
	$(PIP) -e ".[dev,triton,embed]"
	touch $@

$(VENV)/.docs: $(VENV)/.dev
	$(PIP) -e ".[dev,triton,embed,docs]"
	touch $@

demo: $(VENV)/.base
	$(PY) -m reasonserve demo

test: $(VENV)/.dev
	$(PY) -m pytest $(PYTEST_ARGS)

lint: $(VENV)/.dev
	$(VENV)/bin/ruff check src tests benchmarks

typecheck: $(VENV)/.dev
	$(VENV)/bin/mypy

docs: $(VENV)/.docs
	$(VENV)/bin/mkdocs build --strict

bench: $(VENV)/.dev
	$(PY) benchmarks/ops.py

clean:
	rm -rf $(VENV) site build dist .pytest_cache .ruff_cache .mypy_cache .hypothesis

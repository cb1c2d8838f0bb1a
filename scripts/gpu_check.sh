#!/usr/bin/env bash
# The one prepared GPU run of issue 28 (at most 9.5 minutes on one H100): the gpu-marked tests
# (engine, kernels, ops), then benchmarks/gpu.py. Run from the repository root on a machine with CUDA:
#
#   bash scripts/gpu_check.sh            # both; results under $OUT (if set) or benchmarks/results/
#   bash scripts/gpu_check.sh tests      # only the tests (<= 3.5 min); `bench`: only the benchmark (<= 6 min)
#   bash scripts/gpu_check.sh --prepare  # here, with network: pytest + hypothesis into build/gpu_deps
#
# The device image has torch, Triton, transformers and safetensors; the tests also need pytest
# and hypothesis: when they are missing, build/gpu_deps (made by --prepare, carried along) is used.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
DEPS=build/gpu_deps

if [ "${1:-}" = "--prepare" ]; then
  exec "$PY" -m pip install --quiet --disable-pip-version-check --target "$DEPS" pytest hypothesis
fi

export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
if ! "$PY" -c "import pytest, hypothesis" 2>/dev/null && [ -d "$DEPS" ]; then
  export PYTHONPATH="$PYTHONPATH:$PWD/$DEPS"
fi
RESULTS=${OUT:-benchmarks/results}
mkdir -p "$RESULTS"

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
"$PY" -c "import torch, triton, transformers; print('torch', torch.__version__, 'cuda', torch.version.cuda,
      'triton', triton.__version__, 'transformers', transformers.__version__)"

WHAT=${1:-all}
tests_rc=0
bench_rc=0
if [ "$WHAT" = all ] || [ "$WHAT" = tests ]; then
  # Only the files that hold gpu-marked tests: the others may import packages this image lacks.
  mapfile -t FILES < <(grep -l "pytest.mark.gpu" tests/test_*.py)
  echo "== pytest -m gpu ${FILES[*]}"
  timeout 210 "$PY" -m pytest -p no:cacheprovider -q -m gpu -rs --durations=15 "${FILES[@]}" 2>&1 \
    | tee "$RESULTS/gpu-tests.txt"
  tests_rc=${PIPESTATUS[0]}
fi
if [ "$WHAT" = all ] || [ "$WHAT" = bench ]; then
  echo "== benchmarks/gpu.py"
  timeout 350 "$PY" benchmarks/gpu.py --budget-s 260 --json "$RESULTS/gpu.json" 2>&1 | tee "$RESULTS/gpu-bench.txt"
  bench_rc=${PIPESTATUS[0]}
fi

echo "pytest exit $tests_rc, benchmark exit $bench_rc (results in $RESULTS)"
[ "$tests_rc" -eq 0 ] && [ "$bench_rc" -eq 0 ]

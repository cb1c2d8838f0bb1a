#!/usr/bin/env bash
# The one prepared GPU run of issue 28. Guide to its results: docs/gpu_first_run.md.
#
#   bash scripts/gpu_check.sh --prepare      # here, with network: pytest + hypothesis -> build/gpu_deps
#   bash scripts/gpu_check.sh                # on the GPU machine: every stage, in the order below
#   bash scripts/gpu_check.sh bench engine   # only these stages, in this order
#   bash scripts/gpu_check.sh --dry-run      # no GPU: the CPU walk-through of every stage
#
# Device call (the run tool, limit 600 s): carry ["build/gpu_deps"], command
#   bash scripts/gpu_check.sh
# Results go to $OUT (else benchmarks/results/gpu-check/) AS EACH STAGE ENDS, so a kill
# still returns what finished: summary.txt (one line per stage: ok / FAILED / TIMEOUT /
# SKIPPED), NN-<stage>.log, <stage>.xml (pytest JUnit), gpu.json (benchmarks/gpu.py,
# rewritten after every section), ops-cuda.json, seeded_sampling.json.
#
# Stages, most valuable first (each with its own timeout, cut to the time left):
#   env       versions, GPU, switches (seconds)
#   kernels   pytest -m gpu tests/test_gpu_kernels.py: a row's bits under every GEMM M bucket
#             and TMA, paged attention across prefill/decode/batches/graphs, bad tables.
#             First because it names the switch to flip when something is wrong, and its
#             Triton compiles are the ones the benchmark needs (shared on-disk cache).
#   bench     benchmarks/gpu.py: the table of issue 28's targets (engine vs generate,
#             DVR sweep, decode step, ops, 7B). Its --budget-s stops new sections in time.
#   engine    pytest -m gpu tests/test_gpu_engine.py (dtypes, graphs vs eager, DVR, faults)
#   ops-tests pytest -m gpu tests/test_gpu.py (7B-shaped linear, row ops, sampling on CUDA)
#   sampling-tests  pytest -m gpu tests/test_sampling.py
#   ops       benchmarks/ops.py --device cuda (the full ops table)
#   sampling  benchmarks/seeded_sampling.py --device cuda
# Total budget GPU_CHECK_BUDGET_S (default 560 s: 600 s limit minus margin); a stage with
# less than GPU_CHECK_MIN_STAGE_S (default 20) left is SKIPPED. Exit 0 only if every stage
# that was asked for ran and passed; 2 when there is no CUDA device or torch does not import
# (and no --dry-run). PYTHON: the interpreter (default: python3, else python, with torch).
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-}
if [ -z "$PY" ]; then  # the image's Python is the one with torch: python3, else python
  PY=python3
  for cand in python3 python; do
    if "$cand" -c "import torch" 2>/dev/null; then PY=$cand; break; fi
  done
fi
DEPS=build/gpu_deps
ALL_STAGES=(env kernels bench engine ops-tests sampling-tests ops sampling)

if [ "${1:-}" = "--prepare" ]; then
  # Pure-Python wheels resolved for Python 3.10 (so exceptiongroup and tomli come too):
  # the same folder then works on any Python >= 3.10 the image may have; no network there.
  # hypothesis is pinned: later releases carry a compiled module built for one Python.
  rm -rf "$DEPS"
  "$PY" -m pip install --quiet --disable-pip-version-check --target "$DEPS" --python-version 3.10 \
    --only-binary=:all: pytest "hypothesis==6.155.2" exceptiongroup tomli || exit 1
  find "$DEPS" -name __pycache__ -prune -exec rm -rf {} +
  if find "$DEPS" -name '*.so' | grep -q .; then echo "compiled modules in $DEPS: not portable"; exit 1; fi
  size_kb=$(du -sk "$DEPS" | cut -f1)
  echo "prepared $DEPS: $((size_kb / 1024)) MiB (carry limit 64 MiB)"
  [ "$size_kb" -lt $((60 * 1024)) ] || { echo "too large to carry"; exit 1; }
  # -S: no site-packages, so this imports the carried copies themselves
  "$PY" -S -c 'import sys; sys.path.insert(0, sys.argv[1]); import pytest, hypothesis
print("carried: pytest", pytest.__version__, "hypothesis", hypothesis.__version__)' "$DEPS"
  exit $?
fi

DRY=0
STAGES=()
for arg in "$@"; do
  case "$arg" in
    --dry-run) DRY=1 ;;
    -h|--help) sed -n '2,32p' "$0"; exit 0 ;;
    *) if [[ " ${ALL_STAGES[*]} " == *" $arg "* ]]; then STAGES+=("$arg"); else
         echo "unknown stage or option: $arg (stages: ${ALL_STAGES[*]})"; exit 64; fi ;;
  esac
done
[ ${#STAGES[@]} -gt 0 ] || STAGES=("${ALL_STAGES[@]}")

RESULTS=${OUT:-benchmarks/results/gpu-check}
mkdir -p "$RESULTS"
SUMMARY=$RESULTS/summary.txt
: > "$SUMMARY"
BUDGET=${GPU_CHECK_BUDGET_S:-560}
MIN_STAGE=${GPU_CHECK_MIN_STAGE_S:-20}
DEADLINE=$((SECONDS + BUDGET))

# This tree's package wins over any installed reasonserve; the carried test deps are
# appended to sys.path (never shadowing the image's own packages) by the pytest launcher.
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
unset TRITON_INTERPRET  # a leftover =1 would run every kernel in the CPU interpreter
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false PYTHONUNBUFFERED=1
export TRITON_CACHE_DIR=${TRITON_CACHE_DIR:-$PWD/build/triton_cache}  # kept on a warm machine
PYTEST_MAIN='import sys; sys.path.append(sys.argv.pop(1)); import pytest; sys.exit(pytest.main(sys.argv[1:]))'

failed=0
n=0
# stage NAME CAP_S CMD...: runs CMD with a timeout of min(CAP_S, time left), output to the
# console and NN-NAME.log, one status line to summary.txt.
stage() {
  local name=$1 cap=$2
  shift 2
  n=$((n + 1))
  local log left limit start rc status
  log=$RESULTS/$(printf '%02d' "$n")-$name.log
  left=$((DEADLINE - SECONDS))
  if [ "$left" -lt "$MIN_STAGE" ]; then
    echo "$name: SKIPPED (${left} s of the ${BUDGET} s budget left)" | tee -a "$SUMMARY"
    failed=1
    return
  fi
  limit=$((cap < left ? cap : left))
  echo "== [${SECONDS} s] $name (timeout ${limit} s): $*" | tee "$log"
  start=$SECONDS
  timeout -k 10 "$limit" "$@" 2>&1 | tee -a "$log"
  rc=${PIPESTATUS[0]}
  case $rc in
    0) status=ok ;;
    124|137) status="TIMEOUT after ${limit} s" ;;
    *) status="FAILED (exit $rc)" ;;
  esac
  [ "$rc" -eq 0 ] || failed=1
  echo "$name: $status in $((SECONDS - start)) s -> $(basename "$log")" | tee -a "$SUMMARY"
}

pytest_stage() {  # NAME CAP_S FILE: the gpu-marked tests of one file, in their own process
  local name=$1 cap=$2 file=$3
  # -v: one line per test as it ends, so a stage killed at its timeout still shows each outcome
  stage "$name" "$cap" "$PY" -c "$PYTEST_MAIN" "$PWD/$DEPS" -p no:cacheprovider -v --tb=short -m gpu -rfEs \
    --durations=10 --junitxml="$RESULTS/$name.xml" "$file"
}

bench_stage() {  # benchmarks/gpu.py: no new section past its timeout minus ~2 minutes (the 7B one)
  local cap=330 left=$((DEADLINE - SECONDS))
  local limit=$((cap < left ? cap : left))
  local budget=$((limit > 200 ? limit - 130 : limit / 2))
  if [ "$DRY" = 1 ]; then
    stage bench "$cap" "$PY" benchmarks/gpu.py --smoke --json "$RESULTS/gpu.json"
  else
    stage bench "$cap" "$PY" benchmarks/gpu.py --budget-s "$budget" --json "$RESULTS/gpu.json"
  fi
}

copy_result() {  # a benchmark's table (NAME.json, NAME.png) from benchmarks/results into the results
  local f
  for f in "benchmarks/results/$1".json "benchmarks/results/$1".png; do
    [ -f "$f" ] && cp "$f" "$RESULTS/"
  done
  return 0
}

if [ "$DRY" = 1 ]; then
  echo "(--dry-run: no GPU needed; gpu tests skip, the benchmark runs --smoke on CPU," \
       "the ops and sampling benchmarks are import-checked)" | tee -a "$SUMMARY"
fi
for s in "${STAGES[@]}"; do
  case $s in
    env)
      timeout 30 nvidia-smi 2>&1 | tee "$RESULTS/nvidia-smi.txt"
      if [ "$DRY" = 1 ]; then
        stage env 60 "$PY" scripts/gpu_env.py
      else
        stage env 60 "$PY" scripts/gpu_env.py --require-cuda
        if grep -q "^env: FAILED (exit 3)" "$SUMMARY"; then
          echo "no CUDA device here: nothing to run (bash scripts/gpu_check.sh --dry-run walks the stages on CPU)" \
            | tee -a "$SUMMARY"
          exit 2
        elif grep -q "^env: FAILED (exit 4)" "$SUMMARY"; then
          echo "$PY cannot import torch: set PYTHON to the image's Python" | tee -a "$SUMMARY"
          exit 2
        fi
      fi ;;
    kernels) pytest_stage kernels 180 tests/test_gpu_kernels.py ;;
    bench) bench_stage ;;
    engine) pytest_stage engine 150 tests/test_gpu_engine.py ;;
    ops-tests) pytest_stage ops-tests 90 tests/test_gpu.py ;;
    sampling-tests) pytest_stage sampling-tests 60 tests/test_sampling.py ;;
    ops)
      if [ "$DRY" = 1 ]; then
        stage ops 60 "$PY" -c 'import sys; sys.path.insert(0, "benchmarks"); import ops, _ops_gpu; print("imports ok")'
      else
        rm -f benchmarks/results/ops-cuda.*  # no stale table from an earlier call
        stage ops 150 "$PY" benchmarks/ops.py --device cuda
        copy_result ops-cuda
      fi ;;
    sampling)
      if [ "$DRY" = 1 ]; then
        stage sampling 60 "$PY" -c 'import sys; sys.path.insert(0, "benchmarks"); import seeded_sampling; print("imports ok")'
      else
        rm -f benchmarks/results/seeded_sampling.*
        stage sampling 90 "$PY" benchmarks/seeded_sampling.py --device cuda
        copy_result seeded_sampling
      fi ;;
  esac
done

echo
echo "== summary ($RESULTS/summary.txt)"
cat "$SUMMARY"
exit $failed

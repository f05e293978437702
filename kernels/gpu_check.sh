#!/usr/bin/env bash
# The kernels' GPU check, in one call: the GPU-marked tests, the rest of tests/kernels compiled
# for the GPU (the same tests the CPU runs under Triton's interpreter), and the kernel benchmark.
# Everything lands under bench/results/ (and is copied to $OUT when that is set):
#   kernels_gpu_check.log   all output, with the environment first
#   kernels_gpu_tests.xml   JUnit results of both pytest runs (one file per run, concatenated)
#   kernels.json            the benchmark's numbers (and the block in docs/benchmarks.md)
#
#   bash kernels/gpu_check.sh            # from the repository root, on a machine with CUDA
#
# Budget (H200): each step has its own timeout; the whole script stays under ~8 minutes. A step
# that fails is reported and the next one still runs; the exit code is the first failure's.
# PYTHON picks the interpreter (default: python3 or .venv/bin/python, whichever's torch sees CUDA).
# Without CUDA it still runs: GPU tests skip, the rest use Triton's interpreter, the bench the CPU.

set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
unset TRITON_INTERPRET

RESULTS=bench/results
LOG=$RESULTS/kernels_gpu_check.log
mkdir -p "$RESULTS"
: >"$LOG"

if [ -z "${PYTHON:-}" ]; then  # the first interpreter whose torch sees CUDA, else the venv's
  for candidate in python3 .venv/bin/python; do
    if command -v "$candidate" >/dev/null && "$candidate" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
      PYTHON=$candidate
      break
    fi
  done
  if [ -z "${PYTHON:-}" ]; then
    if [ -x .venv/bin/python ]; then PYTHON=.venv/bin/python; else PYTHON=python3; fi
  fi
fi

status=0
step() {  # step NAME TIMEOUT_S COMMAND...: runs, logs, remembers the first failure
  local name=$1 limit=$2
  shift 2
  echo "=== $name ($(date +%T), limit ${limit}s): $*" | tee -a "$LOG"
  local start=$SECONDS
  timeout --kill-after=10 "$limit" "$@" 2>&1 | tee -a "$LOG"
  local rc=${PIPESTATUS[0]}
  echo "=== $name: exit $rc after $((SECONDS - start))s" | tee -a "$LOG"
  if [ "$rc" -ne 0 ] && [ "$status" -eq 0 ]; then status=$rc; fi
}

step environment 30 bash -c "nvidia-smi --query-gpu=name,compute_cap,memory.total,driver_version --format=csv; \
  $PYTHON -c 'import sys, torch, triton; print(sys.version.split()[0], \"torch\", torch.__version__, \"triton\", triton.__version__, \"cuda\", torch.cuda.is_available(), torch.cuda.get_device_name() if torch.cuda.is_available() else \"-\")'"

step "pytest -m gpu" 150 "$PYTHON" -m pytest -q -m gpu tests/kernels -p no:cacheprovider \
  --junitxml="$RESULTS/kernels_gpu_tests_marked.xml"

step "pytest tests/kernels (compiled)" 110 "$PYTHON" -m pytest -q -m "not gpu" tests/kernels -p no:cacheprovider \
  --junitxml="$RESULTS/kernels_gpu_tests_rest.xml"

step "python -m kernels.bench" 170 "$PYTHON" -m kernels.bench

cat "$RESULTS"/kernels_gpu_tests_marked.xml "$RESULTS"/kernels_gpu_tests_rest.xml >"$RESULTS/kernels_gpu_tests.xml" 2>/dev/null
rm -f "$RESULTS"/kernels_gpu_tests_marked.xml "$RESULTS"/kernels_gpu_tests_rest.xml
echo "=== done: exit $status" | tee -a "$LOG"

if [ -n "${OUT:-}" ] && [ -d "${OUT:-}" ]; then
  cp "$LOG" "$RESULTS/kernels_gpu_tests.xml" "$OUT"/ 2>/dev/null
  [ -f "$RESULTS/kernels.json" ] && cp "$RESULTS/kernels.json" docs/benchmarks.md "$OUT"/
fi
exit "$status"

#!/usr/bin/env bash
# One prepared run for a lent GPU machine (written for: one H200, CUDA 13, cupy-cuda13x, PyTorch
# installed, no network). Runs the GPU test suite, then benchmarks/bench_gpu.py, and prints a
# summary. Installs nothing: the project is used from this checkout through PYTHONPATH.
#
#     bash benchmarks/gpu_check.sh              # about 8 minutes in all
#     OUT=/some/dir bash benchmarks/gpu_check.sh   # logs go to $OUT (default: ./gpu_check_out)
#
# Time boxes: tests 190 s, benchmark 270 s (its own --budget is 250 s): under 8 minutes in all.
# The tests need pytest and hypothesis. If the machine lacks them, prepare them on a machine with
# a network (`pip install --target .gpu_deps pytest hypothesis`) and send the folder along; it is
# used only when they are not importable already.
set -e
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export HYPOTHESIS_PROFILE="${HYPOTHESIS_PROFILE:-ci}"
OUT="${OUT:-$PWD/gpu_check_out}"
mkdir -p "$OUT"
PY="${PYTHON:-python3}"
START=$(date +%s)

echo "== environment"
$PY - <<'PY' 2>&1 | tee "$OUT/env.txt"
import importlib, platform
print("python", platform.python_version())
try:
    import cupy as cp
    props = cp.cuda.runtime.getDeviceProperties(0)
    print("cupy", cp.__version__, "| CUDA runtime", cp.cuda.runtime.runtimeGetVersion(),
          "| driver", cp.cuda.runtime.driverGetVersion(), "|", props["name"],
          "| %.0f GiB" % (props["totalGlobalMem"] / 2**30))
except Exception as exc:
    print("cupy: NOT USABLE:", type(exc).__name__, exc)
try:
    torch = importlib.import_module("torch")
    print("torch", torch.__version__, "| cuda", torch.cuda.is_available())
except ImportError:
    print("torch: not installed (the benchmark leaves its rows out)")
import autograd
print("autograd.cuda_available():", autograd.cuda_available())
PY

echo "== GPU tests"
if ! $PY -c "import pytest, hypothesis" 2>/dev/null && [ -d "$PWD/.gpu_deps" ]; then
    export PYTHONPATH="$PYTHONPATH:$PWD/.gpu_deps"
fi
# every test marked `gpu` in the suite (op parity, fused kernels vs references, model, sampler,
# training vs the CPU step by step)
set +e
if $PY -c "import pytest, hypothesis" 2>/dev/null; then
    timeout 190 $PY -m pytest -q -p no:cacheprovider -rs --maxfail=30 -m "gpu" tests 2>&1 | tee "$OUT/tests.txt"
    TEST_RC=${PIPESTATUS[0]}
else
    echo "pytest or hypothesis is not installed here: GPU tests NOT run (see the header for .gpu_deps)" \
        | tee "$OUT/tests.txt"
    TEST_RC=not-run
fi
set -e

echo "== benchmark"
set +e
timeout 270 $PY benchmarks/bench_gpu.py --budget 250 2>&1 | tee "$OUT/bench.txt"
BENCH_RC=${PIPESTATUS[0]}
set -e

echo
echo "== summary ($(( $(date +%s) - START )) s)"
grep -E "^(cupy|torch)" "$OUT/env.txt" || true
echo "tests (rc=$TEST_RC): $(grep -E '(passed|failed|error|skipped|NOT run)' "$OUT/tests.txt" | tail -1)"
grep -E "^FAILED|^ERROR" "$OUT/tests.txt" | head -20 || true
echo "benchmark (rc=$BENCH_RC):"
grep -E "^\||^batch size|^model:|^matmul peak|^peer" "$OUT/bench.txt" || true
echo "logs: $OUT"

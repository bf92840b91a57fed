#!/usr/bin/env bash
# The GPU checks in one command, on a machine with an NVIDIA GPU, from a fresh clone:
# installs what the GPU suite needs, runs tests/gpu (both execution modes) with the CPU tests
# of the GPU code beside it, then benchmarks/gpu_bls.py; about 5 minutes, bounded at 8.
#
#   scripts/gpu_check.sh                       # installs from the package index
#   scripts/gpu_check.sh --download-wheels .whl   # on a networked machine: fetch the wheels
#   scripts/gpu_check.sh                       # ...then, where nothing can be fetched, with
#                                              # .whl/ beside it (or MODELYARD_WHEELS=DIR)
#
# Needs python3 with torch built for CUDA (installed from the index when missing and there is
# one). Results go to $OUT (else benchmarks/out/gpu-check): the pytest log, the benchmark's table and
# JSON. Exit status: the suite's, or the benchmark's when the suite passed.
set -uo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
WHEELS="${MODELYARD_WHEELS:-.whl}"
RESULTS="${OUT:-benchmarks/out/gpu-check}"
# What the GPU suite imports beyond a machine image with torch, numpy, onnxruntime, aiohttp,
# pytest and nvidia-ml-py (the versions are those of the machine that downloads them).
CARRIED=(msgspec tritonclient python-rapidjson geventhttpclient gevent greenlet brotli zope.event
  zope.interface uvicorn httptools orjson grpcio grpcio-health-checking protobuf watchfiles
  pytest-asyncio pytest-timeout nvidia-ml-py ml-dtypes)

if [ "${1:-}" = "--download-wheels" ]; then
  dest="${2:?--download-wheels DIR}"
  mkdir -p "$dest"
  pins=$("$PY" - "${CARRIED[@]}" <<'PYEOF'
import sys
from importlib.metadata import PackageNotFoundError, version
for name in sys.argv[1:]:
    try:
        print(f"{name}=={version(name)}")
    except PackageNotFoundError:
        print(name)
PYEOF
)
  fetch() {
    "$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
      --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
      --platform manylinux2014_x86_64 -d "$dest" "$1" 2>/dev/null
  }
  for pin in $pins; do  # this machine's version, else the newest with a cp312 wheel
    fetch "$pin" || fetch "${pin%%==*}" || { echo "no cp312 wheel of ${pin%%==*}" >&2; exit 1; }
  done
  du -sh "$dest"
  exit 0
fi

mkdir -p "$RESULTS"
started=$(date +%s)
echo "== install"
if compgen -G "$WHEELS/*.whl" >/dev/null; then
  site="${TMPDIR:-/tmp}/modelyard-gpu-site"
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target "$site" "$WHEELS"/*.whl || exit 1
  export PYTHONPATH="$site:$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
else
  "$PY" -m pip install -q -e ".[gpu]" pytest pytest-asyncio pytest-timeout || exit 1
  "$PY" -c "import torch" 2>/dev/null || "$PY" -m pip install -q torch || exit 1
  export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONUNBUFFERED=1

echo "== what this machine has"
command -v nvidia-smi >/dev/null && nvidia-smi -L
"$PY" - <<'PYEOF' || exit 1
import sys
import torch
from modelyard.devices import discover_gpus
from tests.gpu.support import REASON
found = discover_gpus()
print(f"python {sys.version.split()[0]}, torch {torch.__version__} (CUDA {torch.version.cuda})")
print(f"modelyard sees {len(found.devices)} GPU(s) through {found.source or '-'}: "
      + "; ".join(f"{d.index}: {d.name} sm_{d.compute_capability[0]}{d.compute_capability[1]}"
                  for d in found.devices))
if REASON is not None:
    sys.exit(f"the GPU suite cannot run here: {REASON}")
PYEOF

echo "== tests/gpu and the CPU tests of the GPU code"
timeout 330 "$PY" -m pytest -q -p no:cacheprovider -rs -o timeout=300 tests/gpu \
  tests/triton_python_backend_utils/test_dlpack.py tests/config/test_placement.py \
  tests/backends/python/test_dlpack_outputs.py tests/core/test_cuda_regions.py \
  tests/core/test_cuda_shared_memory.py tests/backends/python/test_cuda_ipc.py \
  tests/metrics/test_gpu_metrics_units.py 2>&1 | tee "$RESULTS/gpu_suite.log"
suite=${PIPESTATUS[0]}

echo "== benchmarks/gpu_bls.py"
timeout 150 "$PY" benchmarks/gpu_bls.py --requests 20 --json "$RESULTS/gpu_bls.json" \
  | tee "$RESULTS/gpu_bls.md"
bench=${PIPESTATUS[0]}

echo "== done in $(( $(date +%s) - started )) s: suite exit $suite, benchmark exit $bench"
[ "$suite" -ne 0 ] && exit "$suite"
exit "$bench"

#!/usr/bin/env bash
# On a GPU machine (the device tool), after scripts/device-pack.sh here: unpacks the bundle, then runs the CUDA tests
# and the CUDA bench on the real driver, logs under $OUT. Arguments go to the bench (e.g. --quick).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
tar -xJf .node-carry/bundle.tar.xz
export PATH="$PWD/.node-carry/bin:$PATH" STOWAGE_TRACES="$PWD/.node-carry/traces"
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; node --version; command -v cc gcc nvcc; } 2>&1 | tee "$OUT/machine.txt"
timeout "${TEST_TIMEOUT:-300}" node packages/allocator-cuda/scripts/test-cuda.mjs --reporter spec 2>&1 | tee "$OUT/test-cuda.log"
echo "test:cuda exit ${PIPESTATUS[0]}" | tee -a "$OUT/test-cuda.log"
timeout "${BENCH_TIMEOUT:-200}" node tools/lab/dist-bench/allocator-cuda/cuda.bench.js "$@" > "$OUT/bench-cuda.jsonl" 2> "$OUT/bench-cuda.err"
echo "bench:cuda exit $?"; tail -5 "$OUT/bench-cuda.err"

#!/usr/bin/env bash
# Installs what the build needs, builds spotdnn once with AddressSanitizer and
# UndefinedBehaviorSanitizer, and runs every test (the unit, process and e2e tiers) in that build.
# Usage: deploy/test.sh            (from anywhere; run as root or with sudo on Debian 12)
# Env:   SPOTDNN_DATA_DIR          the public datasets (default: ../shared/data beside the checkout)
#        SPOTDNN_SKIP_SANITIZE=1   the normal build (RelWithDebInfo, in build/) instead
#        JOBS                      build parallelism (default: number of cores)
#
# Why one build: every test still runs once, and where a memory error or undefined behaviour also
# fails it; compiling everything twice (a normal build, then this one) made this command take
# 80 minutes cold on 2 cores, over CI's limit (docs/development.md).
set -euo pipefail
cd "$(dirname "$0")/.."
bash deploy/setup.sh
jobs=${JOBS:-$(nproc)}
data_dir=${SPOTDNN_DATA_DIR:-$(pwd)/../shared/data}
start=$(date +%s)

if [ "${SPOTDNN_SKIP_SANITIZE:-0}" = 1 ]; then
  echo "== build (RelWithDebInfo)"
  # -g1 (line tables: file:line in stack traces) builds about a fifth faster than full -g.
  cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSPOTDNN_DATA_DIR="$data_dir" \
    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -g1 -DNDEBUG"
  cmake --build build -j "$jobs"
  echo "== tests: unit, process, e2e"
  (cd build && ctest --output-on-failure -j "$jobs")
else
  echo "== build (ASan + UBSan)"
  # -O1, as the sanitizers' authors advise: at -O0 the Monte Carlo planner tests ran for minutes.
  # The tests' own sources at -O0: they compile in about half the time, and run no hot loops.
  cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DSPOTDNN_SANITIZE=ON \
    -DSPOTDNN_DATA_DIR="$data_dir" -DCMAKE_CXX_FLAGS_DEBUG="-O1 -g1" -DSPOTDNN_TEST_CXX_FLAGS=-O0
  cmake --build build-asan -j "$jobs"
  echo "== tests (ASan + UBSan): unit, process, e2e"
  (cd build-asan && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
    ctest --output-on-failure -j "$jobs")
fi
echo "== done in $(( $(date +%s) - start )) s after the set-up"

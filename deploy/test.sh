#!/usr/bin/env bash
# Installs what the build needs, builds spotdnn, and runs the whole test suite twice: in the normal
# build, and in an AddressSanitizer + UndefinedBehaviorSanitizer build.
# Usage: deploy/test.sh            (from anywhere; run as root or with sudo on Debian 12)
# Env:   SPOTDNN_DATA_DIR          the public datasets (default: ../shared/data beside the checkout)
#        SPOTDNN_SKIP_SANITIZE=1   skip the sanitizer build
#        JOBS                      build parallelism (default: number of cores)
set -euo pipefail
cd "$(dirname "$0")/.."
bash deploy/setup.sh
jobs=${JOBS:-$(nproc)}
data_dir=${SPOTDNN_DATA_DIR:-$(pwd)/../shared/data}

echo "== build (RelWithDebInfo)"
# -g1 (line tables: file:line in stack traces) builds about a fifth faster than full -g.
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSPOTDNN_DATA_DIR="$data_dir" \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -g1 -DNDEBUG"
cmake --build build -j "$jobs"
echo "== tests"
(cd build && ctest --output-on-failure -j "$jobs")

if [ "${SPOTDNN_SKIP_SANITIZE:-0}" != 1 ]; then
  echo "== build (ASan + UBSan)"
  # The parser fuzz target (its own clang ASan build) already ran in the normal build.
  cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DSPOTDNN_SANITIZE=ON \
    -DSPOTDNN_BUILD_BENCH=OFF -DSPOTDNN_BUILD_FUZZ=OFF -DSPOTDNN_DATA_DIR="$data_dir" \
    -DCMAKE_CXX_FLAGS_DEBUG="-O1 -g1"
  cmake --build build-asan -j "$jobs"
  echo "== tests (ASan + UBSan)"
  (cd build-asan && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
    ctest --output-on-failure -j "$jobs")
fi

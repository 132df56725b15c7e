#!/usr/bin/env bash
# Installs what the build needs, builds spotdnn, and runs the main job on the built-in catalog and
# workload. Extra arguments go to the spotdnn command.
set -euo pipefail
cd "$(dirname "$0")/.."
bash deploy/setup.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo
cmake --build build -j "${JOBS:-$(nproc)}" --target spotdnn
echo
echo "\$ spotdnn plan --workload resnet110 --catalog aws-spotdnn-prototype --loss 0.9 --deadline 30m $*"
./build/spotdnn plan --workload resnet110 --catalog aws-spotdnn-prototype --loss 0.9 --deadline 30m "$@"

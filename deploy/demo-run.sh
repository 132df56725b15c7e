#!/usr/bin/env bash
# The second demo: a whole job on one machine. Installs what the build needs, builds, starts the
# four services (and the local metadata emulator) with `spotdnn up`, runs deploy/examples/job.json
# on the local provider with simulated workers, revokes one worker 8 s in with a 10 s spot notice,
# and shows how the gateway re-planned and took over before the worker was gone. Stops the
# services at the end. State goes to $SPOTDNN_HOME (default: a fresh folder under /tmp).
set -euo pipefail
cd "$(dirname "$0")/.."
bash deploy/setup.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo
cmake --build build -j "${JOBS:-$(nproc)}" --target spotdnn spotdnn-predictor spotdnn-provisioner \
  spotdnn-profiler spotdnn-detector spotdnn-metadata-emulator spotdnn-sim-worker
export SPOTDNN_HOME="${SPOTDNN_HOME:-$(mktemp -d /tmp/spotdnn-demo.XXXXXX)}"
spotdnn=./build/spotdnn
$spotdnn up
trap '$spotdnn down' EXIT

job="resnet110-demo-$(date +%s)"
sed "s/\"resnet110-demo\"/\"$job\"/" deploy/examples/job.json > "$SPOTDNN_HOME/job.json"
echo
echo "\$ spotdnn run $SPOTDNN_HOME/job.json"
$spotdnn run "$SPOTDNN_HOME/job.json" &
run=$!

# A cloud's revocation: the worker with index 1 gets a spot notice 8 s into the job.
victim=""
for _ in $(seq 1 300); do
  victim=$($spotdnn local list --job "$job" | awk '$3 == "worker" && $4 == 1 { print $1 }')
  [ -n "$victim" ] && break
  sleep 0.1
done
sleep 8
echo "\$ spotdnn local revoke $victim --notice 10s    # as EC2 would, from another terminal"
$spotdnn local revoke "$victim" --notice 10s > /dev/null &
status=0
wait "$run" || status=$?
wait || true
echo
echo "\$ spotdnn status $job"
$spotdnn status "$job"
exit "$status"

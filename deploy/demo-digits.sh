#!/usr/bin/env bash
# The real job: PyTorch on scikit-learn's handwritten digits (deploy/examples/digits), on this
# machine's CPUs. Installs what the build and the example need, builds, starts the four services
# (and the local metadata emulator) with `spotdnn up`, and runs deploy/examples/digits/job.json:
# three short profiling runs, a plan for loss 0.1, the run. Once the job trains, one worker gets a
# spot notice, then the parameter server (its replacement restores the checkpoint). Ends with
# `spotdnn status` and the loss curves in $SPOTDNN_HOME/digits-loss.svg. REVOKE=0 skips the
# revocations. State goes to $SPOTDNN_HOME (default: a fresh folder under /tmp).
set -euo pipefail
cd "$(dirname "$0")/.."
bash deploy/setup.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo
cmake --build build -j "${JOBS:-$(nproc)}" --target spotdnn spotdnn-predictor spotdnn-provisioner \
  spotdnn-profiler spotdnn-detector spotdnn-metadata-emulator spotdnn-agent
export SPOTDNN_HOME="${SPOTDNN_HOME:-$(mktemp -d /tmp/spotdnn-digits.XXXXXX)}"
spotdnn=./build/spotdnn
$spotdnn up
trap '$spotdnn down' EXIT

job="digits-$(date +%s)"
sed "s/\"name\": \"digits\"/\"name\": \"$job\"/" deploy/examples/digits/job.json \
  > "$SPOTDNN_HOME/job.json"
echo
echo "\$ spotdnn run $SPOTDNN_HOME/job.json"
$spotdnn run "$SPOTDNN_HOME/job.json" &
run=$!

# The instance of ROLE (worker or ps) with the lowest index, once the job has launched it.
first() {
  $spotdnn local list --job "$job" 2>/dev/null |
    awk -v role="$1" '$3 == role && $6 == "running" { print $4, $1 }' | sort -n | head -1 |
    cut -d' ' -f2
}
if [ "${REVOKE:-1}" != 0 ]; then
  # Wait for the job's own workers (after profiling), let them train a little, then revoke.
  victim=""
  while kill -0 "$run" 2>/dev/null && [ -z "$victim" ]; do victim=$(first worker); sleep 0.5; done
  if [ -n "$victim" ]; then
    sleep 8
    echo "\$ spotdnn local revoke $victim --notice 3s    # a worker's spot notice"
    $spotdnn local revoke "$victim" --notice 3s > /dev/null || true
    sleep 10
    server=$(first ps)
    if [ -n "$server" ]; then
      echo "\$ spotdnn local revoke $server --notice 3s    # the parameter server's"
      $spotdnn local revoke "$server" --notice 3s > /dev/null || true
    fi
  fi
fi
status=0
wait "$run" || status=$?
echo
echo "\$ spotdnn status $job --plot $SPOTDNN_HOME/digits-loss.svg"
$spotdnn status "$job" --plot "$SPOTDNN_HOME/digits-loss.svg"
exit "$status"

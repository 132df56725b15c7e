#!/usr/bin/env bash
# The manual's newcomer walk-through, run as written: the ```sh block after the line
# "<!-- newcomer walk-through: tests/walkthrough/newcomer.sh -->" in docs/profiling.md (own
# profile from a log -> fit -> predict by name -> plan by name -> run by name, all under one
# --data-dir), each command in order, in a fresh folder where build/ is the build tree and deploy/
# the source's.
# Fails on the first command that fails, and checks what each step must have left behind.
#
#   tests/walkthrough/newcomer.sh SOURCE_DIR BINARY_DIR
set -euo pipefail
src=$(cd "$1" && pwd)
bin=$(cd "$2" && pwd)
work=$(mktemp -d /tmp/spotdnn-walkthrough.XXXXXX)
ln -s "$bin" "$work/build"
ln -s "$src/deploy" "$work/deploy"
# Nothing may fall back to the user's own ~/.spotdnn: HOME and SPOTDNN_HOME point elsewhere.
export HOME="$work/home" SPOTDNN_HOME="$work/elsewhere"
mkdir -p "$HOME"

script="$work/walkthrough.sh"
page="$src/docs/profiling.md"
awk '/<!-- newcomer walk-through: tests\/walkthrough\/newcomer.sh -->/ { found = 1; next }
     found == 1 && /^```sh$/ { found = 2; next }
     found == 2 && /^```$/ { exit }
     found == 2 { print }' "$page" > "$script"
if [ ! -s "$script" ]; then
  echo "FAIL: no walk-through block in $page" >&2
  exit 1
fi
echo "--- the commands of $page:"
cat "$script"

cleanup() {
  # Whatever happened, no stack is left running.
  "$bin/spotdnn" down --data-dir "$work/spotdnn-mine" > /dev/null 2>&1 || true
}
trap cleanup EXIT

cd "$work"
echo "--- running them"
# -x: each command as it runs; -e: the first failure stops the walk-through.
bash -eux "$script" 2>&1 | tee "$work/output.txt"
status=${PIPESTATUS[0]}
if [ "$status" -ne 0 ]; then
  echo "FAIL: a command of $page exited $status" >&2
  exit 1
fi

fail() {
  echo "FAIL: $*" >&2
  exit 1
}
D="$work/spotdnn-mine"
[ -f "$D/profiles.db" ] || fail "the profile was not stored in the data directory ($D/profiles.db)"
[ -f "$D/jobs.db" ] || fail "the job was not recorded in the data directory ($D/jobs.db)"
[ ! -e "$HOME/.spotdnn" ] || fail "something wrote to ~/.spotdnn instead of --data-dir"
[ ! -e "$SPOTDNN_HOME" ] || fail "something wrote to \$SPOTDNN_HOME instead of --data-dir"
grep -q "Fitted profile resnet110-mine version 1" "$work/output.txt" || fail "no fit"
grep -q "Prediction: resnet110-mine (stored profile, version 1)" "$work/output.txt" ||
  fail "predict did not use the stored profile"
grep -q "Plan: resnet110-mine (stored profile, version 1)" "$work/output.txt" ||
  fail "plan did not use the stored profile"
grep -q "Job resnet110-mine-job finished" "$work/output.txt" || fail "the job did not finish"
# `detector list --data-dir` found the stack's detector (a random port) and the job's instances
# were unregistered at its end.
grep -q "The detector at 127.0.0.1:[0-9]* watches no instances" "$work/output.txt" ||
  fail "detector list did not ask the stack's detector"
status_json=$("$bin/spotdnn" status resnet110-mine-job --data-dir "$D" --json)
grep -q '"state":"finished"' <<< "$status_json" || fail "status does not say the job finished"
# The job has a budget and no deadline: null, as `plan --json` says an absent one.
grep -q '"deadline_s":null' <<< "$status_json" || fail "status --json: deadline_s is not null"
grep -q '"budget_usd":1[,}]' <<< "$status_json" || fail "status --json: budget_usd is not 1"
# The job's workers report no loss (spotdnn-sim-worker): nothing claims one, and --plot draws its
# progress and cost, says the loss is missing, and still prints the status.
grep -q '"final_loss":null' <<< "$status_json" || fail "status --json claims a loss nobody measured"
[ -s "$work/job.svg" ] || fail "status --plot wrote no chart for a job without losses"
grep -q "no loss" "$work/job.svg" || fail "the chart does not say the loss is missing"
grep -q 'class="iterations"' "$work/job.svg" || fail "the chart does not draw the progress"
[ "$(grep -c "Job resnet110-mine-job: finished" "$work/output.txt")" -ge 2 ] ||
  fail "status --plot did not print the status"

# A gateway killed with kill -9 mid-job: status says no gateway drives the job, and how to resume.
"$bin/spotdnn" up --data-dir "$D" > /dev/null
sed 's/"resnet110-mine-job"/"walk-killed"/' "$src/deploy/examples/job-mine.json" > "$work/killed.json"
"$bin/spotdnn" run "$work/killed.json" --data-dir "$D" > "$work/killed.log" 2>&1 &
gateway=$!
for _ in $(seq 1 300); do
  "$bin/spotdnn" status walk-killed --data-dir "$D" --json 2>/dev/null |
    grep -q '"state":"running"' && break
  sleep 0.2
done
kill -9 "$gateway"
wait "$gateway" || true
orphan=$("$bin/spotdnn" status walk-killed --data-dir "$D")
echo "$orphan" | head -3
grep -q "No gateway is driving it" <<< "$orphan" || fail "status of a job whose gateway died"
grep -q "spotdnn run --resume walk-killed" <<< "$orphan" || fail "status does not say how to resume"
"$bin/spotdnn" run --resume walk-killed --data-dir "$D" > /dev/null  # finishes it: nothing left
"$bin/spotdnn" down --data-dir "$D" > /dev/null

# The service binaries take their flags as the CLI does: bad input is exit 2 with one
# line naming it (and the nearest flag for a typo), --help is 0 and grouped by purpose, a store in
# a missing folder creates nothing.
expect_status() {  # STATUS COMMAND...: runs it, checks its exit status; its output in $out
  local want=$1
  shift
  set +e
  out=$("$@" 2>&1)
  local got=$?
  set -e
  [ "$got" -eq "$want" ] || fail "$* exited $got, not $want: $out"
}
expect_status 2 "$bin/spotdnn-predictor" extra-arg
grep -q 'unexpected argument "extra-arg"' <<< "$out" || fail "predictor: no word on a stray argument"
expect_status 2 "$bin/spotdnn-predictor" --lisen=127.0.0.1:0
grep -q -- "--lisen: unknown flag; did you mean --listen?" <<< "$out" || fail "no hint: $out"
expect_status 2 "$bin/spotdnn-detector" --poll_interval=1
grep -q "like 500ms, 2s" <<< "$out" || fail "the detector does not say a duration needs a unit"
expect_status 0 "$bin/spotdnn-profiler" --help
grep -q "^Store:" <<< "$out" || fail "the profiler's --help has no Store group"
if grep -q -e "$src" -e "Flags from" <<< "$out"; then fail "--help names source paths"; fi
expect_status 2 "$bin/spotdnn-profiler" --db="$work/nonexistent/dir/p.db" --listen=127.0.0.1:0
[ ! -e "$work/nonexistent" ] || fail "the profiler created the missing folder of --db"
expect_status 2 "$bin/spotdnn" plan --worklaod resnet110
grep -q -- "did you mean --workload?" <<< "$out" || fail "the CLI gives no hint for a typo"
[ "$(wc -l <<< "$out")" -le 2 ] || fail "a typo is followed by a page of usage: $out"
# A second `up` starts nothing, and says so.
"$bin/spotdnn" up --data-dir "$D" > /dev/null
expect_status 0 "$bin/spotdnn" up --data-dir "$D"
grep -q "Already up" <<< "$out" || fail "a second up does not say the stack was already up: $out"
if grep -q "Starting" <<< "$out"; then fail "a second up says it starts the stack: $out"; fi
"$bin/spotdnn" down --data-dir "$D" > /dev/null

rm -rf "$work"
echo "PASS: the newcomer walk-through of $page"

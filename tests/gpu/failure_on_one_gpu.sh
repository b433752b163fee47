#!/usr/bin/env bash
# What one GPU can verify of stage 06's failure handling (common/dist/watchdog.h): the trainer
# runs with its watchdog on at world size 1, alone and under gpt_launch; a process made to fail
# (GPT_TEST_FAIL) prints its error, aborts its NCCL communicator and exits 1; a process made to
# hang is ended by --step-timeout, with the abort run from the watchdog's thread. Both at step 5,
# once the step's CUDA Graph has been captured and replayed. (At world size 1, NCCL queues
# nothing for a sum over one rank, so the graph holds no NCCL operation: an abort that waits for
# such graphs needs two GPUs to be seen.) Skips without a GPU (fails with REQUIRE_GPU=1, as in
# the GPU check).
#   failure_on_one_gpu.sh TRAIN GPT_LAUNCH DATA_DIR OUT_DIR
set -uo pipefail
train=$1 launch=$2 data=$3 out=$4
# Independent of the shell it runs in (a launcher's variables, NCCL_DEBUG on stderr, where one
# line is checked below): tests/gpu/clean_environment.sh.
source "$(dirname "${BASH_SOURCE[0]}")/clean_environment.sh"
rm -rf "$out" && mkdir -p "$out"
args=(--data "$data" --model micro --batch 4 --seq 64 --sample-every 0 --val-every 0)

fail() { echo "FAIL: $*"; for f in "$out"/*; do echo "--- $f"; tail -n 20 "$f"; done; exit 1; }

# run NAME LIMIT CMD...: runs CMD with its output in $out/NAME.out and .err, stopping it after
# LIMIT seconds; sets code and took.
run() {
  local name=$1 limit=$2
  shift 2
  local t0=$SECONDS
  timeout -s KILL "$limit" "$@" > "$out/$name.out" 2> "$out/$name.err"
  code=$?
  took=$((SECONDS - t0))
  ((code != 137)) || fail "$name: still running after $limit s"
}

run clean 300 "$train" "${args[@]}" --steps 3
if grep -q "no CUDA device found" "$out/clean.err"; then
  [[ ${REQUIRE_GPU:-0} == 1 ]] && fail "REQUIRE_GPU=1, but the trainer finds no GPU"
  echo "[  SKIPPED ] no GPU: $(cat "$out/clean.err")"
  exit 0
fi
((code == 0)) || fail "world size 1: exit $code"
grep -qE '^parallel   one process \(NCCL [0-9.]+, GPU 0, step limit 600 s\)' "$out/clean.out" \
  || fail "world size 1: the banner does not show the watchdog: $(grep '^parallel' "$out/clean.out")"
echo "ok: world size 1 with the watchdog on: $(grep '^parallel' "$out/clean.out")"

run launched 300 "$launch" --nproc 1 -- "$train" "${args[@]}" --steps 3
((code == 0)) || fail "under gpt_launch --nproc 1: exit $code"
echo "ok: under gpt_launch --nproc 1 (torchrun's variables): exit 0 in $took s"

run failed 120 env GPT_TEST_FAIL=0:5 "$train" "${args[@]}" --steps 50
((code == 1)) || fail "forced failure: exit $code, expected 1"
grep -q '^error: rank 0 of 1: step 5 failed on purpose (GPT_TEST_FAIL)' "$out/failed.err" || fail "forced failure: no line"
(($(grep -c . "$out/failed.err") == 1)) || fail "forced failure: more than one line on stderr"
echo "ok: a forced failure at step 5 ends the process in $took s with exit 1 and one line"

run hang 120 env GPT_TEST_FAIL=0:5:hang "$train" "${args[@]}" --steps 50 --step-timeout 20
((code == 1)) || fail "hang: exit $code, expected 1"
grep -q '^error: rank 0 of 1: step 5 has not finished within 20 s (--step-timeout 20)' "$out/hang.err" \
  || fail "hang: no line naming the time limit"
echo "ok: a process hanging in step 5 is ended by --step-timeout 20 in $took s, exit 1"

#!/usr/bin/env bash
# gpt_launch starts N processes with torchrun's environment, stops the others when one fails,
# passes SIGINT/SIGTERM on, and refuses bad options with one line. The processes are shells
# that print their environment or sleep, so no trainer or GPU is needed.
#   launch_test.sh GPT_LAUNCH
set -euo pipefail
launch=$1
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT

fail() { echo "FAIL: $*"; exit 1; }
run() {  # run ARGS...: sets $code, $out, $err (the launcher's exit status, stdout, stderr)
  code=0
  "$launch" "$@" > "$scratch/out" 2> "$scratch/err" || code=$?
  out=$(< "$scratch/out") err=$(< "$scratch/err")
}
all_gone() {  # all_gone PIDFILE: every pid in it has ended (a zombie has: init reaps it later)
  local pid state
  while read -r pid; do
    state=$(ps -o stat= -p "$pid" || true)
    if [[ -n $state && $state != Z* ]]; then fail "process $pid still runs after the launcher ended"; fi
  done < "$1"
}
wait_for_lines() {  # wait_for_lines FILE N: until FILE has N lines (each child writes one)
  for _ in $(seq 100); do
    [[ -f $1 && $(wc -l < "$1") -ge $2 ]] && return
    sleep 0.1
  done
  fail "the processes did not start"
}
show='echo rank=$RANK world=$WORLD_SIZE local=$LOCAL_RANK lws=$LOCAL_WORLD_SIZE addr=$MASTER_ADDR port=$MASTER_PORT'

# --- the environment -------------------------------------------------------------------------
run --nproc 3 -- sh -c "$show"
[[ $code == 0 ]] || fail "3 ranks: exit $code: $err"
[[ $(sort <<< "$out" | sed 's/ port=.*//') == "rank=0 world=3 local=0 lws=3 addr=127.0.0.1
rank=1 world=3 local=1 lws=3 addr=127.0.0.1
rank=2 world=3 local=2 lws=3 addr=127.0.0.1" ]] || fail "3 ranks: got: $out"
ports=$(sed 's/.* port=//' <<< "$out" | sort -u)
[[ $ports =~ ^[0-9]+$ && $ports -gt 0 ]] || fail "3 ranks: not one port: $ports"
echo "ok: 3 ranks, world 3, one free port ($ports)"

run --nproc 2 --nnodes 2 --node-rank 1 --master-addr 10.1.2.3 --port 29555 -- sh -c "$show"
[[ $code == 0 && $(sort <<< "$out") == "rank=2 world=4 local=0 lws=2 addr=10.1.2.3 port=29555
rank=3 world=4 local=1 lws=2 addr=10.1.2.3 port=29555" ]] || fail "node 1 of 2: exit $code: $out $err"
echo "ok: node 1 of 2: ranks 2 and 3 of 4, the given address and port"

# --- one rank fails: the others are stopped --------------------------------------------------
start=$SECONDS
# Each shell records its pid and its sleep's (a grandchild of the launcher), then waits.
run --nproc 3 -- sh -c "echo \$\$ >> $scratch/pids1; if [ \$RANK = 1 ]; then exit 3; fi
                        sleep 30 & echo \$! >> $scratch/pids1; wait"
took=$((SECONDS - start))
[[ $code == 3 ]] || fail "failing rank: exit $code, expected 3: $err"
(( took < 10 )) || fail "failing rank: the launcher took $took s"
[[ $err == "gpt_launch: rank 1 exited with status 3; stopped the other 2 processes" ]] \
  || fail "failing rank: stderr: $err"
sleep 0.5  # the sleeps get SIGTERM with their shell's process group, and may take a moment
all_gone "$scratch/pids1"
echo "ok: rank 1 exits 3: the launcher exits 3 in $took s, the shells and their sleeps stopped"

# A rank that ignores SIGTERM is killed after the grace period.
start=$SECONDS
# Rank 0 fails once rank 1 has written its pid, after setting SIGTERM aside (exec keeps that).
run --nproc 2 -- sh -c "if [ \$RANK = 0 ]; then while [ ! -s $scratch/pids2 ]; do sleep 0.1; done; exit 4; fi
                        trap '' TERM; echo \$\$ > $scratch/pids2; exec sleep 60"
took=$((SECONDS - start))
[[ $code == 4 ]] || fail "SIGTERM ignored: exit $code, expected 4: $err"
(( took >= 9 && took < 30 )) || fail "SIGTERM ignored: took $took s (the grace period is 10 s)"
all_gone "$scratch/pids2"
echo "ok: a rank that ignores SIGTERM is killed after $took s"

# A rank killed by a signal: 128 + the signal.
run --nproc 2 -- sh -c 'if [ $RANK = 1 ]; then kill -9 $$; fi; sleep 30'
[[ $code == 137 && $err == "gpt_launch: rank 1 was killed by signal 9 (Killed); stopped the other process" ]] \
  || fail "killed rank: exit $code: $err"
echo "ok: rank 1 killed by SIGKILL: exit 137"

# --- SIGINT and SIGTERM to the launcher reach every process -----------------------------------
for sig in INT TERM; do
  rm -f "$scratch/pids3"
  "$launch" --nproc 2 -- sh -c "echo \$\$ >> $scratch/pids3; sleep 30" 2> "$scratch/err" &
  pid=$!
  wait_for_lines "$scratch/pids3" 2
  start=$SECONDS
  kill -s "$sig" "$pid"
  code=0
  wait "$pid" || code=$?
  expected=$([[ $sig == INT ]] && echo 130 || echo 143)
  [[ $code == "$expected" ]] || fail "SIG$sig: exit $code, expected $expected: $(< "$scratch/err")"
  (( SECONDS - start < 5 )) || fail "SIG$sig: the launcher took $((SECONDS - start)) s"
  [[ $(< "$scratch/err") == "gpt_launch: stopped by SIG$sig, passed on to every process" ]] \
    || fail "SIG$sig: stderr: $(< "$scratch/err")"
  all_gone "$scratch/pids3"
  echo "ok: SIG$sig to the launcher stops both processes, exit $code"
done

# --- errors: one line, non-zero ---------------------------------------------------------------
expect_error() {  # expect_error CODE MESSAGE ARGS...
  local want_code=$1 want=$2
  shift 2
  run "$@"
  [[ $code == "$want_code" ]] || fail "$*: exit $code, expected $want_code: $err"
  [[ $err == "$want" ]] || fail "$*: expected the one line '$want', got: $err"
  echo "ok: $* -> $err"
}
expect_error 127 "gpt_launch: cannot run ./no-such-trainer: No such file or directory" \
  --nproc 2 -- ./no-such-trainer --steps 1
expect_error 1 "error: option --nproc: 0 is too small (at least 1)" --nproc 0 -- true
expect_error 1 "error: option --nproc: 1025 is too large (at most 1024)" --nproc 1025 -- true
expect_error 1 "error: option --nproc N is required (see --help)" -- true
expect_error 1 "error: no command after --" --nproc 2 --
expect_error 1 "error: no command: give it after --, as in gpt_launch --nproc 2 -- build/stage06/stages/train_06_multi_gpu_mfu" --nproc 2
expect_error 1 "error: unexpected argument './train': the command goes after -- (see --help)" --nproc 2 ./train
expect_error 1 "error: option --node-rank: 2 is not below --nnodes 2" \
  --nproc 2 --nnodes 2 --node-rank 2 --master-addr 10.0.0.1 --port 29500 -- true
expect_error 1 "error: --nnodes 2 needs --master-addr and --port, the same on every machine" \
  --nproc 2 --nnodes 2 -- true

run --help
[[ $code == 0 && $out == *"gpt_launch --nproc 8 -- build/stage06/stages/train_06_multi_gpu_mfu"* ]] || fail "--help: $out"
echo "ok: --help"

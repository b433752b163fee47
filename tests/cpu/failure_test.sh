#!/usr/bin/env bash
# When one process of a run fails, every process ends within seconds, non-zero, with a line that
# names the one that failed (common/dist/watchdog.h). The CPU trainer as 3 processes, started as
# torchrun or srun would start them (one environment each, no launcher watching), made to fail
# with the trainer's fault switch (GPT_TEST_FAIL), killed, or made to hang; then under gpt_launch;
# then under mpirun (where the build has MPI) and torchrun's own agent (where PyTorch is); then
# torchrun's environment with its store already on MASTER_PORT.
#   failure_test.sh TRAIN GPT_LAUNCH DATA_DIR OUT_DIR [MPIRUN]
set -euo pipefail
train=$1 launch=$2 data=$3 out=$4 mpirun=${5:-}
rm -rf "$out"
mkdir -p "$out"
args=(--data "$data" --model micro --batch 2 --seq 16 --sample-every 0 --val-every 0 --threads 1)
limit=30  # seconds every process gets to end after the failure

pids=() store=""
# Whatever happens, no trainer outlives the test.
trap 'kill -9 "${pids[@]}" $store 2> /dev/null || true' EXIT
fail() { echo "FAIL: $*"; for f in "$out"/*.err; do echo "--- $f"; cat "$f"; done; exit 1; }
free_port() { /usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# start NAME WORLD [ENV=VALUE...] -- ARGS...: WORLD processes with torchrun's variables (but no
# TORCHELASTIC_*), rank r's output in $out/NAME.r.out and .err, their pids in pids[].
start() {
  local name=$1 world=$2
  shift 2
  local envs=()
  while [[ $1 != -- ]]; do envs+=("$1"); shift; done
  shift
  local port
  port=$(free_port)
  pids=()
  for ((r = 0; r < world; r++)); do
    env "${envs[@]}" MASTER_ADDR=127.0.0.1 MASTER_PORT="$port" WORLD_SIZE="$world" RANK=$r LOCAL_RANK=$r \
      "$train" "${args[@]}" --steps 500 "$@" > "$out/$name.$r.out" 2> "$out/$name.$r.err" &
    pids+=($!)
  done
}

# finish NAME SINCE: waits until every process has ended, at most $limit s after SINCE (seconds
# since the epoch, with decimals); sets codes[] and took (seconds from SINCE to the last end).
finish() {
  local name=$1 since=$2
  codes=()
  for pid in "${pids[@]}"; do
    while kill -0 "$pid" 2> /dev/null; do
      if (($(date +%s) > ${since%.*} + limit)); then
        kill -9 "${pids[@]}" 2> /dev/null || true
        fail "$name: a process still runs $limit s after the failure"
      fi
      sleep 0.05
    done
  done
  took=$(/usr/bin/python3 -c "import time; print(f'{time.time() - $since:.1f}')")
  for pid in "${pids[@]}"; do
    local code=0
    wait "$pid" 2> /dev/null || code=$?
    codes+=("$code")
  done
}

now() { date +%s.%N; }

# expect_lines NAME PATTERN...: process r's stderr matches PATTERN r.
expect_lines() {
  local name=$1
  shift
  local r=0
  for pattern in "$@"; do
    grep -qE "$pattern" "$out/$name.$r.err" || fail "$name: rank $r's stderr does not match '$pattern'"
    ((r++)) || true
  done
}

all_nonzero() {
  for ((r = 0; r < ${#codes[@]}; r++)); do
    ((codes[r] != 0)) || fail "$1: rank $r exited 0"
  done
}

# --- a process fails: every one ends, naming it ------------------------------------------------
# fault NAME RANK STEP: 3 processes, rank RANK made to fail as its step STEP starts.
fault() {
  local name=$1 failing=$2 at=$3 t0 patterns=() r
  t0=$(now)
  start "$name" 3 GPT_TEST_FAIL="$failing:$at" --
  finish "$name" "$t0"
  all_nonzero "$name"
  for r in 0 1 2; do
    if ((r == failing)); then
      patterns+=("^error: rank $r of 3: step $at failed on purpose \(GPT_TEST_FAIL\)")
    else
      patterns+=("^error: rank $r of 3: stopping, because rank $failing failed: step $at failed on purpose")
    fi
  done
  expect_lines "$name" "${patterns[@]}"
  echo "ok: rank $failing fails at step $at: all 3 processes ended in ${took} s, exit codes ${codes[*]}," \
    "each naming rank $failing"
}
fault fault 1 3
fault fault0 0 2  # rank 0, which passes the news on, is the one that fails

# --- a process is killed: the others notice at once ---------------------------------------------
start killed 3 --
for _ in $(seq 600); do
  grep -q '^step     3/' "$out/killed.0.out" 2> /dev/null && break
  sleep 0.05
done
grep -q '^step     3/' "$out/killed.0.out" || fail "killed: the run did not reach step 3"
t0=$(now)
kill -9 "${pids[2]}"
# They notice at once: both print their line within 2 s.
for _ in $(seq 40); do
  [[ -s $out/killed.0.err && -s $out/killed.1.err ]] && break
  sleep 0.05
done
noticed=$(/usr/bin/python3 -c "import time; print(f'{time.time() - $t0:.1f}')")
[[ -s $out/killed.0.err && -s $out/killed.1.err ]] || fail "killed: the others said nothing within 2 s"
finish killed "$t0"
all_nonzero killed
expect_lines killed '^error: rank 0 of 3: stopping, because rank 2 failed: the process ended without a word' \
                    '^error: rank 1 of 3: stopping, because rank 2 failed: the process ended without a word'
echo "ok: rank 2 killed with SIGKILL: the others noticed within ${noticed} s, naming rank 2, and ended ${took} s after"

# --- a process hangs: the step's time limit ends every process -------------------------------------
# 8 s, not less: under AddressSanitizer, with other tests beside it on two cores, a step that does
# not hang took more than 2 s (rank 2's step 1), and the run stopped there instead of at step 3.
t0=$(now)
start hang 3 GPT_TEST_FAIL=1:3:hang -- --step-timeout 8
finish hang "$t0"
all_nonzero hang
for r in 0 1 2; do
  grep -qE '^error: rank '$r' of 3: .*step 3 has not finished within 8 s \(--step-timeout 8\)' "$out/hang.$r.err" \
    || fail "hang: rank $r's stderr does not name the time limit"
done
echo "ok: rank 1 hangs in step 3: with --step-timeout 8, all ended in ${took} s, exit codes ${codes[*]}"

# --- under gpt_launch: the launcher exits with the failing rank's status ---------------------------
t0=$(now)
code=0
GPT_TEST_FAIL=1:3 "$launch" --nproc 3 -- "$train" "${args[@]}" --steps 500 > "$out/launch.out" 2> "$out/launch.err" || code=$?
took=$(/usr/bin/python3 -c "import time; print(f'{time.time() - $t0:.1f}')")
((code == 1)) || fail "gpt_launch: exit $code, expected 1: $(cat "$out/launch.err")"
for r in 0 2; do
  grep -q "^error: rank $r of 3: stopping, because rank 1 failed" "$out/launch.err" || fail "gpt_launch: no line from rank $r"
done
grep -q '^error: rank 1 of 3: step 3 failed on purpose' "$out/launch.err" || fail "gpt_launch: no line from rank 1"
# The others end on their own within the 5 s gpt_launch gives them, each with its line.
grep -q "^gpt_launch: rank 1 exited with status 1; 2 others stopped because of it$" "$out/launch.err" \
  || fail "gpt_launch: $(cat "$out/launch.err")"
echo "ok: under gpt_launch, rank 1 fails: the launcher exits 1 in ${took} s and names rank 1"

# A clean run ends cleanly: no process takes another's end for a failure.
code=0
"$launch" --nproc 3 -- "$train" "${args[@]}" --steps 4 > "$out/clean.out" 2> "$out/clean.err" || code=$?
((code == 0)) || fail "clean run: exit $code: $(cat "$out/clean.err")"
[[ ! -s $out/clean.err ]] || fail "clean run: stderr: $(cat "$out/clean.err")"
echo "ok: a clean run of 3 processes ends with 0 and nothing on stderr"

# --- mpirun and torchrun's agent: they name the first process to exit non-zero, the failing one ---
if [[ -n $mpirun ]]; then
  code=0
  t0=$(now)
  GPT_TEST_FAIL=2:2 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
    timeout -k 5 60 "$mpirun" -np 3 --oversubscribe -x GPT_TEST_FAIL "$train" "${args[@]}" --steps 500 \
    > "$out/mpirun.out" 2> "$out/mpirun.err" || code=$?
  took=$(/usr/bin/python3 -c "import time; print(f'{time.time() - $t0:.1f}')")
  ((code == 1)) || fail "mpirun: exit $code, expected 1 (the failing rank's): $(cat "$out/mpirun.err")"
  grep -q '^error: rank 2 of 3: step 2 failed on purpose' "$out/mpirun.err" || fail "mpirun: no line from rank 2"
  echo "ok: under mpirun, rank 2 fails: mpirun exits 1 (rank 2's status) in ${took} s"
else
  echo "skipped: mpirun (this build has no MPI)"
fi
if /usr/bin/python3 -c 'import torch.distributed.launcher' 2> /dev/null; then
  # What `torchrun --standalone --nproc-per-node 2 --no-python TRAIN ...` runs: torch's elastic
  # agent, which sets the workers' environment itself (Debian's torchrun command line is broken
  # on its Python; the agent is not).
  cat > "$out/torchrun_agent.py" << 'PY'
import sys
from torch.distributed.launcher.api import LaunchConfig, elastic_launch
from torch.distributed.elastic.multiprocessing import Std
config = LaunchConfig(min_nodes=1, max_nodes=1, nproc_per_node=int(sys.argv[1]), run_id="gpt", rdzv_backend="c10d",
                      rdzv_endpoint="localhost:0", max_restarts=0, monitor_interval=0.1,
                      redirects=Std.NONE, tee=Std.NONE)
elastic_launch(config, sys.argv[2])(*sys.argv[3:])
PY
  # The agent makes a torchelastic_* folder in the temporary directory and leaves it there: a
  # private one, removed after it.
  agent_tmp=$out/agent_tmp
  mkdir -p "$agent_tmp"
  code=0
  TMPDIR=$agent_tmp timeout -k 5 120 /usr/bin/python3 "$out/torchrun_agent.py" 2 "$train" "${args[@]}" --steps 3 \
    > "$out/agent.out" 2> "$out/agent.err" \
    || code=$?
  rm -rf "$agent_tmp"
  ((code == 0)) || fail "torchrun's agent: exit $code: $(tail -n 5 "$out/agent.err")"
  # (PyTorch 1.13's agent keeps no store on MASTER_PORT, TORCHELASTIC_USE_AGENT_STORE=False: the
  # processes meet on MASTER_PORT itself; PyTorch 2's does, the case below.)
  grep -qE "^parallel   2 processes over TCP on 1 host, met at [^ ]+:[0-9]+" "$out/agent.out" \
    || fail "torchrun's agent: $(grep '^parallel' "$out/agent.out")"
  echo "ok: under torchrun's own agent: $(grep '^parallel' "$out/agent.out")"
else
  echo "skipped: torchrun's agent (no PyTorch for /usr/bin/python3)"
fi

# --- torchrun: its store listens on MASTER_PORT, the trainers meet beside it ----------------------
port=$(free_port)
/usr/bin/python3 -c "
import socket, time
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(('0.0.0.0', $port)); s.listen(8); print('listening', flush=True); time.sleep(120)" > "$out/store.out" &
store=$!
for _ in $(seq 100); do [[ -s $out/store.out ]] && break; sleep 0.05; done
pids=()
for r in 0 1; do
  env LOCAL_RANK=$r RANK=$r GROUP_RANK=0 ROLE_RANK=$r ROLE_NAME=default LOCAL_WORLD_SIZE=2 WORLD_SIZE=2 \
    GROUP_WORLD_SIZE=1 ROLE_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port TORCHELASTIC_RESTART_COUNT=0 \
    TORCHELASTIC_MAX_RESTARTS=0 TORCHELASTIC_RUN_ID=none TORCHELASTIC_USE_AGENT_STORE=True \
    TORCH_NCCL_ASYNC_ERROR_HANDLING=1 TORCHELASTIC_ERROR_FILE="$out/error.json" OMP_NUM_THREADS=1 \
    "$train" "${args[@]}" --steps 2 > "$out/torchrun.$r.out" 2> "$out/torchrun.$r.err" &
  pids+=($!)
done
finish torchrun "$(now)"
[[ ${codes[*]} == "0 0" ]] || fail "torchrun: exit codes ${codes[*]}"
grep -q "met at 127.0.0.1:$((port + 1)) (MASTER_PORT + 1, beside torchrun's store)" "$out/torchrun.0.out" \
  || fail "torchrun: the banner does not say where they met: $(grep parallel "$out/torchrun.0.out")"
echo "ok: torchrun's environment with its store on MASTER_PORT $port: the processes met at $((port + 1))"

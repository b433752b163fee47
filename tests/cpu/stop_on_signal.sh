#!/usr/bin/env bash
# Ctrl-C (SIGINT) or SIGTERM from outside, during a run: the step under way finishes and is
# saved, the run says how to go on and ends as the signal would (128 + its number), and
# `--resume CKPT` continues it. Without --save it says that nothing was kept.
#   stop_on_signal.sh TRAIN DATA OUT
set -euo pipefail
train=$1 data=$2 out=$3
rm -rf "$out"
mkdir -p "$out"
cd "$out"
fail() { echo "FAIL: $*" >&2; exit 1; }

# Starts a long run with the given options, waits for its third step, sends SIG; sets rc.
stop_run() {
  local sig=$1 name=$2
  shift 2
  "$train" --model micro --data "$data" --batch 2 --seq 16 --steps 100000 --val-every 0 --sample-every 0 \
    --threads 1 "$@" > "$name.out" 2>&1 &
  local pid=$! i
  for i in $(seq 1200); do
    grep -q "^step     3/" "$name.out" && break
    kill -0 "$pid" 2> /dev/null || break
    sleep 0.1
  done
  grep -q "^step     3/" "$name.out" || { cat "$name.out" >&2; fail "$name: the run did not reach step 3"; }
  kill "-$sig" "$pid"
  set +e
  wait "$pid"
  rc=$?
  set -e
  local expected=$(( 128 + $(kill -l "$sig") ))
  [[ $rc == "$expected" ]] || { cat "$name.out" >&2; fail "$name: ended with $rc, expected $expected"; }
}

for sig in INT TERM; do
  stop_run "$sig" "$sig" --save "$sig.ckpt" --log "$sig.jsonl"
  line=$(grep "^stopped " "$sig.out") || { cat "$sig.out" >&2; fail "$sig: no 'stopped' line"; }
  [[ $line =~ ^stopped\ +after\ step\ ([0-9]+)\ of\ 100000\ \(SIG$sig\)\;\ continue\ with:\ .*\ --resume\ $sig.ckpt$ ]] ||
    fail "$sig: unexpected line: $line"
  step=${BASH_REMATCH[1]}
  grep -q "^saved      $sig.ckpt (step $step)$" "$sig.out" || { cat "$sig.out" >&2; fail "$sig: step $step not saved"; }
  # --resume alone (with a stop of its own) continues from there, into the same log.
  "$train" --resume "$sig.ckpt" --stop-after $(( step + 2 )) --threads 1 > "$sig.resumed.out" 2>&1 ||
    { cat "$sig.resumed.out" >&2; fail "$sig: the resumed run failed"; }
  grep -q "^step $(printf '%5d' $(( step + 1 )))/100000 " "$sig.resumed.out" ||
    { cat "$sig.resumed.out" >&2; fail "$sig: the resumed run did not start at step $(( step + 1 ))"; }
  steps_logged=$(grep -c '"type": "step"' "$sig.jsonl")
  [[ $steps_logged == $(( step + 2 )) ]] || fail "$sig: the log holds $steps_logged steps, expected $(( step + 2 ))"
  echo "ok: SIG$sig after step $step saved it; --resume went on to step $(( step + 2 )) in the same log"
done

stop_run INT unsaved
grep -q "^stopped    after step [0-9]* of 100000 (SIGINT); nothing saved: with --save PATH a stopped run keeps its last step$" \
  unsaved.out || { cat unsaved.out >&2; fail "unsaved: no line saying that nothing was kept"; }
echo "ok: without --save the run says that nothing was kept"

#!/usr/bin/env bash
# Self-test of the GPU check's quick phase (tests/gpu_check.sh --phase quick), without a GPU: the
# time keeping that must hold in a 15-minute GPU window, with stand-ins for its parts
# (GPU_CHECK_STAND_INS) and a stand-in nvidia-smi that reports a GPU.
#   - a part that overruns its share (tests: it ignores SIGINT and has a child) is stopped with
#     its whole process group, and the child is gone;
#   - the parts after it run in the time left (kernels);
#   - a part still running at the deadline less the reserve (ladder) is stopped there;
#   - the summary and the archive are written, and the check ends, before the deadline;
#   - stopped from outside (SIGTERM to the script alone, as a machine's time limit may send it), it
#     stops the running part with its group, starts nothing more, and still writes the summary
#     and the archive;
#   - tests/gpu/ctest_plan.py report counts passed, failed and not run per stage from CTest's output,
#     and its plan refuses GPU tests that are not isolated (from a stand-in ctest).
# CTest: gpu_check_quick_selftest (label cpu).
set -uo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
tmp=$(mktemp -d)
trap 'pkill -KILL -f "$tmp/" 2>/dev/null; rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; [[ -f "$tmp/out.txt" ]] && sed 's/^/  | /' "$tmp/out.txt"; exit 1; }

mkdir -p "$tmp/bin" "$tmp/parts"
cat >"$tmp/bin/nvidia-smi" <<'EOF'
#!/usr/bin/env bash
echo "NVIDIA Stand-in GPU, 9.0"
EOF
part() {  # name body
    printf '#!/usr/bin/env bash\n%s\n' "$2" >"$tmp/parts/$1"
}
part build 'echo "stand-in build"'
part registers 'echo "least margin 3 (stand-in)"'
# Overruns its share, ignores SIGTERM, and leaves a child that ignores it too: only SIGKILL of the
# group ends them.
part tests "trap '' TERM INT; sleep 1000 & echo \$! > $tmp/child.pid; echo 'stand-in tests started'; wait"
part kernels 'echo "stand-in kernels ran"'
# Still running at the deadline less the reserve.
part ladder "echo \"stand-in ladder started\"; exec sleep 1000"
chmod +x "$tmp/bin/nvidia-smi" "$tmp/parts"/*

deadline=70
start=$SECONDS
PATH="$tmp/bin:$PATH" GPU_CHECK_STAND_INS="$tmp/parts" \
    bash "$repo/tests/gpu_check.sh" --phase quick --deadline "$deadline" --out "$tmp/out" \
    --archive "$tmp/check.tar.gz" >"$tmp/out.txt" 2>&1
rc=$?
took=$((SECONDS - start))
echo "the quick phase with stand-ins: exit $rc after $took s (deadline $deadline s)"

((rc == 1)) || fail "exit status $rc, expected 1 (two parts were stopped)"
((took < deadline)) || fail "took $took s, past the deadline of $deadline s"
summary="$tmp/out/summary.txt"
[[ -f "$summary" ]] || fail "no summary.txt"
grep -qE '^ +build +PASS .*stand-in build' "$summary" || fail "build did not pass"
grep -qE '^ +tests +FAIL .*stopped at its time limit' "$summary" || fail "tests were not stopped at their share"
grep -qE '^ +kernels +PASS .*stand-in kernels ran' "$summary" || fail "kernels did not run after the stopped part"
grep -qE '^ +ladder +FAIL .*stopped at its time limit' "$summary" || fail "the ladder was not stopped"
grep -q 'left out for a longer GPU window' "$summary" || fail "the summary does not say what was left out"
grep -qE '^quick +FAIL ' "$summary" || fail "no line for the phase"
child=$(cat "$tmp/child.pid" 2>/dev/null)
[[ -n "$child" ]] || fail "the stand-in tests never started their child"
! kill -0 "$child" 2>/dev/null || fail "the child of the stopped part (pid $child) outlived it"
# The tests part stopped at its share (65% of 40 s), with 5 s of grace for the group to go.
tests_took=$(sed -nE 's/^ +tests +FAIL +([0-9]+) s .*/\1/p' "$summary")
((tests_took >= 24 && tests_took <= 38)) || fail "the tests part took $tests_took s, expected about 26-31"
tar -tzf "$tmp/check.tar.gz" >"$tmp/archive.txt" || fail "the archive cannot be read"
grep -q 'summary.txt$' "$tmp/archive.txt" || fail "the archive has no summary.txt"
grep -q 'logs/tests.log$' "$tmp/archive.txt" || fail "the archive has no log of the stopped part"
echo "ok: the overrunning part was stopped with its child in $tests_took s, the next part ran, the last was"
echo "    stopped at the deadline less the reserve, and the summary and archive were written in $took s"

# Stopped from outside: SIGTERM to the script alone, 3 s in, while the tests part (which ignores
# SIGTERM) runs. A dead child may linger as a zombie where nothing reaps it: that counts as gone.
alive() { [[ -n "$1" ]] && kill -0 "$1" 2>/dev/null && [[ $(ps -o stat= -p "$1" 2>/dev/null) != Z* ]]; }
rm -f "$tmp/child.pid"
start=$SECONDS
PATH="$tmp/bin:$PATH" GPU_CHECK_STAND_INS="$tmp/parts" \
    bash "$repo/tests/gpu_check.sh" --phase quick --deadline "$deadline" --out "$tmp/stopped" \
    --archive "$tmp/stopped.tar.gz" >"$tmp/out.txt" 2>&1 &
check_pid=$!
sleep 3
kill -TERM "$check_pid"
wait "$check_pid"
rc=$?
took=$((SECONDS - start))
echo "the quick phase stopped by SIGTERM after 3 s: exit $rc after $took s"
((rc == 143)) || fail "exit status $rc, expected 143 (128 + SIGTERM)"
((took < 20)) || fail "took $took s after SIGTERM at 3 s; expected the part's grace (5 s) and little more"
summary="$tmp/stopped/summary.txt"
grep -qE '^ +tests +FAIL .*stopped by SIGTERM' "$summary" || fail "the running part was not reported stopped by SIGTERM"
grep -qE '^ +kernels +NOT-RUN .*stopped by SIGTERM before it' "$summary" || fail "a part started after SIGTERM"
grep -qE '^ +ladder +NOT-RUN ' "$summary" || fail "the ladder started after SIGTERM"
grep -q '^RESULT: STOPPED by SIGTERM' "$summary" || fail "no RESULT line saying the check was stopped"
! alive "$(cat "$tmp/child.pid" 2>/dev/null)" || fail "the child of the stopped part outlived the check"
tar -tzf "$tmp/stopped.tar.gz" >"$tmp/archive.txt" || fail "no archive after SIGTERM"
grep -q 'logs/tests.log$' "$tmp/archive.txt" || fail "the archive after SIGTERM has no log of the stopped part"
echo "ok: stopped by SIGTERM, it stopped the running part and its child, started nothing more, and wrote"
echo "    the summary and the archive in $took s"

# ctest_plan.py report: per stage, from CTest's result lines; a test without one was not run.
cat >"$tmp/plan.json" <<'EOF'
{"build": "x", "stages": ["03", "04"], "batches": [
 {"name": "stages 03-04", "tests": ["stage03.Kernels.A", "stage03.Kernels.B", "stage04.Kernels.A",
  "stage04.Model.C"], "numbers": [1, 2, 3, 4]},
 {"name": "stages 03-04, one at a time", "tests": ["stage04.Model.D"], "numbers": [5]}]}
EOF
cat >"$tmp/ctest.log" <<'EOF'
1/4 Test #1: stage03.Kernels.A ................   Passed    1.20 sec
2/4 Test #2: stage03.Kernels.B ................***Failed    2.00 sec
3/4 Test #3: stage04.Kernels.A ................***Timeout 240.01 sec
EOF
python3 "$repo/tests/gpu/ctest_plan.py" report --plan "$tmp/plan.json" --log "$tmp/ctest.log" >"$tmp/report.txt"
report_rc=$?
((report_rc == 1)) || fail "ctest_plan.py report: exit $report_rc, expected 1"
grep -qx 'stage 03: 1 passed, 1 failed, 0 skipped, 0 do not apply, 0 not run of 2: Kernels.B (Failed)' "$tmp/report.txt" ||
    { cat "$tmp/report.txt"; fail "report of stage 03"; }
grep -qx 'stage 04: 0 passed, 1 failed, 0 skipped, 0 do not apply, 2 not run of 3: Kernels.A (Timeout)' "$tmp/report.txt" ||
    { cat "$tmp/report.txt"; fail "report of stage 04"; }
echo "ok: ctest_plan.py report counts passed, failed and not run per stage"

# A test that skips saying it does not apply to its stage (its output, in the full log CTest
# wrote) is counted apart and is no failure; any other skip is one.
printf '%s\n' \
    '1/5 Test #1: stage03.Kernels.A ................   Passed    1.20 sec' \
    '2/5 Test #2: stage03.Kernels.B ................   Skipped   0.10 sec' \
    '3/5 Test #3: stage04.Kernels.A ................   Passed    1.00 sec' \
    '4/5 Test #4: stage04.Model.C ..................   Passed    1.00 sec' \
    '5/5 Test #5: stage04.Model.D ..................   Passed    1.00 sec' >"$tmp/ctest2.log"
printf '%s\n' '2/5 Test: stage03.Kernels.B' 'Output:' '[ RUN      ] Kernels.B' \
    'tests/gpu/stage_tests.cuh:500: Skipped' 'does not apply to this stage: its matmuls are BF16' \
    '[  SKIPPED ] Kernels.B (0 ms)' '<end of output>' >"$tmp/ctest2.full.log"
python3 "$repo/tests/gpu/ctest_plan.py" report --plan "$tmp/plan.json" --log "$tmp/ctest2.log" >"$tmp/report2.txt" ||
    { cat "$tmp/report2.txt"; fail "ctest_plan.py report: a test that does not apply failed the report"; }
grep -qx 'stage 03: 1 passed, 0 failed, 0 skipped, 1 do not apply, 0 not run of 2' "$tmp/report2.txt" ||
    { cat "$tmp/report2.txt"; fail "report of a test that does not apply"; }
sed -i 's/^does not apply to this stage: .*/no CUDA device found: GPU test skipped/' "$tmp/ctest2.full.log"
python3 "$repo/tests/gpu/ctest_plan.py" report --plan "$tmp/plan.json" --log "$tmp/ctest2.log" >"$tmp/report2.txt" &&
    { cat "$tmp/report2.txt"; fail "ctest_plan.py report: a skip for want of a GPU passed"; }
grep -qx 'stage 03: 1 passed, 0 failed, 1 skipped, 0 do not apply, 0 not run of 2' "$tmp/report2.txt" ||
    { cat "$tmp/report2.txt"; fail "report of a skipped test"; }
echo "ok: a test that does not apply to its stage is counted apart; any other skip fails the report"

# ctest_plan.py plan: it refuses tests that are not isolated (the full-size curve tests without a
# shared RESOURCE_LOCK, a GPU test that would see a launcher's variables), from a stand-in ctest.
mkdir -p "$tmp/ctest_bin"
cat >"$tmp/ctest_bin/ctest" <<'EOF2'
#!/usr/bin/env bash
cat <<'JSON'
{"tests": [
 {"name": "stage00.Model.FullSizeCurveMatchesPyTorch", "properties": [{"name": "LABELS", "value": ["gpu", "stage00"]},
   {"name": "ENVIRONMENT_MODIFICATION", "value": ["RANK=unset:"]}]},
 {"name": "stage01.Model.FullSizeCurveMatchesPyTorch", "properties": [{"name": "LABELS", "value": ["gpu", "stage01"]},
   {"name": "RESOURCE_LOCK", "value": ["gpt2_124m_full_size"]}]},
 {"name": "stage03.Kernels.A", "properties": [{"name": "LABELS", "value": ["gpu", "stage03"]},
   {"name": "RUN_SERIAL", "value": true}]}]}
JSON
EOF2
chmod +x "$tmp/ctest_bin/ctest"
PATH="$tmp/ctest_bin:$PATH" python3 "$repo/tests/gpu/ctest_plan.py" plan --build "$tmp" --out "$tmp/bad_plan.json" \
    >"$tmp/plan.txt" 2>&1
plan_rc=$?
((plan_rc == 1)) || { cat "$tmp/plan.txt"; fail "ctest_plan.py plan: exit $plan_rc, expected 1"; }
grep -q "error: the 2 full-size curve tests share no RESOURCE_LOCK" "$tmp/plan.txt" || { cat "$tmp/plan.txt"; fail "no lock"; }
grep -q "error: stage03.Kernels.A does not unset .*WORLD_SIZE" "$tmp/plan.txt" || { cat "$tmp/plan.txt"; fail "no unset"; }
grep -q "stage 03, one at a time: 1 test$" "$tmp/plan.txt" || { cat "$tmp/plan.txt"; fail "batches"; }
echo "ok: ctest_plan.py plan refuses full-size tests without a shared lock and tests that see a launcher's variables"

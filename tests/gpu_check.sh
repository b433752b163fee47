#!/usr/bin/env bash
# The GPU check (tests/gpu/README.md): establishes on a machine with a GPU that every stage is
# correct, and how fast it is. It runs in phases, each designed to finish within 8 minutes on a
# 16-core machine with one H100 and each ending with its own summary; the quick phase does what
# matters most of all of them in one command of a 15-minute GPU window. CTest judges (GPU tests,
# sanitizer runs, workshop expectations); this script builds, runs, keeps time and reports.
set -uo pipefail  # not -e: a failing phase is recorded, and the next one runs

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# Whatever the shell holds, the check runs one process per program (no launcher's variables, no
# NCCL_DEBUG): tests/gpu/clean_environment.sh.
source "$REPO/tests/gpu/clean_environment.sh"
BUILD="$REPO/build/all"
PHASES=(build tests sanitizer workshop kernels ladder)
declare -A BUDGET=([build]=480 [tests]=480 [sanitizer]=480 [workshop]=480 [kernels]=360 [ladder]=480 [curve]=480
                   [ncu]=480 [quick]=540)

usage() {
    cat <<'EOF'
usage: tests/gpu_check.sh [--phase NAME]... [options]

the one command of a GPU window of 15 minutes (its start included; 10 minutes a command):
  quick      (not in `all`) all of the below that matters most, within --deadline (540 s), in
             this order, each part in the time the ones before it left: build for this GPU only;
             every GPU test, stages 03-06 first; the kernel benchmark of every stage and
             attention.py; a short ladder (C++ stages newest first, then PyTorch); then the
             summary and the archive, written before the deadline whatever happened. The
             sanitizer, workshop, profile, curve and ncu phases are left for a longer window.

phases (each within 8 minutes on one H100; `all` runs the six in order, about 30 minutes):
  build      configure the `all` preset for this GPU; build the trainers, test_stageNN,
             bench_stageNN and the tools; make sure data/ holds the default corpus
  tests      every GPU test (ctest -L gpu) with REQUIRE_GPU=1, in parallel
  sanitizer  compute-sanitizer memcheck and racecheck over each stage's kernel tests (ctest -L sanitizer)
  workshop   each stageNN-workshop preset: build test_<exercise> for each exercise, with that
             exercise alone a stub; its tests must fail naming it, every other GPU test of its
             program must pass; then the exercises' tests in build/all (the solutions) must pass;
             one line per exercise in workshop_exercises.txt
  kernels    bench_stageNN: every op forward and backward at GPT-2 124M shapes, JSON + table;
             tests/bench/step_breakdown.py: from those, where one step's time goes per stage;
             tests/bench/roofline.py: every op against the copy and GEMM roofs;
             then tests/bench/attention.py: attention alone beside PyTorch's SDPA backends;
             then stages 00 and 02's row kernels and GELU beside their first versions, a thread
             per row or element (bench_stageNN --variants yes: kernels/first_versions_stageNN.json);
             then one step of PyTorch's "compile + vocab padded" under torch.profiler and
             tests/bench/step_breakdown_vs_torch.py: stage 05 beside it (profile/)
  ladder     tests/bench/ladder.py: every stage and its PyTorch counterpart, tokens/s and MFU;
             the step breakdown and the stage 05 page again, with the ladder's ms/step
  curve      (not in `all`) write the PyTorch reference curve of GPT-2 124M on the default corpus
  ncu        (not in `all`) Nsight Compute on the kernels the chapters argue about: one row of a
             stage's kernel benchmark per report, its kernels once each, in ncu/NAME.ncu-rep with
             the report's details as NAME.txt and NAME.csv (ncu from env NCU, PATH or
             /usr/local/cuda/bin); without a GPU or ncu it lists its commands

options:
  --phase NAME     a phase above, or `all` (repeatable) [all]
  --out DIR        logs, results and summary.txt [build/gpu_check]
  --archive PATH   afterwards, pack every log and result (no checkpoints) into PATH (.tar.gz, <= 16 MiB)
  --gtest-src DIR  GoogleTest sources for a machine without internet [env GTEST_SRC, /usr/src/googletest]
  --python PY      Python with CUDA PyTorch, for the ladder [env PYTHON, python3]
  --jobs N         parallel build jobs and tests [all cores; tests: half of them, at most 8]
  --workshop-arch A  CUDA architecture of the workshop builds [this GPU's; without one, 80;90]
  --workshop-stages "NN ..."  the stages whose exercises the workshop phase checks [all], to split it
                   over two windows: "00 01 02" then "03 04 05 06"
  --budget S       seconds each phase may take before it is stopped [480; kernels 360]
  --deadline S     seconds the quick phase may take, its summary and archive included [540]
  --steps N        ladder steps per entry [10; quick: 8];  --batch B: ladder batch size [16]
  -h, --help       this text
Exit status: 0 when every phase run passed, 1 when one failed or needs a GPU this machine lacks, 2 on bad usage,
130 or 143 when stopped by Ctrl-C or SIGTERM: the running command is stopped, nothing more starts,
and the summary and the archive are still written.
EOF
}

die_usage() { echo "gpu_check.sh: error: $1 (see --help)" >&2; exit 2; }
RUN=() OUT="$REPO/build/gpu_check" ARCHIVE="" GTEST_DIR="${GTEST_SRC:-}" PY="${PYTHON:-python3}" WORKSHOP_ARCH=""
WORKSHOP_STAGES="" WORKSHOP_LINES=""
JOBS=$(nproc 2>/dev/null || echo 4) STEPS="" BATCH=16 BUDGET_ALL="" QUICK_DEADLINE=540
while [[ $# -gt 0 ]]; do
    [[ "$1" =~ ^--(phase|out|archive|gtest-src|python|jobs|budget|deadline|steps|batch|workshop-arch|workshop-stages)$ &&
        ( $# -lt 2 || -z "$2" ) ]] && die_usage "option $1 needs a value"
    case "$1" in
        --phase) if [[ "$2" == all ]]; then RUN+=("${PHASES[@]}"); elif [[ -n "${BUDGET[$2]:-}" ]]; then RUN+=("$2")
                 else die_usage "unknown phase '$2'"; fi; shift 2 ;;
        --out) OUT=$2; shift 2 ;;          --archive) ARCHIVE=$2; shift 2 ;;
        --gtest-src) GTEST_DIR=$2; shift 2 ;; --python) PY=$2; shift 2 ;;
        --jobs) JOBS=$2; shift 2 ;;        --budget) BUDGET_ALL=$2; shift 2 ;;
        --deadline) QUICK_DEADLINE=$2; shift 2 ;;
        --steps) STEPS=$2; shift 2 ;;      --batch) BATCH=$2; shift 2 ;;
        --workshop-arch) WORKSHOP_ARCH=$2; shift 2 ;;
        --workshop-stages) WORKSHOP_STAGES=$2; shift 2 ;;
        -h | --help) usage; exit 0 ;;
        *) die_usage "unknown option '$1'" ;;
    esac
done
for n in "$JOBS" ${STEPS:+"$STEPS"} "$BATCH" ${BUDGET_ALL:+"$BUDGET_ALL"} "$QUICK_DEADLINE"; do
    [[ "$n" =~ ^[1-9][0-9]*$ ]] || die_usage "'$n' is not a positive whole number"
done
((QUICK_DEADLINE >= 60)) || die_usage "--deadline $QUICK_DEADLINE: the quick phase needs at least 60 s"
((${#RUN[@]})) || RUN=("${PHASES[@]}")
BUDGET[quick]=$QUICK_DEADLINE
[[ -z "$GTEST_DIR" && -f /usr/src/googletest/CMakeLists.txt ]] && GTEST_DIR=/usr/src/googletest
[[ -z "$GTEST_DIR" || -f "$GTEST_DIR/CMakeLists.txt" ]] || die_usage "'$GTEST_DIR' holds no GoogleTest sources"
[[ -z "$GTEST_DIR" ]] || GTEST_DIR=$(cd "$GTEST_DIR" && pwd)  # CMake runs from the repository's root
TEST_JOBS=$((JOBS / 2 < 1 ? 1 : JOBS / 2 > 8 ? 8 : JOBS / 2))
mkdir -p "$OUT/logs" || die_usage "cannot create $OUT"
OUT=$(cd "$OUT" && pwd) LOGS="$OUT/logs"
STAGES=$(cd "$REPO/stages" && ls -d [0-9][0-9]_* | cut -c1-2 | tr '\n' ' ')
STAGES=${STAGES% }
if [[ -z "$WORKSHOP_STAGES" ]]; then WORKSHOP_STAGES=$STAGES
else
    for n in $WORKSHOP_STAGES; do
        [[ " $STAGES " == *" $n "* ]] || die_usage "--workshop-stages: '$n' is not a stage (the stages: $STAGES)"
    done
    WORKSHOP_STAGES=$(tr ' ' '\n' <<<"$WORKSHOP_STAGES" | grep . | sort -u | paste -sd ' ')  # each once, in order
fi

# --- Helpers --------------------------------------------------------------------------------

GPU=$(nvidia-smi --query-gpu=name,compute_cap --format=csv,noheader 2>/dev/null | head -n 1 |
    awk -F', *' '{ gsub(/\./, "", $2); print $1 " (sm_" $2 ")" }')
no_gpu() { [[ -z "$GPU" ]]; }

# Stopped from outside (Ctrl-C, SIGTERM: `timeout`, a machine's time limit), the check does not
# just die: the command running is stopped with its process group as at a deadline, nothing
# after it starts, and the summary and the archive are still written, with what finished. The
# signal's name goes into STOP_MARK, a file, because many commands run in subshells (cd REPO),
# where a variable set by a trap would not reach the phase that called them.
STOP_MARK="$LOGS/stopped_by"
rm -f "$STOP_MARK"  # an earlier run's
stopped() { [[ -s "$STOP_MARK" ]]; }
stopped_by() { cat "$STOP_MARK" 2>/dev/null; }
on_signal() {  # SIGNAME
    stopped || echo "$1" >"$STOP_MARK"
    DEADLINE=$SECONDS  # run's loop then stops the group: SIGTERM, SIGKILL after GRACE
}
catch_signals() { trap 'on_signal SIGINT' INT; trap 'on_signal SIGTERM' TERM; }

# run LOG CMD...: runs CMD in a process group of its own with its output in LOG, until the
# phase's deadline (DEADLINE, in bash's SECONDS); past it the whole group gets SIGTERM, then
# SIGKILL GRACE seconds later. (Not SIGINT: a command this script starts in the background
# ignores SIGINT, as bash's background commands do without job control.) Returns CMD's exit
# status (124 when stopped at the deadline; 130 when the check was stopped by a signal, which
# stops the group the same way; then it starts nothing more). With SHOW=1 the output is also
# shown as it comes.
GRACE=10
# The words as a shell would read them back: those with spaces or special characters in quotes.
quoted() {
    local word words=()
    for word in "$@"; do
        if [[ "$word" =~ ^[A-Za-z0-9_./:=,+@%-]+$ ]]; then words+=("$word"); else words+=("'${word//\'/\'\\\'\'}'"); fi
    done
    echo "${words[*]}"
}
run() {
    local log=$1 pid left stop="" i; shift
    if stopped; then
        echo "  not started (the check was stopped by $(stopped_by)): $(quoted "$@")" | sed "s|$REPO/||g" | tee -a "$log"
        return 130
    fi
    echo "  \$ $(quoted "$@")" | sed "s|$REPO/||g" | tee -a "$log"
    if ((${SHOW:-0})); then setsid "$@" > >(tee -a "$log" | sed 's/^/  | /') 2>&1 &
    else setsid "$@" >>"$log" 2>&1 & fi
    pid=$!
    catch_signals  # also in a subshell, where the caller's traps are not inherited
    while kill -0 "$pid" 2>/dev/null; do
        left=$((DEADLINE - SECONDS))
        if ((left <= 0)) && [[ -z "$stop" ]]; then
            if stopped; then
                echo "  stopped by $(stopped_by): stopping the process group of '$1'" | tee -a "$log"
            else
                echo "  over its time limit: stopping the process group of '$1'" | tee -a "$log"
            fi
            kill -TERM -- "-$pid" 2>/dev/null
            for ((i = 0; i < GRACE * 4; i++)); do kill -0 -- "-$pid" 2>/dev/null || break; sleep 0.25; done
            kill -KILL -- "-$pid" 2>/dev/null
            stop=124
        fi
        sleep 0.2
    done
    wait "$pid" 2>/dev/null; local rc=$?
    stopped && return 130
    [[ -n "$stop" ]] && return "$stop"
    ((rc == 0 || ${SHOW:-0})) || { echo "  exit status $rc; the end of $log:"; tail -n 12 "$log" | sed 's/^/  | /'; }
    return "$rc"
}

# ctest over a build directory, REQUIRE_GPU=1 where there is a GPU (a test that skips there
# fails). Sets STATUS: PASS when every test passed, NO-GPU when there is none and nothing
# failed, else FAIL; and DETAIL: "P passed, F failed, S skipped of T" from CTest's last lines.
run_ctest() {  # log build-dir ctest-args...
    local log=$1 dir=$2 rc total failed skipped apart this_run first; shift 2
    # The log may hold earlier runs (the same --out again): judge only the lines of this one.
    first=$(($(cat "$log" 2>/dev/null | wc -l) + 1))
    REQUIRE_GPU=$(no_gpu && echo 0 || echo 1) run "$log" ctest --test-dir "$dir" -j "$TEST_JOBS" --output-on-failure "$@"
    rc=$?
    cp "$dir/Testing/Temporary/LastTest.log" "${log%.log}.full.log" 2>/dev/null
    # "96% tests passed, 3 tests failed out of 87"; when none fails, newer CTest prints
    # "100% tests passed out of 27" and older "100% tests passed, 0 tests failed out of 27".
    this_run=$(tail -n "+$first" "$log")
    total=$(sed -nE 's/.*tests passed.* out of ([0-9]+).*/\1/p' <<<"$this_run" | tail -n 1)
    failed=$(sed -nE 's/.* ([0-9]+) tests? failed out of [0-9]+.*/\1/p' <<<"$this_run" | tail -n 1)
    [[ -n "$total" && -z "$failed" ]] && failed=0
    skipped=$(grep -c '(Skipped)' <<<"$this_run")
    # A test that does not apply to its stage skips saying so (tests/gpu/stage_tests.cuh,
    # kDoesNotApply): counted apart, it is no failure; any other skip on a GPU is.
    apart=$(grep -c '^does not apply to this stage: ' "${log%.log}.full.log" 2>/dev/null)
    DETAIL="$((${total:-0} - ${failed:-0} - skipped)) passed, ${failed:-?} failed, $skipped skipped of ${total:-0}"
    ((${apart:-0} > 0)) && DETAIL+=" ($apart of them do not apply to their stage)"
    if ((rc == 0 && ${total:-0} > 0 && skipped == ${apart:-0})); then STATUS=PASS
    elif no_gpu && [[ "${failed:-1}" == 0 ]]; then STATUS=NO-GPU
    else STATUS=FAIL; fi
    [[ "$STATUS" == PASS ]]
}

# The stages CMake configured in a build tree (stage 06 is left out where NCCL was not found):
# asking ninja for a target that does not exist would stop it before it builds anything.
configured_stages() {  # build-dir
    cmake --build "$1" --target help 2>/dev/null | grep -oE '\btest_stage[0-9]{2}\b' | cut -c11- | sort -u | paste -sd ' '
}

configure() {  # log build-dir preset extra-args...
    local log=$1 dir=$2 preset=$3; shift 3
    local args=(--no-warn-unused-cli --preset "$preset" -UCMAKE_CUDA_ARCHITECTURES "$@")
    [[ -n "$GTEST_DIR" ]] && args+=("-DFETCHCONTENT_SOURCE_DIR_GOOGLETEST=$GTEST_DIR")
    (cd "$REPO" && run "$log" cmake "${args[@]}")
}

# --- Phases: each sets STATUS (PASS, FAIL or NO-GPU) and DETAIL -------------------------------

phase_build() {
    local log="$LOGS/build.log" targets=(bench_ceilings gpt_init gpt_prepare gpt_launch headers_link_twice) n shards
    configure "$log" "$BUILD" all || { STATUS=FAIL DETAIL="configure failed (logs/build.log)"; return; }
    local configured
    configured=$(configured_stages "$BUILD")
    for n in $configured; do targets+=("train_$n" "test_stage$n" "bench_stage$n"); done
    run "$log" cmake --build "$BUILD" -j "$JOBS" --target "${targets[@]}" -- -k 0 ||
        { STATUS=FAIL DETAIL="build failed (logs/build.log)"; return; }
    [[ "$configured" == "$STAGES" ]] ||
        { STATUS=FAIL DETAIL="only stages $configured were configured (logs/build.log says why)"; return; }
    run "$log" cmake --build "$BUILD" --target data || { STATUS=FAIL DETAIL="no default corpus (logs/build.log)"; return; }
    shards=$(ls "$REPO"/data/brown/*_train_*.bin 2>/dev/null | wc -l)
    STATUS=PASS DETAIL="stages $STAGES built for sm_$(sed -n 's/^CMAKE_CUDA_ARCHITECTURES:[A-Z]*=//p' "$BUILD/CMakeCache.txt"); $shards train shard(s)"
    no_gpu && STATUS=NO-GPU DETAIL+="; no GPU: the other phases cannot pass here"
}

count() { grep -cE "Test +#[0-9]+: stage$1\..*$2" "$LOGS/tests.log"; }  # stage, result
apart_in() {  # stage: its tests that skipped because they do not apply to it (run_ctest)
    awk -v s="stage$1." '/^[0-9]+\/[0-9]+ Test: /{t=$3} /^does not apply to this stage: /&&index(t,s)==1{n++} END{print n+0}' \
        "$LOGS/tests.full.log" 2>/dev/null || echo 0
}
phase_tests() {
    # Without a GPU every one of them would only report skipped (CI runs them that way per preset).
    if no_gpu; then STATUS=NO-GPU DETAIL="needs a GPU (without one every GPU test skips)"; return; fi
    run_ctest "$LOGS/tests.log" "$BUILD" -L '^(gpu|registers)$' --timeout 420
    local n
    for n in $STAGES; do  # one line per stage, from CTest's "Test #k: stageNN.Suite.Test ... Passed" lines
        echo "  stage $n: $(count "$n" ' Passed') passed, $(count "$n" '(Failed|Exception|Timeout|Not Run)') failed," \
            "$(count "$n" Skipped) skipped ($(apart_in "$n") of them do not apply to the stage)"
    done
}

phase_sanitizer() {
    if [[ $(ctest --test-dir "$BUILD" -N -L sanitizer | sed -n 's/^Total Tests: //p') == 0 ]]; then
        STATUS=FAIL DETAIL="no sanitizer tests: compute-sanitizer was not found when build/all was configured"
        no_gpu && STATUS=NO-GPU DETAIL="needs a GPU and compute-sanitizer"
        return
    fi
    run_ctest "$LOGS/sanitizer.log" "$BUILD" -L sanitizer
    grep -hE "(ERROR|RACECHECK) SUMMARY" "$LOGS/sanitizer.full.log" 2>/dev/null | sort | uniq -c | sed 's/^/  /'
}

# The exercises of the stages the workshop phase takes, one "name" per line.
workshop_exercises() {
    local n
    for n in $WORKSHOP_STAGES; do
        (cd "$REPO" && grep -rhoE "^[[:space:]]*// EXERCISE BEGIN stage$n\.[a-z0-9_]+" stages/) | awk '{ print $4 }'
    done
}

# Each workshop preset builds one test program per exercise, from a copy of stages/ in which that
# exercise alone is a stub (docs/workshop.md). In each: the exercise's tests must fail, naming it
# (its workshop.expect test judges), and every other test of the program must pass. Then the same
# exercises' tests in the solutions' build (build/all, from the build phase) must pass. One line
# per exercise: "stub: N of N listed tests fail; solution: N of N pass".
phase_workshop() {
    local n preset dir presets=() pids=() bad=0 total=0 detail="" name listed stub solution passed lines=""
    local programs poisoned i t
    rm -f "$LOGS/workshop_solutions.log" "$LOGS/workshop_solutions.full.log"  # an earlier run's
    for n in $WORKSHOP_STAGES; do
        preset="stage$n-workshop"
        (cd "$REPO" && cmake --list-presets 2>/dev/null | grep -q "\"$preset\"") && presets+=("$preset")
    done
    for preset in "${presets[@]}"; do  # the builds are single large compiles: side by side
        n=${preset:5:2} dir="$REPO/build/$preset"
        (configure "$LOGS/$preset.log" "$dir" "$preset" -DGPT_WORKSHOP_EXPECT=ON \
            ${WORKSHOP_ARCH:+"-DCMAKE_CUDA_ARCHITECTURES=$WORKSHOP_ARCH"} &&
            run "$LOGS/$preset.log" cmake --build "$dir" --target "test_stage$n") >/dev/null &
        pids+=($!)
    done
    for i in "${!presets[@]}"; do
        preset=${presets[$i]} dir="$REPO/build/$preset" n=${presets[$i]:5:2}
        if ! wait "${pids[$i]}"; then
            bad=$((bad + 1)) detail+="; $preset does not build (logs/$preset.log)"; continue
        fi
        # Each exercise's program is compiled with fresh device memory poisoned (docs/workshop.md).
        programs=$(cd "$REPO" && grep -rhE "^[[:space:]]*// EXERCISE BEGIN stage$n\." stages/ | wc -l)
        poisoned=$(grep -E -- "-DGPT_POISON_FRESH_DEVICE_MEMORY=1 .*stages/test_stage$n\.[a-z0-9_]+\.cu" \
            "$dir/compile_commands.json" 2>/dev/null | grep -oE "stages/test_stage$n\.[a-z0-9_]+\.cu" | sort -u | wc -l)
        if ((poisoned != programs)); then
            bad=$((bad + 1)) detail+="; $preset: $poisoned of its $programs exercise programs compiled with fresh memory poisoned"
            continue
        fi
        if no_gpu; then  # it builds; its tests would only skip
            total=$((total + 1)) detail+="; $preset builds"
            continue
        fi
        # The exercises' own tests are meant to fail here: their expectations judge them.
        run_ctest "$LOGS/$preset.tests.log" "$dir" -L gpu -LE '^exercise$'
        [[ "$STATUS" == FAIL ]] && bad=$((bad + 1))
        total=$((total + 1)) detail+="; $preset: $DETAIL"
        echo "  $preset: $DETAIL"
    done
    # Without a GPU, the room check (tests/workshop_check.sh, docs/workshop.md) over these builds
    # must report every exercise SKIPPED: its tests start, and skip (about 10 s in all).
    if no_gpu && ((bad == 0 && total > 0)); then
        : >"$LOGS/workshop_check.log"
        if SHOW=1 run "$LOGS/workshop_check.log" "$REPO/tests/workshop_check.sh" --no-build --jobs "$TEST_JOBS" \
            "${presets[@]%-workshop}" &&
            ! grep -E '^stage[0-9]{2}\.[a-z0-9_]+ ' "$LOGS/workshop_check.log" | grep -vqE '^[^ ]+ +SKIPPED +no GPU'; then
            detail+="; tests/workshop_check.sh reports every exercise SKIPPED"
        else
            bad=$((bad + 1)) detail+="; tests/workshop_check.sh did not report every exercise SKIPPED (logs/workshop_check.log)"
        fi
    fi
    if ! no_gpu && ((total > 0)); then
        # The solutions: the same labels in build/all, where every one of their tests must pass.
        if [[ -x "$BUILD/stages/test_stage${WORKSHOP_STAGES%% *}" ]]; then
            run_ctest "$LOGS/workshop_solutions.log" "$BUILD" -L '^exercise$' \
                -R "^stage($(tr ' ' '|' <<<"$WORKSHOP_STAGES"))\\."
            [[ "$STATUS" == PASS ]] || bad=$((bad + 1))
            detail+="; solutions in build/all: $DETAIL"
        fi
        while read -r name; do
            [[ -n "$name" ]] || continue
            listed=$(ctest --test-dir "$REPO/build/stage${name:5:2}-workshop" -N -L "^${name//./\\.}\$" |
                grep -cE "Test +#[0-9]+: $name\.")
            stub=$(grep -hoE "^exercise $name: stub: [0-9]+ of [0-9]+ listed tests fail" \
                "$LOGS/stage${name:5:2}-workshop.tests.full.log" 2>/dev/null | tail -n 1 | sed 's/.*stub: //')
            if [[ -f "$LOGS/workshop_solutions.log" ]]; then
                passed=0
                while read -r t; do
                    grep -qE "Test +#[0-9]+: $t [. ]*Passed" "$LOGS/workshop_solutions.log" && passed=$((passed + 1))
                done < <(ctest --test-dir "$BUILD" -N -L "^${name//./\\.}\$" | sed -nE 's/.*Test +#[0-9]+: (stage[0-9]{2}\.[^ ]+).*/\1/p')
                solution="$passed of $listed pass"
            else
                solution="not run (build/all has no test programs: run the build phase first)"
            fi
            lines+="$(printf '  %-30s stub: %s; solution: %s' "$name" "${stub:-not judged (logs/stage${name:5:2}-workshop.tests.full.log)}" "$solution")"$'\n'
        done < <(workshop_exercises)
        printf '%s' "$lines" | tee "$OUT/workshop_exercises.txt"
        WORKSHOP_LINES=$lines  # main adds them to summary.txt under the phase's line
    fi
    DETAIL="${#presets[@]} workshop presets$detail"
    if ((bad > 0 || total == 0)); then STATUS=FAIL; elif no_gpu; then STATUS=NO-GPU; else STATUS=PASS; fi
}

attention_stages() {  # stage 02's materialised attention and stage 03's flash attention, where built
    local s out
    out=$(for s in $STAGES; do [[ $s == 02 || $s == 03 ]] && echo "$s"; done | paste -sd, -)
    echo "${out:-none}"
}

# Stage 00's row kernels (LayerNorm, the causal softmax, the classifier) and GELU beside their
# first versions, a thread per row or per element (tests/bench/first_versions.cuh; docs/00_fp32_baseline.md, "The first
# version"), at B = 16, in kernels/first_versions_stageNN.json. Prints (for a DETAIL) what it
# wrote or why not; the command and its output go to its log.
first_versions_bench() {  # stage [seconds cap]
    local n=$1 exe="$BUILD/stages/bench_stage$1"
    [[ -x "$exe" ]] || { echo "; bench_stage$n is not built"; return 1; }
    if capped "${2:-120}" run "$LOGS/first_versions_stage$n.log" "$exe" --batch 16 --variants yes \
        --ops '^(LayerNorm|Attention|Classifier|Gelu) ' --json "$OUT/kernels/first_versions_stage$n.json" >/dev/null; then
        echo ", kernels/first_versions_stage$n.json"
    else
        echo "; bench_stage$n --variants yes failed or was stopped (logs/first_versions_stage$n.log)"
        return 1
    fi
}

phase_kernels() {
    local n exe rc bad=0 done=0
    mkdir -p "$OUT/kernels"
    for n in $STAGES; do
        exe="$BUILD/stages/bench_stage$n"
        [[ -x "$exe" ]] || { bad=$((bad + 1)); echo "  $exe is not built"; continue; }
        SHOW=1 run "$LOGS/kernels_stage$n.log" "$exe" --json "$OUT/kernels/stage$n.json"
        rc=$?
        ((rc == 3)) && { STATUS=NO-GPU DETAIL="bench_stageNN needs a GPU"; return; }
        ((rc == 0)) && done=$((done + 1)) || bad=$((bad + 1))
    done
    # Where one step's time goes, per stage, and every op against the roofs (the ceilings each
    # JSON records), from those JSON files (figures, which fail nothing: without Python, or
    # should a script fail, the measurements above still stand).
    local breakdown=""
    if ((done > 0)) && command -v "$PY" >/dev/null 2>&1; then
        if (cd "$REPO" && SHOW=1 run "$LOGS/step_breakdown.log" "$PY" tests/bench/step_breakdown.py \
            --out "$OUT/kernels/step_breakdown.svg" "$OUT"/kernels/stage[0-9][0-9].json); then
            breakdown=", kernels/step_breakdown.svg"
        else
            breakdown="; step_breakdown.py reported a problem (logs/step_breakdown.log)"
        fi
        if (cd "$REPO" && SHOW=1 run "$LOGS/roofline.log" "$PY" tests/bench/roofline.py \
            --out "$OUT/kernels/roofline.svg" "$OUT"/kernels/stage[0-9][0-9].json); then
            breakdown+=", kernels/roofline.svg"
        else
            breakdown+="; roofline.py reported a problem (logs/roofline.log)"
        fi
    fi
    # Attention alone beside PyTorch's SDPA backends, at T = 1024 to 8192 (tests/bench/attention.py):
    # stage 02's materialised attention and stage 03's flash attention with its variants; the later
    # stages use stage 03's as it is.
    if (cd "$REPO" && SHOW=1 run "$LOGS/attention.log" "$PY" tests/bench/attention.py --build "$BUILD" \
        --out "$OUT/attention" --stages "$(attention_stages)"); then
        done=$((done + 1))
    else
        bad=$((bad + 1)) && echo "  tests/bench/attention.py failed (logs/attention.log)"
    fi
    for n in $STAGES; do
        [[ $n == 00 || $n == 02 ]] && breakdown+=$(first_versions_bench "$n")
    done
    # Stage 05 beside PyTorch's compiled step: one step of the ladder's "compile + vocab padded"
    # entry under torch.profiler, then the page (a figure too: it fails nothing). An earlier run's
    # profile and page go first: they must not be paired with this run's kernel benchmark.
    rm -f "$OUT"/profile/torch_pad_profile.json "$OUT"/profile/stage05_vs_pytorch.{md,svg}
    if [[ -f "$OUT/kernels/stage05.json" ]] && command -v "$PY" >/dev/null 2>&1; then
        if ((DEADLINE - SECONDS < 150)); then
            breakdown+="; no time left in the phase for the PyTorch profile"
        elif ! profile_torch; then
            breakdown+="; the PyTorch profile failed (logs/torch_profile.log)"
        elif torch_page; then
            breakdown+=", profile/stage05_vs_pytorch.md"
        else
            breakdown+="; step_breakdown_vs_torch.py reported a problem (logs/torch_page.log)"
        fi
    fi
    DETAIL="$done of $(($(wc -w <<< "$STAGES") + 1)) measured (stages, then attention.py), $bad failed; JSON in kernels/, attention/$breakdown"
    ((bad == 0)) && STATUS=PASS || STATUS=FAIL
}

# Stage 05 beside PyTorch (tests/bench/step_breakdown_vs_torch.py). profile_torch: the ladder's
# PyTorch entry of stage 05 ("compile + vocab padded", --torch pad), 5 steps of warm-up (the first
# compiles), then one step under torch.profiler: profile/torch_pad_profile.json (per-kernel GPU
# times), its Chrome trace beside it, the run itself in profile/run/. About 80 s on an H100, most of
# it torch.compile; stopped at the phase's end.
profile_torch() {
    # shellcheck disable=SC2207  # the arguments hold no spaces
    local args=($(ladder_args profile/run) --stages none --torch pad --steps 5 --skip 3 --batch "$BATCH"
        --no-ceilings --no-plot --timeout 240 --budget $((DEADLINE - SECONDS - 30))
        --profile-step "$OUT/profile/torch_pad_profile.json")
    mkdir -p "$OUT/profile"
    (cd "$REPO" && SHOW=1 run "$LOGS/torch_profile.log" "$PY" "${args[@]}")
}

# torch_page [--ladder results.json]: the page profile/stage05_vs_pytorch.md and its figure.
torch_page() {
    (cd "$REPO" && SHOW=1 run "$LOGS/torch_page.log" "$PY" tests/bench/step_breakdown_vs_torch.py \
        --kernels "$OUT/kernels/stage05.json" --profile "$OUT/profile/torch_pad_profile.json" --batch "$BATCH" \
        --out "$OUT/profile/stage05_vs_pytorch.md" --svg "$OUT/profile/stage05_vs_pytorch.svg" "$@")
}

ladder_args() {
    echo tests/bench/ladder.py --build "$BUILD" --data "$REPO/data/brown" --out "$OUT/$1" --python "$PY"
}

phase_ladder() {
    local steps=${STEPS:-10}
    # shellcheck disable=SC2207  # the arguments hold no spaces
    local args=($(ladder_args ladder) --steps "$steps" --skip $((steps / 3)) --batch "$BATCH"
        --timeout 240 --budget $((DEADLINE - SECONDS - 30)))
    if no_gpu; then
        (cd "$REPO" && SHOW=1 run "$LOGS/ladder.log" "$PY" "${args[@]}" --dry-run) &&
            STATUS=NO-GPU DETAIL="the ladder needs a GPU (its plan is above)" || DETAIL="its --dry-run failed"
        return
    fi
    (cd "$REPO" && SHOW=1 run "$LOGS/ladder.log" "$PY" "${args[@]}") && STATUS=PASS || STATUS=FAIL
    DETAIL="results in ladder/ (results.md, results.json)"
    # The kernels phase's step breakdown again, with this ladder's ms/step beside its sums.
    if [[ -f "$OUT/ladder/results.json" ]] && compgen -G "$OUT/kernels/stage[0-9][0-9].json" >/dev/null; then
        (cd "$REPO" && SHOW=1 run "$LOGS/step_breakdown.log" "$PY" tests/bench/step_breakdown.py --batch "$BATCH" \
            --out "$OUT/kernels/step_breakdown.svg" --ladder "$OUT/ladder/results.json" \
            "$OUT"/kernels/stage[0-9][0-9].json) && DETAIL+="; kernels/step_breakdown.svg beside the ladder"
    fi
    # The kernels phase's page of stage 05 beside PyTorch again, with both sides' ms/step.
    if [[ -f "$OUT/ladder/results.json" && -f "$OUT/profile/torch_pad_profile.json" && -f "$OUT/kernels/stage05.json" ]]; then
        torch_page --ladder "$OUT/ladder/results.json" && DETAIL+="; profile/stage05_vs_pytorch.md beside the ladder"
    fi
}

phase_curve() {
    local dest="$REPO/tests/reference/curves/d12_brown_fp32.json"
    # shellcheck disable=SC2046
    (cd "$REPO" && SHOW=1 run "$LOGS/curve.log" "$PY" $(ladder_args curve) --make-curve "$dest") &&
        STATUS=PASS DETAIL="wrote ${dest#"$REPO"/}" || STATUS=FAIL DETAIL="see logs/curve.log"
}

# --- The ncu phase: Nsight Compute on the kernels the chapters argue about -----------------------
#
# A target is one row of a stage's kernel benchmark (bench_stageNN --ops: one op, one pass, at
# B = NCU_BATCH), run under ncu with a filter on kernel names; its report is ncu/NAME.ncu-rep.
# Before that row the benchmark measures its ceilings, a copy and a cuBLASLt GEMM whose algorithms
# it times, and a stage that times matmul algorithms (04 on) times those of a shape on its first
# call: launches that a matmul target's filter matches too, fewer than NCU_SKIP in all. So ncu skips
# the first NCU_SKIP launches that match and profiles the next COUNT, the row's kernels per run.
# The row's NCU_SKIP + COUNT warm-up runs are alike, so COUNT launches in a row among them are each
# of its kernels once. (The counts of the LM head's backward and of fc+gelu allow for a product
# that cuBLASLt splits into two kernels, or a separate epilogue; where it does not, one kernel is
# profiled twice.)
NCU_SKIP=300
NCU_BATCH=8
NCU_TARGET_SECONDS=90  # the most one target may take (predicted: 5 to 30 s)
NCU_SECTIONS=(SpeedOfLight MemoryWorkloadAnalysis MemoryWorkloadAnalysis_Tables ComputeWorkloadAnalysis Occupancy
    WarpStateStats LaunchStats)
NCU_METRICS=dram__bytes_read.sum,dram__bytes_write.sum  # the bytes each kernel moved, beside op_cost.h's least
# cuBLAS(Lt)'s kernels by their demangled names (sm90_xmma_gemm_..., nvjet_..., cutlass3x_..._gemm_...).
MATMUL_KERNELS='gemm|gemv|nvjet|xmma|cutlass|cublas|splitK'
NCU_NAMES=() NCU_STAGES=() NCU_COUNTS=() NCU_ROWS=() NCU_KERNELS=() NCU_MORE=()
ncu_target() {  # report-name stage count benchmark-rows kernel-names [benchmark options]
    NCU_NAMES+=("$1") NCU_STAGES+=("$2") NCU_COUNTS+=("$3") NCU_ROWS+=("$4") NCU_KERNELS+=("$5") NCU_MORE+=("${6:-}")
}
# Most wanted first (what each settles: tests/gpu/README.md, "The ncu phase"): a phase cut short
# loses the end of the list.
ncu_target stage02_attention_forward 02 3 '^Attention forward$' "causal_softmax|$MATMUL_KERNELS"
ncu_target stage02_attention_backward 02 5 '^Attention backward$' "causal_softmax|$MATMUL_KERNELS"
ncu_target stage02_lm_head_forward 02 1 '^Matmul lm_head forward$' "$MATMUL_KERNELS|copy_matrices"
ncu_target stage05_lm_head_50257_forward 05 1 '^Matmul lm_head at 50257 forward$' "$MATMUL_KERNELS|copy_matrices"
ncu_target stage05_lm_head_50304_forward 05 1 '^Matmul lm_head at 50304 forward$' "$MATMUL_KERNELS|copy_matrices"
ncu_target stage02_lm_head_backward 02 3 '^Matmul lm_head backward$' "$MATMUL_KERNELS|copy_matrices"
ncu_target stage05_lm_head_50257_backward 05 3 '^Matmul lm_head at 50257 backward$' "$MATMUL_KERNELS|copy_matrices"
ncu_target stage05_lm_head_50304_backward 05 3 '^Matmul lm_head at 50304 backward$' "$MATMUL_KERNELS|copy_matrices"
ncu_target stage02_layernorm_forward 02 1 '^LayerNorm forward$' layernorm
ncu_target stage02_layernorm_backward 02 2 '^LayerNorm backward$' layernorm
ncu_target stage03_flash_forward 03 1 '^Attention forward$' flash
ncu_target stage03_flash_backward 03 3 '^Attention backward$' flash
ncu_target stage03_flash_forward_16_rows 03 1 '^Attention 16 rows per warp forward$' flash '--attention-variants yes'
# FlashAttention-2's backward, the benchmark's atomic-dq variant: the row dot (which zeroes dq's
# sums), dk/dv with dq added with atomics, and the rounding of the sums (the apostrophe matched by .).
ncu_target stage03_flash_backward_atomic_dq 03 3 '^Attention atomic dq \(FlashAttention-2.s\) backward$' flash \
    '--attention-variants yes'
ncu_target stage04_fc_gelu 04 3 '^MatmulBiasGelu fc forward$' "$MATMUL_KERNELS|gelu|GeluOf|add_bias"
ncu_target stage04_residual_layernorm_forward 04 1 '^ResidualLayerNorm forward$' layernorm
ncu_target stage04_residual_layernorm_backward 04 1 '^ResidualLayerNorm backward$' layernorm
ncu_target stage04_fused_classifier 04 1 '^ClassifierWithGrad forward\+backward$' fused_classifier
ncu_target stage04_adamw 04 2 '^Optimizer step$' 'sum_into|adamw'
# The gradient norm and stage 02's 16 launches, one per parameter tensor.
ncu_target stage02_adamw 02 17 '^Optimizer step$' 'sum_into|adamw'

ncu_command() {  # target index: sets NCU_BENCH (the benchmark's command) and NCU_CMD (ncu's, around it)
    local i=$1 section
    NCU_BENCH=("$BUILD/stages/bench_stage${NCU_STAGES[$i]}" --ops "${NCU_ROWS[$i]}" --batch "$NCU_BATCH"
        --warmup $((NCU_SKIP + NCU_COUNTS[i])) --iters 1)
    # shellcheck disable=SC2206  # an option and its value, neither with spaces
    NCU_BENCH+=(${NCU_MORE[$i]})
    NCU_CMD=("${NCU_BIN:-ncu}" --kernel-name-base demangled --kernel-name "regex:${NCU_KERNELS[$i]}"
        --launch-skip "$NCU_SKIP" --launch-count "${NCU_COUNTS[$i]}")
    for section in "${NCU_SECTIONS[@]}"; do NCU_CMD+=(--section "$section"); done
    NCU_CMD+=(--metrics "$NCU_METRICS" --force-overwrite --export "$OUT/ncu/${NCU_NAMES[$i]}" "${NCU_BENCH[@]}")
}

# Without a GPU or without ncu: the commands, and without a GPU a check of each that needs none.
ncu_list() {
    local i n=${#NCU_NAMES[@]} rc wrong=()
    for ((i = 0; i < n; i++)); do
        ncu_command "$i"
        echo "  would run: $(quoted "${NCU_CMD[@]}" | sed "s|$REPO/||g")"
        # The benchmark checks its options, and that --ops names rows, before it looks for a GPU:
        # exit status 3 (no usable GPU) means the command is right as far as this machine can tell.
        if no_gpu && [[ -x "${NCU_BENCH[0]}" ]]; then
            "${NCU_BENCH[@]}" >"$LOGS/ncu_${NCU_NAMES[$i]}.log" 2>&1
            rc=$?
            if ((rc != 3)); then
                wrong+=("${NCU_NAMES[$i]}")
                echo "  bench_stage${NCU_STAGES[$i]} refused it (exit status $rc):"
                tail -n 3 "$LOGS/ncu_${NCU_NAMES[$i]}.log" | sed 's/^/  | /'
            fi
        fi
    done
    echo "  then, for each: ncu --import ncu/NAME.ncu-rep --page details > ncu/NAME.txt (--csv > ncu/NAME.csv)"
    if ((${#wrong[@]})); then STATUS=FAIL DETAIL="the kernel benchmark refused the command of ${wrong[*]} (above)"
    elif no_gpu; then STATUS=NO-GPU DETAIL="Nsight Compute needs a GPU (the $n commands are above)"
    else STATUS=SKIPPED DETAIL="no ncu (env NCU, PATH, /usr/local/cuda/bin/ncu); the $n commands are above"; fi
}

phase_ncu() {
    local i n=${#NCU_NAMES[@]} name log rc report profiled=0 bytes not_profiled=()
    NCU_BIN=${NCU:-$(command -v ncu 2>/dev/null)}
    [[ -z "$NCU_BIN" && -x /usr/local/cuda/bin/ncu ]] && NCU_BIN=/usr/local/cuda/bin/ncu
    mkdir -p "$OUT/ncu"
    if no_gpu || [[ -z "$NCU_BIN" ]]; then ncu_list; return; fi
    rm -f "$OUT"/ncu/*.ncu-rep "$OUT"/ncu/*.txt "$OUT"/ncu/*.csv  # an earlier run's must not pass for this one's
    for ((i = 0; i < n; i++)); do
        name=${NCU_NAMES[$i]} log="$LOGS/ncu_${NCU_NAMES[$i]}.log" report="$OUT/ncu/${NCU_NAMES[$i]}.ncu-rep"
        ((DEADLINE - SECONDS >= 20)) || { not_profiled+=("$name (no time left)"); continue; }
        ncu_command "$i"
        [[ -x "${NCU_BENCH[0]}" ]] || { not_profiled+=("$name (bench_stage${NCU_STAGES[$i]} not built)"); continue; }
        : >"$log"
        capped "$NCU_TARGET_SECONDS" run "$log" "${NCU_CMD[@]}"
        rc=$?
        if grep -q ERR_NVGPUCTRPERM "$log"; then  # every target would fail the same way
            STATUS=FAIL DETAIL="ncu may not read this GPU's performance counters here (ERR_NVGPUCTRPERM:"
            DETAIL+=" profiling needs an administrator's permission on this machine; logs/ncu_$name.log)"
            return
        fi
        if ((rc != 0)) || [[ ! -f "$report" ]]; then
            grep -q 'No kernels were profiled' "$log" && rc="no kernel matched"
            not_profiled+=("$name ($rc: logs/ncu_$name.log)")
            continue
        fi
        # The details page as ncu prints it (with its rules' advice), and as CSV.
        if ! timeout 120 "$NCU_BIN" --import "$report" --page details >"${report%.ncu-rep}.txt" 2>>"$log" ||
            ! timeout 120 "$NCU_BIN" --import "$report" --page details --csv >"${report%.ncu-rep}.csv" 2>>"$log"; then
            not_profiled+=("$name (its report could not be read: logs/ncu_$name.log)")
            continue
        fi
        profiled=$((profiled + 1))
        echo "  $name: $(tail -n +2 "${report%.ncu-rep}.csv" | cut -d, -f1 | sort -u | wc -l) of ${NCU_COUNTS[$i]} launches profiled"
    done
    bytes=$(cat "$OUT"/ncu/*.ncu-rep 2>/dev/null | wc -c)
    DETAIL="$profiled of $n targets profiled, $((bytes >> 10)) KiB of reports: ncu/NAME.ncu-rep, .txt, .csv"
    ((${#not_profiled[@]} == 0)) || DETAIL+="; not profiled: ${not_profiled[*]}"
    ((${#not_profiled[@]} == 0)) && STATUS=PASS || STATUS=FAIL
}

# --- The quick phase: one command of a 15-minute GPU window ----------------------------------
#
# A GPU machine comes rarely, with 15 minutes of device time in all (its start included) and 10
# minutes a command: in practice one command. Its parts run in their order of value. Of the time
# before the deadline, less QUICK_RESERVE, each part may take the time the parts before it left,
# but at most its share (QUICK_SHARE, in percent of that time: an overrun of one part, a hang,
# leaves the later parts their time); a part still running then is stopped (its whole process
# group) and reports what it finished. The reserve is for stopping it (GRACE), the summary and the
# archive, which are written whatever happened before them. The predicted time of each part, and
# the arithmetic: tests/gpu/README.md, "The 15-minute recipe".
QUICK_PARTS=(build registers tests kernels ladder)
declare -A QUICK_SHARE=([build]=45 [registers]=12 [tests]=65 [kernels]=25 [ladder]=100)
declare -A QUICK_PREDICTED=([build]=60 [registers]=8 [tests]=250 [kernels]=70 [ladder]=90)  # s, H100, 16 cores
QUICK_RESERVE=30

# The stages in the order the quick phase takes them: those never run on a GPU before first.
stages_first() {
    local n
    for n in $STAGES; do [[ $n > 02 ]] && echo "$n"; done
    for n in $STAGES; do [[ $n > 02 ]] || echo "$n"; done
}

# A line of the summary for a part; shown, and added to summary.txt at once, so that a run cut
# off by something stronger than the deadline still leaves what it learnt.
part_line() {  # name status seconds detail
    local line
    line=$(printf '  %-9s %-7s %5s s (predicted %3s)  %s' "$1" "$2" "$3" "${QUICK_PREDICTED[$1]}" "$4")
    echo "--$line"
    echo "$line" >>"$OUT/summary.txt"
}

quick_build() {
    local log="$LOGS/build.log" targets=(bench_ceilings gpt_init gpt_prepare gpt_launch) n shards arch
    configure "$log" "$BUILD" all || { DETAIL="configure failed (logs/build.log)"; return; }
    local configured
    configured=$(configured_stages "$BUILD")
    for n in $(stages_first); do
        [[ " $configured " == *" $n "* ]] && targets+=("test_stage$n" "train_$n" "bench_stage$n")
    done
    # -k 0: a stage that does not build leaves the others to be built, tested and measured.
    run "$log" cmake --build "$BUILD" -j "$JOBS" --target "${targets[@]}" -- -k 0
    local built=$?
    ((built == 124)) && { DETAIL="the build did not finish (logs/build.log)"; return; }
    run "$log" cmake --build "$BUILD" --target data || { DETAIL="no default corpus (logs/build.log)"; return; }
    shards=$(ls "$REPO"/data/brown/*_train_*.bin 2>/dev/null | wc -l)
    arch=$(sed -n 's/^CMAKE_CUDA_ARCHITECTURES:[A-Z]*=//p' "$BUILD/CMakeCache.txt")
    local missing=()
    for n in $(stages_first); do [[ -x "$BUILD/stages/test_stage$n" ]] || missing+=("$n"); done
    if ((built == 0 && ${#missing[@]} == 0)); then
        STATUS=PASS DETAIL="stages $STAGES built for sm_$arch; $shards train shard(s)"
    else
        DETAIL="not built: stage(s) ${missing[*]}"
        [[ "$configured" == "$STAGES" ]] || DETAIL+=" (configured: $configured; logs/build.log says why)"
        ((built == 0)) || DETAIL+=" (the build failed: logs/build.log)"
        DETAIL+="; the parts below run what was built"
    fi
}

# The register check (tests/gpu/register_check.py): a report, never a reason to stop. It needs
# nvcc only, so it runs without a GPU too, and CI fails on a spill.
quick_registers() {
    local log="$LOGS/registers.log"
    : >"$log"
    run "$log" ctest --test-dir "$BUILD" -L '^registers$' -j 4 -V --timeout 120 --no-tests=error
    local rc=$? failed
    # The margins of the kernels that passed; registers.spill_is_found passes when its check fails.
    REGISTER_LINES=$(grep -oE 'registers: [0-9]+ kernels? on .*least margin.*' "$log")
    failed=$(sed -n '/The following tests FAILED/,$p' "$log" | grep -oE 'registers\.[a-z0-9_]+' | paste -sd ' ')
    if ((rc == 0)); then STATUS=PASS; else STATUS=FAIL; fi
    DETAIL=$(grep -oE 'least margin [0-9]+ .*$' <<<"$REGISTER_LINES" | paste -sd ';' | sed 's/;/; /g')
    [[ -n "$DETAIL" ]] || DETAIL="no margins"
    ((rc == 0)) || DETAIL="failed: ${failed:-see logs/registers.log} (logs/registers.log); $DETAIL"
}

quick_tests() {
    local plan="$OUT/tests_plan.json" i count spec name logs=() isolated=1
    : >"$LOGS/tests_plan.log"
    rm -f "$plan"  # an earlier run's must not stand in for this one's
    SHOW=1 run "$LOGS/tests_plan.log" "$PY" "$REPO/tests/gpu/ctest_plan.py" plan --build "$BUILD" --out "$plan" ||
        isolated=0
    [[ -f "$plan" ]] || { DETAIL="no plan of the tests (logs/tests_plan.log)"; return; }
    if no_gpu; then
        STATUS=NO-GPU DETAIL="needs a GPU; the plan is above (logs/tests_plan.log)"
        ((isolated)) || STATUS=FAIL DETAIL="the GPU tests are not isolated (logs/tests_plan.log)"
        return
    fi
    count=$("$PY" -c 'import json, sys; print(len(json.load(open(sys.argv[1]))["batches"]))' "$plan")
    for ((i = 0; i < count; i++)); do
        name=$("$PY" -c 'import json, sys; print(json.load(open(sys.argv[1]))["batches"][int(sys.argv[2])]["name"])' "$plan" "$i")
        spec=$("$PY" -c 'import json, sys; print(",".join(["0,0,0"] + [str(n) for n in
               json.load(open(sys.argv[1]))["batches"][int(sys.argv[2])]["numbers"]]))' "$plan" "$i")
        ((DEADLINE - SECONDS >= 10)) || break
        echo "  batch $((i + 1)) of $count: $name"
        logs+=("$LOGS/tests_$((i + 1)).log")
        : >"$LOGS/tests_$((i + 1)).log"  # an earlier run's results into the same --out must not count
        # The cores shared among the TEST_JOBS tests: each test's CPU reference gets its part.
        OMP_NUM_THREADS=$(((JOBS + TEST_JOBS - 1) / TEST_JOBS)) run_ctest "$LOGS/tests_$((i + 1)).log" "$BUILD" \
            -I "$spec" --timeout 240
    done
    local args=() l
    for l in "${logs[@]}"; do args+=(--log "$l"); done
    "$PY" "$REPO/tests/gpu/ctest_plan.py" report --plan "$plan" "${args[@]}" >"$LOGS/tests_report.log" 2>&1
    local rc=$?
    sed 's/^/  /' "$LOGS/tests_report.log"
    TEST_LINES=$(grep '^stage ' "$LOGS/tests_report.log")
    DETAIL=$(sed -n 's/^tests: //p' "$LOGS/tests_report.log")
    [[ -n "$DETAIL" ]] || DETAIL="no report (logs/tests_report.log)"
    ((isolated)) || DETAIL+="; the GPU tests are not isolated (logs/tests_plan.log)"
    ((rc == 0 && isolated)) && STATUS=PASS || STATUS=FAIL
}

quick_kernels() {
    local n exe rc measured=0 bad=0 names=()
    mkdir -p "$OUT/kernels"
    if no_gpu; then
        for n in $(stages_first); do echo "  would run: bench_stage$n --json kernels/stage$n.json"; done
        (cd "$REPO" && SHOW=1 run "$LOGS/attention.log" "$PY" tests/bench/attention.py --build "$BUILD" \
            --out "$OUT/attention" --stages "$(attention_stages)" --dry-run >/dev/null)
        STATUS=NO-GPU DETAIL="bench_stageNN and attention.py need a GPU (the commands are above)"
        return
    fi
    rm -f "$OUT"/kernels/stage[0-9][0-9].json  # an earlier run's must not join this run's figures
    for n in $(stages_first); do
        ((DEADLINE - SECONDS >= 10)) || break
        exe="$BUILD/stages/bench_stage$n"
        [[ -x "$exe" ]] || { bad=$((bad + 1)); names+=("$n not built"); continue; }
        capped 120 run "$LOGS/kernels_stage$n.log" "$exe" --json "$OUT/kernels/stage$n.json"
        rc=$?
        ((rc == 0)) && measured=$((measured + 1)) || { bad=$((bad + 1)); names+=("$n exit $rc"); }
    done
    DETAIL="bench_stageNN: $measured of $(wc -w <<<"$STAGES") stages measured"
    ((bad == 0)) || DETAIL+=" (${names[*]})"
    if ((DEADLINE - SECONDS >= 20)); then
        if (cd "$REPO" && run "$LOGS/attention.log" "$PY" tests/bench/attention.py --build "$BUILD" \
            --out "$OUT/attention" --stages "$(attention_stages)"); then
            DETAIL+="; attention.py done"
        else
            bad=$((bad + 1)) DETAIL+="; attention.py failed or was stopped (logs/attention.log)"
        fi
    else
        bad=$((bad + 1)) DETAIL+="; attention.py not run (no time left)"
    fi
    # Stage 00's row kernels beside their first versions (a measurement the chapters wait for).
    if [[ " $STAGES " == *" 00 "* ]] && ((DEADLINE - SECONDS >= 40)); then
        DETAIL+=$(first_versions_bench 00 30) || bad=$((bad + 1))
    fi
    # The figures from what was measured (they fail nothing).
    if ((measured > 0 && DEADLINE - SECONDS >= 10)); then
        (cd "$REPO" && run "$LOGS/step_breakdown.log" "$PY" tests/bench/step_breakdown.py \
            --out "$OUT/kernels/step_breakdown.svg" "$OUT"/kernels/stage[0-9][0-9].json) >/dev/null
        (cd "$REPO" && run "$LOGS/roofline.log" "$PY" tests/bench/roofline.py \
            --out "$OUT/kernels/roofline.svg" "$OUT"/kernels/stage[0-9][0-9].json) >/dev/null
    fi
    ((bad == 0)) && STATUS=PASS || STATUS=FAIL
}


# The PyTorch entries the quick ladder may take, most wanted first (the counterparts of stages 05
# and 04, where the goal is measured, then 03's and the older ones), with the seconds each took in
# the ladder of 2026-11-23 (H100, 10 steps; torch.compile's most of the first two). An entry is
# taken only if it fits in what is left after the C++ entries: one cut off midway measures nothing.
QUICK_TORCH=(pad compile sdpa bf16 tf32 fp32)
declare -A QUICK_TORCH_SECONDS=([pad]=74 [compile]=78 [sdpa]=36 [bf16]=35 [tf32]=37 [fp32]=38)
QUICK_CPP_SECONDS=50  # gpt_init, bench_ceilings and seven C++ entries of 8 steps (predicted)

quick_ladder() {
    local steps=${STEPS:-8} left=$((DEADLINE - SECONDS)) key spare torch=() skipped=()
    if ((left < 30)); then STATUS=NOT-RUN DETAIL="less than 30 s left"; return; fi
    spare=$((left - QUICK_CPP_SECONDS - 15))
    for key in "${QUICK_TORCH[@]}"; do
        if ((QUICK_TORCH_SECONDS[$key] + 10 <= spare)); then
            torch+=("$key") spare=$((spare - QUICK_TORCH_SECONDS[$key] - 10))
        else
            skipped+=("$key")
        fi
    done
    local torch_list
    torch_list=$(IFS=,; echo "${torch[*]:-none}")
    # shellcheck disable=SC2207  # the arguments hold no spaces
    local args=($(ladder_args ladder) --steps "$steps" --skip $((steps * 3 / 8)) --batch "$BATCH"
        --order newest-first --torch "$torch_list" --timeout 150 --grace 2)
    rm -f "$OUT/ladder/results.json"  # an earlier run's must not be reported as this one's
    if no_gpu; then
        (cd "$REPO" && SHOW=1 run "$LOGS/ladder.log" "$PY" "${args[@]}" --budget "$left" --dry-run) &&
            STATUS=NO-GPU DETAIL="the ladder needs a GPU (its plan is above)" || DETAIL="its --dry-run failed"
        return
    fi
    # Its own budget ends it before the part's deadline, with time to write its results.
    (cd "$REPO" && run "$LOGS/ladder.log" "$PY" "${args[@]}" --budget $((left - GRACE - 10)))
    local results="$OUT/ladder/results.json"
    if [[ ! -f "$results" ]]; then DETAIL="no results (logs/ladder.log)"; return; fi
    # PASS: every C++ stage and every PyTorch entry it took measured; the PyTorch entries left out
    # for lack of time are named, for a later window.
    DETAIL=$("$PY" -c '
import json, sys
e = json.load(open(sys.argv[1]))["entries"]
ok = [x["key"] for x in e if x.get("status") == "ok"]
bad = ["%s (%s)" % (x["key"], x.get("status")) for x in e if x.get("status") != "ok"]
line = "%d of %d entries measured" % (len(ok), len(e))
if bad:
    line += "; not measured: " + ", ".join(bad)
print(line)
sys.exit(1 if bad else 0)' "$results")
    local measured=$?
    ((${#skipped[@]} == 0)) || DETAIL+="; left for a later window (no time): PyTorch ${skipped[*]}"
    DETAIL+="; ladder/results.md"
    ((measured == 0)) && STATUS=PASS || STATUS=FAIL
}

# capped SECONDS CMD...: CMD (run ...) with the deadline brought forward to SECONDS from now, if
# that is sooner: one command that hangs does not take the whole part.
capped() {
    local DEADLINE=$((SECONDS + $1 < DEADLINE ? SECONDS + $1 : DEADLINE))
    shift
    "$@"
}

# A stand-in for a part (the self-test, tests/gpu/quick_selftest.sh): GPU_CHECK_STAND_INS=DIR
# runs DIR/<part> instead, under the same deadline; its last line of output is the detail.
quick_stand_in() {
    local log="$LOGS/$1.log" rc
    run "$log" "$GPU_CHECK_STAND_INS/$1"
    rc=$?
    DETAIL=$(grep -v '^  ' "$log" | tail -n 1)  # its own last line, not run's
    ((rc == 0)) && STATUS=PASS || STATUS=FAIL
}

phase_quick() {
    local end=$DEADLINE part start failed=0 nogpu=0 usable share
    usable=$((end - SECONDS - QUICK_RESERVE))
    GRACE=5
    REGISTER_LINES="" TEST_LINES=""
    for part in "${QUICK_PARTS[@]}"; do
        start=$SECONDS STATUS=FAIL DETAIL=""
        share=$((start + usable * QUICK_SHARE[$part] / 100))
        DEADLINE=$((end - QUICK_RESERVE < share ? end - QUICK_RESERVE : share))
        echo; echo "=== quick: $part ($(date +%H:%M:%S), $((DEADLINE - SECONDS)) s left)"
        if stopped; then
            STATUS=NOT-RUN DETAIL="the check was stopped by $(stopped_by) before it"
        elif ((DEADLINE - SECONDS < 3)); then
            STATUS=NOT-RUN DETAIL="no time left before the deadline"
        elif [[ -n "${GPU_CHECK_STAND_INS:-}" ]]; then
            quick_stand_in "$part"
        else
            "quick_$part"
        fi
        if [[ $STATUS != NOT-RUN ]] && stopped; then STATUS=FAIL DETAIL="stopped by $(stopped_by); $DETAIL"
        elif ((SECONDS >= DEADLINE)); then STATUS=FAIL DETAIL="stopped at its time limit; $DETAIL"; fi
        [[ $STATUS == PASS ]] || failed=$((failed + 1))
        [[ $STATUS == NO-GPU ]] && nogpu=$((nogpu + 1))
        part_line "$part" "$STATUS" $((SECONDS - start)) "$DETAIL"
        if [[ $part == registers && -n "$REGISTER_LINES" ]]; then
            sed 's/^/               /' <<<"$REGISTER_LINES" | tee -a "$OUT/summary.txt"
        fi
        if [[ $part == tests && -n "$TEST_LINES" ]]; then
            sed 's/^/               /' <<<"$TEST_LINES" | tee -a "$OUT/summary.txt"
        fi
    done
    DEADLINE=$end
    local left_out="left out for a longer GPU window: the sanitizer, workshop, curve and ncu phases, the kernels phase's PyTorch profile"
    echo "  $left_out" | tee -a "$OUT/summary.txt"
    if ((failed == 0)); then STATUS=PASS DETAIL="every part passed"
    elif no_gpu && ((failed == nogpu)); then STATUS=NO-GPU DETAIL="built and planned; the other parts need a GPU"
    else STATUS=FAIL DETAIL="$failed of ${#QUICK_PARTS[@]} parts did not pass"; fi
}

# --- Main -------------------------------------------------------------------------------------

main() {
    local phase start took rows=() failed=0 line
    line="GPU check of $(git -C "$REPO" rev-parse --short HEAD 2>/dev/null || echo '?'), $(date '+%Y-%m-%d %H:%M %Z')"
    line+=", GPU: ${GPU:-none (nvidia-smi sees no device)}"
    echo "$line"
    [[ -f "$OUT/summary.txt" ]] || echo "$line" >"$OUT/summary.txt"
    no_gpu && echo "NO GPU: the phases build what they can and report NO-GPU where a GPU is needed."
    for phase in "${RUN[@]}"; do
        start=$SECONDS DEADLINE=$((SECONDS + ${BUDGET_ALL:-${BUDGET[$phase]}})) STATUS=FAIL DETAIL=""
        if stopped; then
            STATUS=NOT-RUN DETAIL="the check was stopped by $(stopped_by) before it"
        else
            echo; echo "=== phase $phase ($(date +%H:%M:%S), budget $((DEADLINE - start)) s)"
            "phase_$phase"
            if stopped; then STATUS=FAIL DETAIL="stopped by $(stopped_by); $DETAIL"
            elif ((SECONDS > DEADLINE)); then STATUS=FAIL DETAIL="over its budget; $DETAIL"; fi
        fi
        took=$((SECONDS - start))
        [[ "$STATUS" == PASS ]] || failed=$((failed + 1))
        line=$(printf '%-10s %-7s %5s s  %s' "$phase" "$STATUS" "$took" "$DETAIL")
        echo "--- $line"
        rows+=("$line")
        echo "$line" >>"$OUT/summary.txt"
        if [[ $phase == workshop && -n "$WORKSHOP_LINES" ]]; then
            printf '%s' "$WORKSHOP_LINES" >>"$OUT/summary.txt"
            rows+=("${WORKSHOP_LINES%$'\n'}")
        fi
    done
    echo; echo "=== summary (also in $OUT/summary.txt)"
    printf '%s\n' "${rows[@]}"
    if stopped; then
        echo "RESULT: STOPPED by $(stopped_by): the lines above and the archive hold what finished" | tee -a "$OUT/summary.txt"
        [[ $(stopped_by) == SIGINT ]] && return 130 || return 143
    fi
    ((failed == 0)) && echo "RESULT: PASS" || echo "RESULT: FAIL ($failed of ${#RUN[@]} phase(s) did not pass)"
    ((failed == 0))
}

# Every log and result, without checkpoints and token files, in one archive that travels.
archive() {
    # Written beside, then moved: an archive inside --out must not pack itself.
    local tmp bytes without=() note=""
    tmp=$(mktemp "${TMPDIR:-/tmp}/gpu_check.XXXXXX.tar.gz") || return 1
    while true; do
        tar -czf "$tmp" -C "$OUT" --exclude='*.ckpt' --exclude='*.bin' --exclude="$(basename "$ARCHIVE")" \
            "${without[@]}" . || { rm -f "$tmp"; return 1; }
        bytes=$(stat -c %s "$tmp")
        # Nsight Compute's reports (the ncu phase) are the largest results and hardly compress: where
        # they would take the archive past its limit, they stay in --out, and their pages travel.
        if ((bytes <= 16 << 20 || ${#without[@]} > 0)) || ! compgen -G "$OUT/ncu/*.ncu-rep" >/dev/null; then break; fi
        without=(--exclude='*.ncu-rep')
        note=", without ncu/*.ncu-rep, which would have taken it past 16 MiB (they stay in $OUT/ncu/; their .txt and .csv are in it)"
    done
    mv -f "$tmp" "$ARCHIVE" || { rm -f "$tmp"; return 1; }
    echo "archive: $ARCHIVE, $((bytes >> 10)) KiB$note"
    ((bytes <= 16 << 20)) || { echo "error: the archive is larger than 16 MiB"; return 1; }
}

# main runs in this shell (not in a pipeline's subshell), so that a signal sent to the script
# alone reaches its traps; tee ignores INT and TERM, so that the log outlives a Ctrl-C.
catch_signals
main > >(trap '' INT TERM; exec tee -a "$OUT/gpu_check.log") 2>&1
rc=$?
wait "$!" 2>/dev/null  # tee's last lines before the archive's
if [[ -n "$ARCHIVE" ]]; then archive || rc=1; fi
exit "$rc"

#!/usr/bin/env bash
# The GPU check: one command that establishes, on a machine with a GPU, that every
# stage is correct and how fast it is. CI has no GPU, so this is where GPU code is really tested.
#
#   a. configure the `all` preset for the local GPU and build it with all cores
#   b. make sure data/ holds the default corpus (the `data` target)
#   c. every GPU test with REQUIRE_GPU=1 (a missing GPU fails instead of skipping), and the CPU
#      reference tests when the configured Python can import torch
#   d. the kernel tests (Kernels.*) of every stage under compute-sanitizer memcheck and racecheck
#   e. the workshop check: in each stage's workshop build every exercise's tests fail, and the
#      stage's other GPU tests pass
#   f. the benchmark ladder (tests/bench/ladder.py)
#   g. a short summary table, printed last
#
# It never stops at the first failure: every step runs, and the exit status is non-zero when any
# step failed (or could not run for want of a GPU). Everything it prints, and the full output of
# every command, goes to the output directory. See tests/bench/README.md.

set -uo pipefail  # deliberately not -e: a failing step is recorded, and the next one runs

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD="$REPO/build/all"
ORIGINAL_ARGS="$*"

usage() {
    cat <<'EOF'
usage: tests/gpu_check.sh [options]

The GPU check: build every stage for the local GPU, run every GPU test with REQUIRE_GPU=1, the
kernel tests under compute-sanitizer (memcheck, racecheck), the workshop check and the benchmark
ladder, then print a summary table. Meant to finish within ten minutes on one H100.

options:
  --out DIR          output directory: gpu_check.log, logs/, ladder/ [build/gpu_check]
  --gtest-src DIR    GoogleTest sources for a machine without internet (also: env GTEST_SRC;
                     /usr/src/googletest is used when it exists)
  --python PY        Python with CUDA PyTorch, for the ladder's PyTorch entries [env PYTHON or python3]
  --jobs N           parallel build jobs [all cores]
  --full             a longer ladder (30 steps, the ladder's defaults) instead of the quick one (10)
  --steps N          ladder steps per entry (overrides the above)
  --batch B          ladder batch size [16]
  --no-sanitizer     skip step d
  --no-workshop      skip step e
  --no-ladder        skip step f
  --make-d12-curve   instead of the check: build, make the corpus, and write the PyTorch reference
                     curve of GPT-2 124M on the default corpus (fp32, manual attention; the ladder's
                     stage-00 settings) to tests/reference/curves/d12_brown_fp32.json
  -h, --help         this text

Exit status: 0 when every step passed (or was skipped on request), 1 otherwise.
EOF
}

# ---------------------------------------------------------------------------------------------
# Options

OUT="$REPO/build/gpu_check"
GTEST_DIR="${GTEST_SRC:-}"
PYTHON_BIN="${PYTHON:-python3}"
JOBS=$(nproc 2>/dev/null || echo 4)
FULL=0
LADDER_STEPS=""
LADDER_BATCH=16
DO_SANITIZER=1
DO_WORKSHOP=1
DO_LADDER=1
MAKE_CURVE=0

die_usage() {
    echo "gpu_check.sh: error: $1 (see --help)" >&2
    exit 2
}
need_value() { [[ $# -ge 2 && -n "$2" ]] || die_usage "option $1 needs a value"; }

while [[ $# -gt 0 ]]; do
    case "$1" in
        --out) need_value "$@"; OUT=$2; shift 2 ;;
        --gtest-src) need_value "$@"; GTEST_DIR=$2; shift 2 ;;
        --python) need_value "$@"; PYTHON_BIN=$2; shift 2 ;;
        --jobs) need_value "$@"; JOBS=$2; shift 2 ;;
        --steps) need_value "$@"; LADDER_STEPS=$2; shift 2 ;;
        --batch) need_value "$@"; LADDER_BATCH=$2; shift 2 ;;
        --full) FULL=1; shift ;;
        --no-sanitizer) DO_SANITIZER=0; shift ;;
        --no-workshop) DO_WORKSHOP=0; shift ;;
        --no-ladder) DO_LADDER=0; shift ;;
        --make-d12-curve) MAKE_CURVE=1; shift ;;
        -h | --help) usage; exit 0 ;;
        *) die_usage "unknown option '$1'" ;;
    esac
done
for n in "$JOBS" "$LADDER_BATCH" ${LADDER_STEPS:+"$LADDER_STEPS"}; do
    [[ "$n" =~ ^[1-9][0-9]*$ ]] || die_usage "'$n' is not a positive whole number"
done
if [[ -n "$GTEST_DIR" && ! -f "$GTEST_DIR/CMakeLists.txt" ]]; then
    die_usage "--gtest-src/GTEST_SRC '$GTEST_DIR' is not a GoogleTest source directory (no CMakeLists.txt)"
fi
if [[ -z "$GTEST_DIR" && -f /usr/src/googletest/CMakeLists.txt ]]; then
    GTEST_DIR=/usr/src/googletest
fi
# The quick ladder keeps the whole check inside ten minutes; --full uses the ladder's defaults.
if [[ -z "$LADDER_STEPS" ]]; then
    if ((FULL)); then LADDER_STEPS=30; else LADDER_STEPS=10; fi
fi
LADDER_SKIP=$((LADDER_STEPS >= 20 ? 5 : LADDER_STEPS / 3))

mkdir -p "$OUT/logs" || die_usage "cannot create --out $OUT"
OUT=$(cd "$OUT" && pwd)
LOGS="$OUT/logs"

# ---------------------------------------------------------------------------------------------
# Helpers

# The result of every step, for the summary: name, status, seconds, details.
STEP_NAMES=()
STEP_STATUS=()
STEP_TIME=()
STEP_DETAIL=()
STEP_START=0

# PASS, FAIL, SKIP (on request) or NO-GPU (needs a GPU this machine does not have).
begin_step() {
    STEP_START=$SECONDS
    echo
    echo "=== $1 ($(date +%H:%M:%S))"
}
end_step() {  # name status detail
    local took=$((SECONDS - STEP_START))
    STEP_NAMES+=("$1")
    STEP_STATUS+=("$2")
    STEP_TIME+=("$took")
    STEP_DETAIL+=("$3")
    echo "--- $1: $2 ($took s) $3"
}

skipped_step() {  # name option
    begin_step "$1"
    end_step "$1" SKIP "$2"
}

# run_logged LOG CMD...: runs a command with its output appended to LOG, shows the command and,
# when it fails, the end of its output; returns its exit status.
run_logged() {
    local log=$1
    shift
    echo "  \$ $*" | sed "s|$REPO/||g"
    echo "\$ $*" >>"$log"
    "$@" >>"$log" 2>&1
    local rc=$?
    if ((rc != 0)); then
        echo "  exit status $rc; the end of $log:"
        tail -n 15 "$log" | sed 's/^/  | /'
    fi
    return "$rc"
}

# Background jobs: start_job NAME CMD... runs CMD in the background with its output in
# $LOGS/NAME.log and its exit status in $LOGS/NAME.rc, and adds its process id to JOB_PIDS.
# pool_start does the same with at most POOL_MAX of its own jobs running at once.
JOB_PIDS=()
start_job() {
    local name=$1
    shift
    rm -f "$LOGS/$name.rc"
    ("$@" >"$LOGS/$name.log" 2>&1; echo $? >"$LOGS/$name.rc") &
    JOB_PIDS+=($!)
}
job_rc() { cat "$LOGS/$1.rc" 2>/dev/null || echo 255; }
running() {  # how many of the given process ids still run
    local n=0 pid
    for pid in "$@"; do kill -0 "$pid" 2>/dev/null && n=$((n + 1)); done
    echo "$n"
}
POOL_MAX=4
POOL_PIDS=()
pool_start() {
    while (($(running "${POOL_PIDS[@]}") >= POOL_MAX)); do sleep 1; done
    start_job "$@"
    POOL_PIDS+=("${JOB_PIDS[-1]}")
}
pool_wait() {
    local pid
    for pid in "${POOL_PIDS[@]}"; do wait "$pid" 2>/dev/null; done
    POOL_PIDS=()
}

# ctest's "N% tests passed, F tests failed out of T" line -> "T F"; "0 0" when absent.
ctest_counts() {
    local line
    line=$(grep -E '[0-9]+% tests passed, [0-9]+ tests? failed out of [0-9]+' "$1" | tail -n 1)
    if [[ "$line" =~ ([0-9]+)\ tests?\ failed\ out\ of\ ([0-9]+) ]]; then
        echo "${BASH_REMATCH[2]} ${BASH_REMATCH[1]}"
    else
        echo "0 0"
    fi
}
ctest_skipped() { grep -c '(Skipped)' "$1" 2>/dev/null || true; }
# Reads a ctest log into CT_TOTAL, CT_FAILED, CT_SKIPPED and CT_DETAIL ("P passed, F failed, ...").
ctest_summary() {
    local counts
    counts=$(ctest_counts "$1")
    CT_TOTAL=${counts% *}
    CT_FAILED=${counts#* }
    CT_SKIPPED=$(ctest_skipped "$1")
    CT_DETAIL="$((CT_TOTAL - CT_FAILED - CT_SKIPPED)) passed, $CT_FAILED failed, $CT_SKIPPED skipped of $CT_TOTAL"
}

# The stages built in $BUILD: "00 01 ...", from the trainers' file names.
built_stages() {
    local f
    for f in "$BUILD"/stages/train_[0-9][0-9]_*; do
        [[ -x "$f" ]] && basename "$f" | cut -c7-8
    done | sort -u | tr '\n' ' '
}

# A variable of the all preset's CMake cache (empty when absent).
cache_var() { sed -n "s/^$1:[A-Z]*=//p" "$BUILD/CMakeCache.txt" 2>/dev/null | head -n 1; }
data_dir() {
    local d
    d=$(cache_var GPT_DATA_DIR)
    echo "${d:-$REPO/data}"
}

has_preset() { (cd "$REPO" && cmake --list-presets 2>/dev/null) | grep -q "\"$1\""; }

# ---------------------------------------------------------------------------------------------
# The machine

GPU_NAME=""
GPU_CAP=""
DRIVER=""
detect_gpu() {
    if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
        local line
        line=$(nvidia-smi --query-gpu=name,driver_version,compute_cap --format=csv,noheader 2>/dev/null | head -n 1)
        GPU_NAME=$(echo "$line" | cut -d, -f1 | sed 's/^ *//;s/ *$//')
        DRIVER=$(echo "$line" | cut -d, -f2 | sed 's/^ *//;s/ *$//')
        GPU_CAP=$(echo "$line" | cut -d, -f3 | sed 's/^ *//;s/ *$//')
    fi
}

find_sanitizer() {
    local c
    for c in "$(command -v compute-sanitizer 2>/dev/null)" "${CUDA_HOME:-/usr/local/cuda}/bin/compute-sanitizer" \
        /usr/local/cuda/bin/compute-sanitizer /usr/local/cuda/compute-sanitizer/compute-sanitizer; do
        if [[ -n "$c" && -x "$c" ]]; then
            echo "$c"
            return
        fi
    done
}

# ---------------------------------------------------------------------------------------------
# The steps

step_build() {
    begin_step "a. configure + build (preset all)"
    # --no-warn-unused-cli: an installed GoogleTest package leaves the source override unused.
    local log="$LOGS/a_build.log" args=(--no-warn-unused-cli --preset all)
    : >"$log"
    # Forget a cached architecture list so that cuda.cmake detects this machine's GPU again.
    args+=(-UCMAKE_CUDA_ARCHITECTURES)
    [[ -n "$GTEST_DIR" ]] && args+=("-DFETCHCONTENT_SOURCE_DIR_GOOGLETEST=$GTEST_DIR")
    if ! (cd "$REPO" && run_logged "$log" cmake "${args[@]}"); then
        end_step "a. configure + build" FAIL "configure failed (log: $log)"
        return 1
    fi
    # -k 0: build everything that can be built, so that the later steps test what did build.
    if ! (cd "$REPO" && run_logged "$log" cmake --build --preset all -j "$JOBS" -- -k 0); then
        end_step "a. configure + build" FAIL "build failed; stages built: $(built_stages)(log: $log)"
        return 1
    fi
    local arch
    arch=$(cache_var CMAKE_CUDA_ARCHITECTURES)
    end_step "a. configure + build" PASS "stages $(built_stages)built for sm_${arch:-?}"
}

step_data() {
    begin_step "b. default corpus (data target)"
    local log="$LOGS/b_data.log"
    : >"$log"
    if ! (cd "$REPO" && run_logged "$log" cmake --build --preset all --target data); then
        end_step "b. default corpus" FAIL "the data target failed (log: $log)"
        return 1
    fi
    local shards brown
    brown="$(data_dir)/brown"
    shards=$(find "$brown" -maxdepth 1 -name '*_train_*.bin' 2>/dev/null | wc -l)
    if ((shards == 0)); then
        end_step "b. default corpus" FAIL "no train shards in $brown"
        return 1
    fi
    end_step "b. default corpus" PASS "${brown#"$REPO"/}: $(du -sh "$brown" | cut -f1), $shards train shard(s)"
}

step_gpu_tests() {
    begin_step "c. GPU tests (REQUIRE_GPU=1 ctest -L gpu)"
    local log="$LOGS/c_gpu_tests.log"
    : >"$log"
    if [[ -z "$GPU_NAME" ]]; then
        end_step "c. GPU tests" NO-GPU "not run: no GPU"
        return 1
    fi
    (cd "$REPO" && REQUIRE_GPU=1 run_logged "$log" ctest --preset all -L gpu)
    local rc=$?
    ctest_summary "$log"
    local detail=$CT_DETAIL
    if ((rc == 0 && CT_TOTAL > 0 && CT_SKIPPED == 0)); then
        end_step "c. GPU tests" PASS "$detail"
    else
        end_step "c. GPU tests" FAIL "$detail (log: $log)"
    fi
}

step_reference_tests() {
    begin_step "c. CPU reference tests (ctest -L reference)"
    local log="$LOGS/c_reference_tests.log" py
    : >"$log"
    # The tests run the Python that configure chose (GPT_PYTHON in the cache).
    py=$(cache_var GPT_PYTHON)
    if [[ -z "$py" ]] || ! "$py" -c "import torch" >/dev/null 2>&1; then
        end_step "c. reference tests" SKIP "the configured Python (${py:-none}) cannot import torch"
        return 0
    fi
    (cd "$REPO" && run_logged "$log" ctest --preset all -L reference)
    local rc=$?
    ctest_summary "$log"
    local detail=$CT_DETAIL
    if ((rc == 0 && CT_TOTAL > 0)); then
        end_step "c. reference tests" PASS "$detail"
    else
        end_step "c. reference tests" FAIL "$detail (log: $log)"
    fi
}

# One sanitizer run, for the pool: sanitize TOOL EXE
# shellcheck disable=SC2317  # called through pool_start
sanitize() {
    local tool=$1 exe=$2
    echo "\$ $SANITIZER --tool $tool --error-exitcode 99 --print-limit 50 $exe --gtest_filter=Kernels.*"
    # The same environment CTest gives the tests; REQUIRE_GPU=1 so that nothing skips silently.
    env REQUIRE_GPU=1 GPT_DATA_DIR="$(data_dir)" GPT_TEST_OUT="$BUILD/test_outputs" GPT_SOURCE_DIR="$REPO" \
        timeout 900 "$SANITIZER" --tool "$tool" --error-exitcode 99 --print-limit 50 \
        "$exe" --gtest_filter='Kernels.*'
}

# "errors tests-run tests-failed" of one sanitizer log.
sanitizer_counts() {
    local log=$1 errors ran failed line
    # racecheck: "RACECHECK SUMMARY: 3 hazards displayed (2 errors, 1 warnings)"; memcheck and
    # the others: "ERROR SUMMARY: 0 errors".
    line=$(grep -E 'RACECHECK SUMMARY' "$log" | tail -n 1)
    if [[ "$line" =~ \(([0-9]+)\ errors? ]]; then
        errors=${BASH_REMATCH[1]}
    else
        line=$(grep -E 'ERROR SUMMARY: [0-9]+ error' "$log" | tail -n 1)
        [[ "$line" =~ ERROR\ SUMMARY:\ ([0-9]+) ]] && errors=${BASH_REMATCH[1]} || errors="?"
    fi
    line=$(grep -E '^\[==========\] [0-9]+ tests? from .* ran' "$log" | tail -n 1)
    [[ "$line" =~ \]\ ([0-9]+)\ test ]] && ran=${BASH_REMATCH[1]} || ran=0
    line=$(grep -E '^\[  FAILED  \] [0-9]+ tests?, listed below' "$log" | tail -n 1)
    [[ "$line" =~ \]\ ([0-9]+)\ test ]] && failed=${BASH_REMATCH[1]} || failed=0
    echo "$errors $ran $failed"
}

SANITIZER_TABLE=""
step_sanitizer() {
    begin_step "d. compute-sanitizer memcheck + racecheck on Kernels.*"
    if [[ -z "$GPU_NAME" ]]; then
        end_step "d. compute-sanitizer" NO-GPU "not run: no GPU"
        return 1
    fi
    SANITIZER=$(find_sanitizer)
    if [[ -z "$SANITIZER" ]]; then
        end_step "d. compute-sanitizer" FAIL "compute-sanitizer not found (PATH, \$CUDA_HOME/bin, /usr/local/cuda/bin)"
        return 1
    fi
    local exe stage tool exes=()
    for exe in "$BUILD"/stages/test_stage[0-9][0-9]; do
        [[ -x "$exe" ]] && exes+=("$exe")
    done
    if ((${#exes[@]} == 0)); then
        end_step "d. compute-sanitizer" FAIL "no test_stageNN executables in $BUILD/stages"
        return 1
    fi
    # Several runs share the GPU at once: the kernel tests are small, and the sanitizers' cost
    # is mostly on the CPU.
    for exe in "${exes[@]}"; do
        stage=${exe##*test_stage}
        for tool in memcheck racecheck; do
            echo "  starting $tool on test_stage$stage (log: $LOGS/d_${tool}_$stage.log)"
            pool_start "d_${tool}_$stage" sanitize "$tool" "$exe"
        done
    done
    pool_wait
    local bad=0 total_errors=0 runs=0 rc counts errors ran failed result
    SANITIZER_TABLE=$(printf '    %-6s %-10s %6s %6s  %s' stage tool errors tests result)
    for exe in "${exes[@]}"; do
        stage=${exe##*test_stage}
        for tool in memcheck racecheck; do
            rc=$(job_rc "d_${tool}_$stage")
            counts=$(sanitizer_counts "$LOGS/d_${tool}_$stage.log")
            read -r errors ran failed <<<"$counts"
            runs=$((runs + 1))
            result=PASS
            if [[ "$errors" != 0 || "$rc" != 0 || "$ran" == 0 ]]; then
                bad=$((bad + 1))
                result="FAIL (exit $rc"
                ((failed > 0)) && result+=", $failed tests failed"
                ((ran == 0)) && result+=", no Kernels.* test ran"
                result+=", log: d_${tool}_$stage.log)"
            fi
            [[ "$errors" =~ ^[0-9]+$ ]] && total_errors=$((total_errors + errors))
            SANITIZER_TABLE+=$'\n'$(printf '    %-6s %-10s %6s %6s  %s' "$stage" "$tool" "$errors" "$ran" "$result")
        done
    done
    echo "$SANITIZER_TABLE"
    if ((bad == 0)); then
        end_step "d. compute-sanitizer" PASS "$runs runs, $total_errors errors"
    else
        end_step "d. compute-sanitizer" FAIL "$bad of $runs runs failed, $total_errors errors (logs: $LOGS/d_*.log)"
    fi
}

# Configure and build one workshop preset (for the pool).
# shellcheck disable=SC2317  # called through pool_start
build_workshop() {
    local preset=$1 jobs=$2 args=(--no-warn-unused-cli --preset "$1" -UCMAKE_CUDA_ARCHITECTURES)
    [[ -n "$GTEST_DIR" ]] && args+=("-DFETCHCONTENT_SOURCE_DIR_GOOGLETEST=$GTEST_DIR")
    cd "$REPO" && echo "\$ cmake ${args[*]}" && cmake "${args[@]}" &&
        echo "\$ cmake --build --preset $preset -j $jobs" && cmake --build --preset "$preset" -j "$jobs"
}

# The exercise names marked in a stage's sources (common/cmake/workshop.cmake's markers).
stage_exercises() {
    grep -ho '// EXERCISE BEGIN [A-Za-z0-9_.]*' "$REPO"/stages/"$1"_*/* 2>/dev/null | awk '{print $4}' | sort -u
}

WORKSHOP_TABLE=""
# The workshop builds need only the CPU, while steps c and d need mostly the GPU: they start
# right after step b and build in the background (side by side: each is mostly one or two
# single-file CUDA compiles), and step e waits for them. That keeps the check inside its time.
WORKSHOP_PRESETS=()
WORKSHOP_MISSING=()
WORKSHOP_PIDS=()
start_workshop_builds() {
    local stage preset stages
    stages=$(built_stages)
    for stage in $stages; do
        preset="stage$stage-workshop"
        if has_preset "$preset"; then WORKSHOP_PRESETS+=("$preset"); else WORKSHOP_MISSING+=("$preset"); fi
    done
    ((${#WORKSHOP_PRESETS[@]} > 0)) || return 0
    local jobs=$((JOBS / ${#WORKSHOP_PRESETS[@]} > 2 ? JOBS / ${#WORKSHOP_PRESETS[@]} : 2))
    echo
    for preset in "${WORKSHOP_PRESETS[@]}"; do
        echo "=== e. (background) configure + build $preset -j $jobs (log: $LOGS/e_build_$preset.log)"
        start_job "e_build_$preset" build_workshop "$preset" "$jobs"
        WORKSHOP_PIDS+=("${JOB_PIDS[-1]}")
    done
}

step_workshop() {
    begin_step "e. workshop check (stageNN-workshop presets)"
    local stages stage preset pid missing=("${WORKSHOP_MISSING[@]}")
    stages=$(built_stages)
    if [[ -z "$stages" ]]; then
        end_step "e. workshop check" FAIL "no stage built in $BUILD"
        return 1
    fi
    if (($(running "${WORKSHOP_PIDS[@]}") > 0)); then
        echo "  waiting for the workshop builds started after step b"
    fi
    for pid in "${WORKSHOP_PIDS[@]}"; do wait "$pid" 2>/dev/null; done
    local bad=0 ex_total=0 ex_ok=0 built=0 detail
    WORKSHOP_TABLE=""
    for stage in $stages; do
        preset="stage$stage-workshop"
        if [[ " ${missing[*]} " == *" $preset "* ]]; then
            WORKSHOP_TABLE+=$'\n'"    $stage  FAIL: no preset $preset in CMakePresets.json"
            bad=$((bad + 1))
            continue
        fi
        if [[ "$(job_rc "e_build_$preset")" != 0 ]]; then
            echo "  $preset: build failed; the end of $LOGS/e_build_$preset.log:"
            tail -n 15 "$LOGS/e_build_$preset.log" | sed 's/^/  | /'
            WORKSHOP_TABLE+=$'\n'"    $stage  FAIL: $preset does not build"
            bad=$((bad + 1))
            continue
        fi
        built=$((built + 1))
        [[ -z "$GPU_NAME" ]] && continue
        # Every exercise: all of its tests must fail, with the stub's message naming it.
        local name log counts total failed row="" ok_here=0 n_here=0
        for name in $(stage_exercises "$stage"); do
            n_here=$((n_here + 1))
            log="$LOGS/e_${name}.log"
            : >"$log"
            (cd "$REPO" && REQUIRE_GPU=1 run_logged "$log" ctest --preset "$preset" -L "^${name//./\\.}\$" \
                --timeout 120) >/dev/null
            counts=$(ctest_counts "$log")
            total=${counts% *}
            failed=${counts#* }
            if ((total > 0 && failed == total)) && grep -q "exercise $name is not written yet" "$log"; then
                ok_here=$((ok_here + 1))
                echo "  $name: all $total test(s) fail in the workshop build, as they should"
            else
                bad=$((bad + 1))
                if ((total == 0)); then detail="no test carries the label"
                elif ((failed != total)); then detail="only $failed of $total tests fail"
                else detail="the failure output does not name the exercise"; fi
                echo "  $name: FAIL: $detail (log: $log)"
                row+="; $name: $detail"
            fi
        done
        ex_total=$((ex_total + n_here))
        ex_ok=$((ex_ok + ok_here))
        # Everything else must still pass: a stub must not break a neighbouring test.
        log="$LOGS/e_${preset}_others.log"
        : >"$log"
        local others
        others=$(cd "$REPO" && ctest --preset "$preset" -N -L gpu -LE exercise 2>/dev/null |
            sed -n 's/^Total Tests: *//p')
        local others_state="no other GPU tests"
        if [[ "${others:-0}" -gt 0 ]]; then
            if (cd "$REPO" && REQUIRE_GPU=1 run_logged "$log" ctest --preset "$preset" -L gpu -LE exercise \
                --timeout 300) >/dev/null; then
                others_state="other GPU tests pass ($others)"
            else
                counts=$(ctest_counts "$log")
                others_state="FAIL: ${counts#* } of $others other GPU tests fail (log: $log)"
                bad=$((bad + 1))
            fi
        fi
        echo "  stage $stage: $ok_here/$n_here exercises fail as intended; $others_state"
        WORKSHOP_TABLE+=$'\n'"    $stage  $ok_here/$n_here exercises fail as intended; $others_state$row"
    done
    if [[ -z "$GPU_NAME" ]]; then
        if ((bad == 0)); then
            end_step "e. workshop check" NO-GPU "$built workshop preset(s) build; their tests need a GPU"
        else
            end_step "e. workshop check" FAIL "$bad problem(s); the tests need a GPU"
        fi
        return 1
    fi
    if ((bad == 0)); then
        end_step "e. workshop check" PASS "$ex_ok/$ex_total exercises fail as intended, other tests pass, $built stage(s)"
    else
        end_step "e. workshop check" FAIL "$bad problem(s); $ex_ok/$ex_total exercises fail as intended"
    fi
}

LADDER_TXT=""
step_ladder() {
    begin_step "f. benchmark ladder ($LADDER_STEPS steps, batch $LADDER_BATCH)"
    local log="$LOGS/f_ladder.log" args
    : >"$log"
    args=(tests/bench/ladder.py --build "$BUILD" --data "$(data_dir)/brown" --out "$OUT/ladder" --steps "$LADDER_STEPS"
        --skip "$LADDER_SKIP" --batch "$LADDER_BATCH" --python "$PYTHON_BIN" --timeout 420)
    if [[ -z "$GPU_NAME" ]]; then
        # Show what would run.
        (cd "$REPO" && "$PYTHON_BIN" "${args[@]}" --dry-run) | tee -a "$log" | sed 's/^/  /'
        end_step "f. benchmark ladder" NO-GPU "not run: no GPU (the plan is above)"
        return 1
    fi
    # The ladder prints one line per entry as it goes: show them. Results of an earlier run
    # must not be mistaken for this one's.
    rm -f "$OUT"/ladder/results.*
    echo "  \$ $PYTHON_BIN ${args[*]}" | sed "s|$REPO/||g"
    (cd "$REPO" && "$PYTHON_BIN" "${args[@]}") 2>&1 | tee -a "$log" | sed 's/^/  /'
    local rc=${PIPESTATUS[0]}
    local entries ok
    if [[ -f "$OUT/ladder/results.json" ]]; then
        # A ladder cut short leaves its results.json (written after every entry): render it.
        [[ -f "$OUT/ladder/results.txt" ]] ||
            (cd "$REPO" && "$PYTHON_BIN" tests/bench/ladder.py --results-only "$OUT/ladder/results.json") >>"$log" 2>&1
        LADDER_TXT=$(cat "$OUT/ladder/results.txt" 2>/dev/null)
        read -r ok entries < <("$PYTHON_BIN" -c '
import json, sys
e = json.load(open(sys.argv[1]))["entries"]
print(sum(x.get("status") == "ok" for x in e), len(e))' "$OUT/ladder/results.json" 2>/dev/null || echo "? ?")
    fi
    if ((rc == 0)); then
        end_step "f. benchmark ladder" PASS "${ok:-?}/${entries:-?} entries; results in $OUT/ladder"
    else
        end_step "f. benchmark ladder" FAIL "${ok:-?}/${entries:-?} entries finished (exit $rc; log: $log)"
    fi
}

step_curve() {
    begin_step "PyTorch reference curve: d12 on data/brown, fp32, manual attention"
    local log="$LOGS/curve.log" dest="$REPO/tests/reference/curves/d12_brown_fp32.json"
    : >"$log"
    if [[ -z "$GPU_NAME" ]]; then
        end_step "d12 reference curve" NO-GPU "not run: no GPU"
        return 1
    fi
    local args=(tests/bench/ladder.py --build "$BUILD" --data "$(data_dir)/brown" --out "$OUT/curve"
        --python "$PYTHON_BIN" --make-curve "$dest")
    echo "  \$ $PYTHON_BIN ${args[*]}" | sed "s|$REPO/||g"
    (cd "$REPO" && "$PYTHON_BIN" "${args[@]}") 2>&1 | tee -a "$log" | sed 's/^/  /'
    if ((PIPESTATUS[0] == 0)); then
        end_step "d12 reference curve" PASS "wrote ${dest#"$REPO"/}"
    else
        end_step "d12 reference curve" FAIL "see $log"
    fi
}

# ---------------------------------------------------------------------------------------------
# The summary, printed last

summary() {
    local total=$SECONDS i failed=0 not_run=0 line
    echo
    echo "================================ GPU check summary ================================"
    printf '%-10s %s\n' "GPU" "${GPU_NAME:-none found (nvidia-smi sees no device)}${DRIVER:+ (driver $DRIVER, sm_${GPU_CAP//./})}"
    printf '%-10s %s\n' "date" "$(date '+%Y-%m-%d %H:%M %Z')"
    printf '%-10s %s\n' "commit" "$(git -C "$REPO" rev-parse --short HEAD 2>/dev/null || echo unknown)"
    printf '%-10s %s\n' "command" "tests/gpu_check.sh $ORIGINAL_ARGS"
    echo
    printf '%-42s %-7s %6s  %s\n' "step" "status" "time" "details"
    for i in "${!STEP_NAMES[@]}"; do
        printf '%-42s %-7s %5ss  %s\n' "${STEP_NAMES[$i]}" "${STEP_STATUS[$i]}" "${STEP_TIME[$i]}" "${STEP_DETAIL[$i]}"
        case "${STEP_STATUS[$i]}" in
            FAIL) failed=$((failed + 1)) ;;
            NO-GPU) not_run=$((not_run + 1)) ;;
        esac
    done
    printf '%-42s %-7s %5ss\n' "total" "" "$total"
    if [[ -n "$SANITIZER_TABLE" ]]; then
        echo
        echo "compute-sanitizer on each stage's Kernels.* tests:"
        echo "$SANITIZER_TABLE"
    fi
    if [[ -n "$WORKSHOP_TABLE" ]]; then
        echo
        echo "workshop check per stage:"
        echo "$WORKSHOP_TABLE" | sed '/^$/d'
    fi
    if [[ -n "$LADDER_TXT" ]]; then
        echo
        echo "benchmark ladder ($OUT/ladder/results.md):"
        while IFS= read -r line; do echo "  $line"; done <<<"$LADDER_TXT"
    fi
    echo
    echo "full output: $OUT/gpu_check.log; per-command logs: $LOGS/"
    if ((MAKE_CURVE == 0 && total > 600)); then
        echo "note: the check took $total s, more than the ten minutes it should fit in on an H100"
    fi
    if ((failed == 0 && not_run == 0)); then
        echo "RESULT: PASS"
        return 0
    fi
    if [[ -z "$GPU_NAME" ]]; then
        echo "RESULT: FAIL: no GPU on this machine; $not_run step(s) could not run, $failed failed"
    else
        echo "RESULT: FAIL: $failed step(s) failed, $not_run could not run"
    fi
    return 1
}

main() {
    echo "GPU check of $REPO, $(date '+%Y-%m-%d %H:%M:%S %Z')"
    detect_gpu
    if [[ -n "$GPU_NAME" ]]; then
        echo "GPU: $GPU_NAME (driver $DRIVER, compute capability $GPU_CAP)"
    else
        echo "NO GPU: nvidia-smi finds no device. The build steps run; the GPU tests, the sanitizer runs,"
        echo "the workshop tests and the ladder are reported NO-GPU, and the check cannot pass here."
    fi
    echo "tools: $(cmake --version | head -n 1), ninja $(ninja --version 2>/dev/null || echo missing)," \
        "nvcc $(nvcc --version 2>/dev/null | sed -n 's/.*release \([0-9.]*\).*/\1/p' || true)," \
        "torch $("$PYTHON_BIN" -c 'import torch; print(torch.__version__, "cuda" if torch.cuda.is_available() else "no cuda")' 2>/dev/null || echo 'not importable by '"$PYTHON_BIN")"
    echo "GoogleTest sources: ${GTEST_DIR:-none given (an installed package, or a download)}"
    echo "output: $OUT"

    # Every step runs even when an earlier one failed: a failed build still leaves the stages
    # that did build to test, and each step reports what it could not do.
    step_build
    step_data
    ((DO_WORKSHOP && !MAKE_CURVE)) && start_workshop_builds
    if ((MAKE_CURVE)); then
        step_curve
    else
        step_gpu_tests
        step_reference_tests
        if ((DO_SANITIZER)); then step_sanitizer; else skipped_step "d. compute-sanitizer" --no-sanitizer; fi
        if ((DO_WORKSHOP)); then step_workshop; else skipped_step "e. workshop check" --no-workshop; fi
        if ((DO_LADDER)); then step_ladder; else skipped_step "f. benchmark ladder" --no-ladder; fi
    fi
    summary
}

main 2>&1 | tee "$OUT/gpu_check.log"
exit "${PIPESTATUS[0]}"

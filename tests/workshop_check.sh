#!/usr/bin/env bash
# The room check of a workshop (docs/workshop.md): for every exercise marked in stages/ (or the
# ones named), brings the stage's workshop build up to date, runs the exercise's tests by their
# CTest label, and prints one line per exercise and a total. With --solutions it runs the same
# labels in the solution builds, where every exercise must pass: the check of a machine before
# the room arrives. CTest judges; this script builds, runs and sums up.
set -uo pipefail  # not -e: a stage that fails to build is reported, and the next one runs

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

usage() {
    cat <<'EOF'
usage: tests/workshop_check.sh [options] [EXERCISE | STAGE]...

Runs the tests of each workshop exercise, by its CTest label, and prints one line per exercise:

  stage01.tf32_compute_type      SKIPPED      no GPU (1 test)
  stage02.mixed_precision_adamw  BUILD FAILED mixed_adamw.cuh(25): error: ...; log: ...
  stage03.online_softmax         FAIL         8 of 8 tests fail (Kernels.AttentionForward, ...): not written yet
  stage04.fused_classifier       NOT BUILT    not configured: run cmake --preset stage04-workshop first (or add --configure)
  stage05.mask_padded_columns    PASS         4 tests

then a total. The exercises are the `// EXERCISE BEGIN` markers in stages/. Name some to check
only those: an exercise (stage03.online_softmax) or a stage (3, 03 or stage03: all its exercises).

Each stage is tested in its workshop build, build/stageNN-workshop (preset stageNN-workshop).
There each exercise has a copy of stages/ of its own, workshop/<exercise>/, where you edit it
(the stage's other exercises are solved in that copy), and a test program of its own,
test_<exercise>. The exercise's program is first brought up to date (rebuilt if you changed a
file); a build that is not configured is reported NOT BUILT, unless --configure.

options:
  --solutions    test the solution builds instead (build/stageNN, presets stageNN): every
                 exercise must PASS there. The check of a machine before a workshop.
  --configure    configure and build the presets that are not configured yet (minutes per stage)
  --no-build     test what is built, as it is (no build step)
  --arch A       CUDA architectures for --configure [CMake's choice: this GPU's; without one, 80;90]
  --allow-skip   do not set REQUIRE_GPU=1: on a machine whose GPU cannot run the tests, report
                 SKIPPED instead of FAIL (REQUIRE_GPU=1 is set when nvidia-smi sees a GPU)
  --jobs N       tests run side by side [half the cores, at most 8]
  --exclude RE   leave out the tests whose names match RE (ctest -E): FullSize on a GPU with less
                 memory than Model.FullSizeCurveMatchesPyTorch needs (docs/workshop.md)
  --list         list the exercises (name, file, test regex) and exit
  -v, --verbose  after a failing exercise, show CTest's output of its failing tests
  -h, --help     this text

Logs: build/workshop_check/<preset>.build.log and <exercise>.log (CTest's output).
Exit status: 0 when no exercise failed, failed to build or was not built (with --solutions: when
every one passed); 1 otherwise; 2 on bad usage.
EOF
}

die_usage() { echo "workshop_check.sh: error: $1 (see --help)" >&2; exit 2; }

# --- The exercises: "name file tests-regex" for each EXERCISE BEGIN marker of stages/, by stage,
# then in the order of the files and their lines (a stage's advanced exercise comes later in it).
exercise_list() {
    (cd "$REPO" && grep -rnE '^[[:space:]]*// EXERCISE BEGIN ' stages/) |
        sed -nE 's#^([^:]+):([0-9]+):[[:space:]]*// EXERCISE BEGIN (stage[0-9]{2})(\.[a-z0-9_]+) TESTS (.*)$#\3 \1 \2 \3\4 \1 \5#p' |
        sort -k1,1 -k2,2 -k3,3n | cut -d' ' -f4-
}

SOLUTIONS=0 MODE=update ARCH="" ALLOW_SKIP=0 VERBOSE=0 LIST=0 WANT=() EXCLUDE=""
JOBS=$(($(nproc 2>/dev/null || echo 2) / 2))
((JOBS < 1)) && JOBS=1
((JOBS > 8)) && JOBS=8
while [[ $# -gt 0 ]]; do
    [[ "$1" =~ ^--(arch|jobs|exclude)$ && ( $# -lt 2 || -z "$2" ) ]] && die_usage "option $1 needs a value"
    case "$1" in
        --solutions) SOLUTIONS=1; shift ;;
        --configure) MODE=configure; shift ;;
        --no-build) MODE=none; shift ;;
        --arch) ARCH=$2; shift 2 ;;
        --allow-skip) ALLOW_SKIP=1; shift ;;
        --jobs) JOBS=$2; shift 2 ;;
        --exclude) EXCLUDE=$2; shift 2 ;;
        --list) LIST=1; shift ;;
        -v | --verbose) VERBOSE=1; shift ;;
        -h | --help) usage; exit 0 ;;
        -*) die_usage "unknown option '$1'" ;;
        *) WANT+=("$1"); shift ;;
    esac
done
[[ "$JOBS" =~ ^[1-9][0-9]*$ ]] || die_usage "--jobs: '$JOBS' is not a positive whole number"
[[ -n "$ARCH" && "$MODE" != configure ]] && die_usage "--arch applies to --configure only"

mapfile -t ALL < <(exercise_list)
((${#ALL[@]})) || { echo "workshop_check.sh: no '// EXERCISE BEGIN' marker found in $REPO/stages" >&2; exit 1; }

if ((LIST)); then
    for item in "${ALL[@]}"; do
        read -r name file regex <<<"$item"
        printf '%-30s %s\n%-30s   tests: %s\n' "$name" "$file" "" "$regex"
    done
    exit 0
fi

stage_name() {  # 3, 03, stage3 or stage03 -> stage03; anything else as it is
    if [[ "$1" =~ ^(stage)?([0-9]{1,2})$ ]]; then printf 'stage%02d\n' "$((10#${BASH_REMATCH[2]}))"; else echo "$1"; fi
}

# The exercises asked for, in the order of the list (each once).
SELECTED=()
for item in "${ALL[@]}"; do
    name=${item%% *}
    if ((${#WANT[@]} == 0)); then SELECTED+=("$item"); continue; fi
    for w in "${WANT[@]}"; do
        w=$(stage_name "$w")
        if [[ "$name" == "$w" || "${name%%.*}" == "$w" ]]; then SELECTED+=("$item"); break; fi
    done
done
for w in "${WANT[@]}"; do  # a name that matches nothing is a typo, not "nothing to check"
    w=$(stage_name "$w")
    found=0
    for item in "${ALL[@]}"; do
        name=${item%% *}
        [[ "$name" == "$w" || "${name%%.*}" == "$w" ]] && found=1
    done
    ((found)) || die_usage "'$w' is no exercise and no stage with exercises (--list shows them)"
done

# --- The machine ----------------------------------------------------------------------------

GPU=$(nvidia-smi --query-gpu=name,compute_cap --format=csv,noheader 2>/dev/null | head -n 1 |
    awk -F', *' '{ gsub(/\./, "", $2); print $1 " (sm_" $2 ")" }')
# On a GPU machine a test that skips means the GPU cannot be used: a failure, not a pass.
if [[ -n "$GPU" && $ALLOW_SKIP == 0 ]]; then export REQUIRE_GPU=1; fi
LOGS="$REPO/build/workshop_check"
mkdir -p "$LOGS" || { echo "workshop_check.sh: cannot create $LOGS" >&2; exit 1; }

preset_of() {  # stageNN -> the preset that holds its exercises in this mode
    if ((SOLUTIONS)); then echo "$1"; else echo "$1-workshop"; fi
}

# configure_preset PRESET: makes sure PRESET's build is configured, as MODE says. Sets NOTE to ""
# when it is, else to the status and reason every exercise of the stage is given.
configure_preset() {
    local preset=$1 log="$LOGS/$1.build.log" args
    local dir="$REPO/build/$preset"
    NOTE=""
    : >"$log"
    [[ -f "$dir/CMakeCache.txt" ]] && return
    if [[ "$MODE" != configure ]]; then
        NOTE="NOT BUILT|not configured: run cmake --preset $preset first (or add --configure)"
        return
    fi
    args=(--preset "$preset")
    [[ -n "$ARCH" ]] && args+=("-DCMAKE_CUDA_ARCHITECTURES=$ARCH")
    echo "  configuring $preset (log: ${log#"$REPO"/})"
    if ! (cd "$REPO" && cmake "${args[@]}") >>"$log" 2>&1; then
        NOTE="NOT BUILT|configure failed: ${log#"$REPO"/}"
    fi
}

# build_program PRESET PROGRAM: brings the test program PROGRAM of PRESET's build up to date as
# MODE says (test_stageNN in a solution build; in a workshop build each exercise has its own,
# test_<exercise>). Sets NOTE as configure_preset does.
build_program() {
    local preset=$1 program=$2 log="$LOGS/$1.build.log" error
    local dir="$REPO/build/$preset"
    NOTE=""
    if [[ "$MODE" != none ]]; then
        [[ "$MODE" == configure ]] && echo "  building $program of $preset (log: ${log#"$REPO"/})"
        if ! (cd "$REPO" && cmake --build --preset "$preset" --target "$program") >>"$log" 2>&1; then
            # The compiler's first error, "file(line): error: ...", without the file's directory.
            error=$(grep -m1 -E '(: |^)(fatal )?error' "$log" | sed -E 's#^[^ ]*/##')
            NOTE="BUILD FAILED|${error:+$error; }log: ${log#"$REPO"/}"
            return
        fi
    fi
    [[ -x "$dir/stages/$program" ]] ||
        NOTE="NOT BUILT|no $program: cmake --build --preset $preset --target $program"
}

# check NAME PRESET: runs the tests labelled NAME in PRESET's build; sets STATUS and DETAIL.
check() {
    local name=$1 preset=$2 log="$LOGS/$1.log" results total failed skipped passed names why
    (cd "$REPO" && ctest --preset "$preset" -L "^${name//./\\.}\$" ${EXCLUDE:+-E "$EXCLUDE"} -j "$JOBS" --output-on-failure) >"$log" 2>&1
    # "1/8 Test #3: stage03.Kernels.AttentionForward ......***Failed    1.20 sec"
    # The exercise's own tests only, not a fixture CTest adds (setup_default_corpus).
    results=$(grep -E '^ *[0-9]+/[0-9]+ Test +#[0-9]+: stage[0-9]{2}\.' "$log")
    total=$(grep -c . <<<"$results")
    passed=$(grep -cE ' Passed +[0-9.]+ sec' <<<"$results")
    skipped=$(grep -cE '\*\*\*Skipped' <<<"$results")
    failed=$((total - passed - skipped))
    if ((total == 0)); then
        STATUS=FAIL DETAIL="no test has the label $name${EXCLUDE:+, or --exclude '$EXCLUDE' left none of them} (see ${log#"$REPO"/})"
    elif ((failed > 0)); then
        # "stage03.online_softmax.Kernels.AttentionForward" (workshop) or "stage03.Kernels.AttentionForward"
        names=$(grep -vE ' Passed +[0-9.]+ sec|\*\*\*Skipped' <<<"$results" |
            sed -E 's/.* Test +#[0-9]+: ([^ ]+) .*/\1/' | sed -E "s/^(${name//./\\.}|stage[0-9]{2})\.//" |
            head -n 3 | paste -sd, - | sed 's/,/, /g')
        ((failed > 3)) && names+=", ..."
        STATUS=FAIL DETAIL="$failed of $total tests fail ($names)"
        # Why, when the log says it in a way a reader knows at once.
        why=$(grep -om1 "REQUIRE_GPU=1 but [^:]*" "$log")
        if [[ -n "$why" ]]; then DETAIL+=": ${why#REQUIRE_GPU=1 but }"
        elif grep -qE 'Test +#[0-9]+: setup_default_corpus .*\*\*\*Failed' "$log"; then
            DETAIL+=": the default corpus could not be installed (cmake --build --preset $preset --target data)"
        elif ((!SOLUTIONS)) && grep -q "exercise $name is not written yet" "$log"; then DETAIL+=": not written yet"
        fi
    elif ((skipped == total)); then
        STATUS=SKIPPED DETAIL="$([[ -z "$GPU" ]] && echo "no GPU" || echo "the tests skipped") ($total test$( ((total > 1)) && echo s))"
    elif ((skipped > 0)); then
        STATUS=SKIPPED DETAIL="$skipped of $total tests skipped, $passed pass"
    else
        STATUS=PASS DETAIL="$total test$( ((total > 1)) && echo s)"
    fi
    [[ -n "$EXCLUDE" ]] && DETAIL+=" (left out: the tests matching '$EXCLUDE')"
    return 0
}

# --- Main -----------------------------------------------------------------------------------

WIDTH=0
for item in "${SELECTED[@]}"; do name=${item%% *}; ((${#name} > WIDTH)) && WIDTH=${#name}; done
line() { printf "%-${WIDTH}s  %-12s %s\n" "$1" "$2" "$3"; }

echo "Workshop check ($( ((SOLUTIONS)) && echo "solutions" || echo "exercises")) of $(git -C "$REPO" rev-parse --short HEAD 2>/dev/null || echo '?')" \
    "on ${HOSTNAME:-?}, $(date '+%Y-%m-%d %H:%M'), GPU: ${GPU:-none}${REQUIRE_GPU:+, REQUIRE_GPU=$REQUIRE_GPU}"
# (Not before the preset is configured: its line says that first.)
FIRST=$(preset_of "${SELECTED[0]%%.*}")
if ! compgen -G "$REPO/data/brown/*_train_*.bin" >/dev/null &&
    [[ -f "$REPO/build/$FIRST/CMakeCache.txt" || "$MODE" == configure ]]; then
    echo "  note: no default corpus in data/: the tests that train on it (Model.FullSizeCurveMatchesPyTorch) will fail;"
    echo "        make it once per checkout: cmake --build --preset $FIRST --target data"
fi

declare -A COUNT=()
FAILED=0 DONE_STAGE="" DONE_PROGRAM="" STAGE_NOTE="" PROGRAM_NOTE="" FAILED_LOGS=()
for item in "${SELECTED[@]}"; do
    name=${item%% *}
    stage=${name%%.*} nn=${name:5:2}
    preset=$(preset_of "$stage")
    if [[ "$stage" != "$DONE_STAGE" ]]; then  # the list is sorted: each stage's build once
        configure_preset "$preset"
        STAGE_NOTE=$NOTE DONE_STAGE=$stage DONE_PROGRAM=""
    fi
    NOTE=$STAGE_NOTE
    if [[ -z "$NOTE" ]]; then
        # A solution build has one test program; a workshop build one per exercise.
        program=$( ((SOLUTIONS)) && echo "test_stage$nn" || echo "test_$name")
        if [[ "$program" != "$DONE_PROGRAM" ]]; then
            build_program "$preset" "$program"
            PROGRAM_NOTE=$NOTE DONE_PROGRAM=$program
        fi
        NOTE=$PROGRAM_NOTE
    fi
    if [[ -n "$NOTE" ]]; then
        STATUS=${NOTE%%|*} DETAIL=${NOTE#*|}
    else
        check "$name" "$preset"
    fi
    line "$name" "$STATUS" "$DETAIL"
    COUNT[$STATUS]=$((${COUNT[$STATUS]:-0} + 1))
    # A failure: an exercise that fails, does not build or was not built (nothing was checked);
    # with --solutions, anything but PASS.
    case "$STATUS" in
        PASS) ;;
        FAIL | "BUILD FAILED" | "NOT BUILT") FAILED=$((FAILED + 1)) ;;
        *) ((SOLUTIONS)) && FAILED=$((FAILED + 1)) ;;
    esac
    if [[ "$STATUS" == FAIL ]]; then
        FAILED_LOGS+=("$name")
        if ((VERBOSE)); then
            sed -n '/tests passed, /q; /Output from these tests are in/q; p' "$LOGS/$name.log" |
                grep -vE '^ *(Start +[0-9]+:|[0-9]+/[0-9]+ Test +#.* Passed )' | sed 's/^/    | /'
        fi
    fi
done

total="${#SELECTED[@]} exercise$( ((${#SELECTED[@]} > 1)) && echo s):"
for s in PASS FAIL SKIPPED "NOT BUILT" "BUILD FAILED"; do
    [[ -n "${COUNT[$s]:-}" ]] && total+=" ${COUNT[$s]} $s,"
done
echo "total: ${total%,}"
if ((${#FAILED_LOGS[@]})) && ((!VERBOSE)); then
    echo "why a test failed: build/workshop_check/<exercise>.log, or again with -v;" \
        "one exercise by hand: ctest --preset $(preset_of "${FAILED_LOGS[0]%%.*}") -L ${FAILED_LOGS[0]}"
fi
((FAILED == 0))

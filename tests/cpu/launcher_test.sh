#!/usr/bin/env bash
# The ./train launcher runs the build tree configured last, even when every tree already
# existed (re-configuring a tree need not rewrite its CMakeCache.txt), and GPT_PRESET picks
# another. It runs a copy of the launcher over a scratch project whose trees are made by the
# same CMake code as the real ones (common/cmake/launcher.cmake) and whose trainer only says
# which tree it belongs to.
#   launcher_test.sh REPO SCRATCH_DIR GENERATOR
set -euo pipefail
repo=$1 scratch=$2 generator=$3

rm -rf "$scratch"
mkdir -p "$scratch"
cp "$repo/train" "$scratch/train"
cat > "$scratch/CMakeLists.txt" <<CMAKE
cmake_minimum_required(VERSION 3.25)
project(launcher_test CXX)
get_filename_component(tree "\${CMAKE_BINARY_DIR}" NAME)
file(WRITE "\${CMAKE_BINARY_DIR}/fake_train.cpp"
     "#include <cstdio>\nint main() { std::puts(\"trainer of \${tree}\"); }\n")
add_executable(fake_train "\${CMAKE_BINARY_DIR}/fake_train.cpp")
include("$repo/common/cmake/launcher.cmake")
gpt_launcher_files(fake_train)
CMAKE

configure() { cmake -S "$scratch" -B "$scratch/build/$1" -G "$generator" > "$scratch/configure_$1.log"; }
expect() {  # expect TREE [VAR=VALUE...]: the launcher runs TREE's trainer
  local want=$1 got
  shift
  # --data: the trainer's default corpus is not needed, so the launcher does not install it.
  got=$(env -u GPT_PRESET "$@" "$scratch/train" --data none 2> "$scratch/launcher.err") || {
    cat "$scratch/launcher.err"; echo "FAIL: the launcher failed (expected the trainer of $want)"; exit 1; }
  if [[ $got != "trainer of $want" ]]; then
    echo "FAIL: expected the trainer of $want, got: $got"; exit 1
  fi
  echo "ok: ${*:-no GPT_PRESET}: $got"
}

configure one
configure two
expect two
configure one   # both trees exist: only the configure time can tell
expect one
configure two
expect two
expect one GPT_PRESET=one
configure one
expect one
expect two GPT_PRESET=two

# GPT_PRESET naming a preset that is not configured, or no preset at all: one line that says
# what to run, or which presets exist (the scratch project's CMakePresets.json).
cat > "$scratch/CMakePresets.json" <<'JSON'
{"version": 6, "configurePresets": [
  {"name": "one", "binaryDir": "${sourceDir}/build/one"},
  {"name": "two", "binaryDir": "${sourceDir}/build/two"},
  {"name": "three", "binaryDir": "${sourceDir}/build/three"}]}
JSON
refused() {  # refused PRESET EXPECTED_LINE
  local err
  if env GPT_PRESET="$1" "$scratch/train" --data none > /dev/null 2> "$scratch/launcher.err"; then
    echo "FAIL: GPT_PRESET=$1 ran a trainer"; exit 1
  fi
  err=$(< "$scratch/launcher.err")
  if [[ $err != "$2" ]]; then
    printf 'FAIL: GPT_PRESET=%s printed:\n%s\nexpected:\n%s\n' "$1" "$err" "$2"; exit 1
  fi
  echo "ok: GPT_PRESET=$1 refused: $err"
}
refused three "error: preset 'three' is not configured; run: cmake --preset three"
refused thre "error: there is no preset 'thre'; the presets are: one, two, three (configured: one, two)"

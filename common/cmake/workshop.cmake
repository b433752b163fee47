# Workshop exercises (docs/workshop.md).
#
# An exercise is a marked region of a real solution file:
#
#     // EXERCISE BEGIN <name> TESTS <regex of the test names that check it>
#     ...solution...
#     // EXERCISE STUB <a line of code the stub uses instead>     (optional, repeatable)
#     // EXERCISE END
#
# <name> is stageNN.<snake_case>, NN being the number of the stage directory the file is in.
# A workshop build (GPT_WORKSHOP=ON, the stageNN-workshop presets) compiles, for each exercise
# of its stage, a copy of stages/ in which that one region is replaced by a stub: the marker
# lines stay, the solution lines go, and in their place come a comment saying what to do and
# either the STUB lines or EXERCISE_NOT_WRITTEN("<name>"); (common/cuda/exercise.cuh). The
# stage's other exercises keep their solutions in that copy, so each exercise's tests depend on
# that exercise alone and they can be done in any order. Because the stub is generated from the
# solution every time, the exercise and its solution cannot drift apart.
#
# What this file provides:
#   gpt_exercises(<stage dir> <out var>)        the exercises of a stage, for test labels
#   gpt_workshop_stub_text(...)                 the transformation, on a string
#   gpt_workshop_stub(<input> <output> [stage]) the transformation, file to file
#   gpt_workshop_sync(...)                      copy stages/ with one exercise stubbed, keeping edits
#   gpt_workshop_tree(<stage dir> <exercise> <out var>)  the above, for a build directory
#
# It is also a script, to stub one file without configuring a build (tests/workshop uses it):
#     cmake -DINPUT=<file> -DOUTPUT=<file> [-DSTAGE=<stage dir name>] [-DEXERCISE=<name>] -P common/cmake/workshop.cmake
# STAGE (default: the name of INPUT's directory) chooses the docs chapter the stub points to;
# EXERCISE stubs that exercise alone (default: every exercise of the file).

# The functions below use if(IN_LIST) and friends; say which CMake they are written for, also
# when this file runs as a script (where no cmake_minimum_required came before).
cmake_policy(VERSION 3.25)

# --- Reading a file as a list of lines ----------------------------------------------------
#
# CMake lists are strings separated by ';', and list operations also give a meaning to '\',
# '[' and ']'. C++ is full of all four, so while a file is held as a list of lines, each of
# them stands in as a control character that never appears in source code.

# Swaps the four characters for their stand-ins (to_standins ON) or back (OFF).
function(_gpt_workshop_swap text to_standins out_var)
  foreach(code 1 2 3 4)
    string(ASCII ${code} standin)
    if(code EQUAL 1)
      set(char "\\")
    elseif(code EQUAL 2)
      set(char ";")
    elseif(code EQUAL 3)
      set(char "[")
    else()
      set(char "]")
    endif()
    if(to_standins)
      string(REPLACE "${char}" "${standin}" text "${text}")
    else()
      string(REPLACE "${standin}" "${char}" text "${text}")
    endif()
  endforeach()
  set(${out_var} "${text}" PARENT_SCOPE)
endfunction()

# A text as a list of its lines, each line with its special characters swapped out.
function(_gpt_workshop_split text out_var)
  _gpt_workshop_swap("${text}" ON text)
  string(REPLACE "\n" ";" text "${text}")
  set(${out_var} "${text}" PARENT_SCOPE)
endfunction()

function(_gpt_workshop_unescape line out_var)
  _gpt_workshop_swap("${line}" OFF line)
  set(${out_var} "${line}" PARENT_SCOPE)
endfunction()

# The code of a region without its layout (spaces, tabs, empty lines), to tell whether a stub
# differs from the solution in more than looks.
function(_gpt_workshop_code_only lines out_var)
  set(code "")
  foreach(line IN LISTS lines)
    string(REGEX REPLACE "[ \t\r]+" "" line "${line}")
    if(NOT line STREQUAL "")
      string(APPEND code "${line}\n")
    endif()
  endforeach()
  set(${out_var} "${code}" PARENT_SCOPE)
endfunction()

# --- The transformation --------------------------------------------------------------------

# gpt_workshop_stub_text(<text> <file> <stage dir name> <out text var> <out exercises var> [<only>])
#
# Replaces every exercise region of <text> (the contents of <file>, named in error messages)
# by its stub; with <only>, an exercise name, that region alone, and every other region keeps
# its solution under a line that says whose it is. <out exercises var> receives one
# "name|line|tests regex" item per region (all of them, stubbed or not), the line being the
# BEGIN marker's line in <text>. A malformed marker stops with "<file>:<line>: <what is wrong>".
#
# (The error messages start with a space: CMake then prints them as they are, on one line,
# instead of re-wrapping them at 80 columns, which would split the file name.)
function(gpt_workshop_stub_text text file stage out_text out_exercises)
  set(only "")
  if(ARGC GREATER 5)
    set(only "${ARGV5}")
  endif()
  _gpt_workshop_split("${text}" lines)

  set(result "")        # the stubbed text, built line by line
  set(separator "")     # "\n" once the first line is in
  set(exercises "")
  set(names "")
  set(number 0)         # the line number in <text>
  set(name "")          # the open region's name; "" outside a region

  foreach(encoded IN LISTS lines)
    math(EXPR number "${number} + 1")
    set(where "${file}:${number}")

    # Only a line that *starts* with "// EXERCISE <WORD>" is a marker; prose that mentions
    # the markers elsewhere in a line is left alone. Lines stay escaped while they sit in a
    # list (solution, stub) and are unescaped when they go into the result.
    if(NOT encoded MATCHES "^([ \t]*)// EXERCISE ([A-Z]+)(.*)$")
      if(name STREQUAL "")
        _gpt_workshop_unescape("${encoded}" line)
        string(APPEND result "${separator}${line}")
        set(separator "\n")
      else()
        list(APPEND solution "${encoded}")
        list(APPEND region_lines "L${encoded}")  # L: an empty line is not lost from the list
      endif()
      continue()
    endif()
    set(indent "${CMAKE_MATCH_1}")
    set(word "${CMAKE_MATCH_2}")
    set(rest "${CMAKE_MATCH_3}")
    _gpt_workshop_unescape("${encoded}" line)

    if(word STREQUAL "BEGIN")
      if(NOT name STREQUAL "")
        message(FATAL_ERROR " ${where}: EXERCISE BEGIN inside exercise '${name}' (opened on line ${begin_number}): "
                            "exercises cannot be nested, close the first one with // EXERCISE END")
      endif()
      _gpt_workshop_unescape("${rest}" rest)
      if(NOT rest MATCHES "^[ \t]+([^ \t]+)(.*)$")
        message(FATAL_ERROR " ${where}: EXERCISE BEGIN needs a name and TESTS: "
                            "// EXERCISE BEGIN stageNN.<name> TESTS <regex>")
      endif()
      set(name "${CMAKE_MATCH_1}")
      set(tail "${CMAKE_MATCH_2}")
      if(NOT name MATCHES "^stage([0-9][0-9])\\.[a-z][a-z0-9_]*$")
        message(FATAL_ERROR " ${where}: exercise name '${name}' is not stageNN.<snake_case> "
                            "(for example stage03.flash_forward)")
      endif()
      set(name_stage "${CMAKE_MATCH_1}")
      # The stage number in the name is the one in the test labels and the preset: it must be
      # the number of the directory the exercise lives in.
      if(stage MATCHES "^([0-9][0-9])_" AND NOT name_stage STREQUAL CMAKE_MATCH_1)
        message(FATAL_ERROR " ${where}: exercise '${name}' is in stage ${stage}: "
                            "its name must start with stage${CMAKE_MATCH_1}.")
      endif()
      if(name IN_LIST names)
        message(FATAL_ERROR " ${where}: exercise '${name}' is marked twice in this file")
      endif()
      if(NOT tail MATCHES "^[ \t]+TESTS[ \t]+([^ \t].*)$")
        message(FATAL_ERROR " ${where}: exercise '${name}' has no TESTS: write "
                            "// EXERCISE BEGIN ${name} TESTS <regex of the test names that check it>")
      endif()
      string(STRIP "${CMAKE_MATCH_1}" tests)
      list(APPEND names "${name}")
      list(APPEND exercises "${name}|${number}|${tests}")
      set(begin_line "${line}")
      set(begin_indent "${indent}")
      set(begin_number ${number})
      set(solution "")
      set(stub "")
      set(region_lines "")  # the region as written, for a region left solved

    elseif(word STREQUAL "STUB")
      if(name STREQUAL "")
        message(FATAL_ERROR " ${where}: EXERCISE STUB outside an exercise: it belongs between "
                            "// EXERCISE BEGIN and // EXERCISE END")
      endif()
      if(NOT rest STREQUAL "" AND NOT rest MATCHES "^ ")
        message(FATAL_ERROR " ${where}: write EXERCISE STUB, a space, then the line of code")
      endif()
      # "// EXERCISE STUB x = 0;" becomes "x = 0;" at the marker's indentation.
      string(REGEX REPLACE "^ " "" code "${rest}")
      list(APPEND stub "${indent}${code}")
      list(APPEND region_lines "L${encoded}")

    elseif(word STREQUAL "END")
      if(name STREQUAL "")
        message(FATAL_ERROR " ${where}: EXERCISE END without an EXERCISE BEGIN before it")
      endif()
      if(NOT rest MATCHES "^[ \t\r]*$")
        message(FATAL_ERROR " ${where}: nothing may follow EXERCISE END on its line")
      endif()
      if(stub STREQUAL "")
        # (escaped like the other lines: the ';' would otherwise split it in two)
        _gpt_workshop_split("${begin_indent}EXERCISE_NOT_WRITTEN(\"${name}\");" stub)
      endif()
      _gpt_workshop_code_only("${solution}" solution_code)
      _gpt_workshop_code_only("${stub}" stub_code)
      if(solution_code STREQUAL stub_code)
        message(FATAL_ERROR " ${file}:${begin_number}: exercise '${name}': its STUB lines are the "
                            "solution itself, so the exercise would come already solved")
      endif()
      if(NOT only STREQUAL "" AND NOT name STREQUAL only)
        # Another exercise's region, in the copy of exercise <only>: its solution, as written,
        # so that <only>'s tests need nothing but <only>.
        string(APPEND result "${separator}${begin_line}"
          "\n${begin_indent}// (The solution of ${name}, in place: this copy is for exercise ${only}.)")
        foreach(kept IN LISTS region_lines)
          string(SUBSTRING "${kept}" 1 -1 kept)
          _gpt_workshop_unescape("${kept}" kept)
          string(APPEND result "\n${kept}")
        endforeach()
        string(APPEND result "\n${line}")
        set(separator "\n")
        set(name "")
        continue()
      endif()
      # The stub: the BEGIN marker (so that the exercise is still found in the copy), what to
      # do, the placeholder, the END marker.
      string(APPEND result "${separator}${begin_line}"
        "\n${begin_indent}// Write exercise ${name} here, in place of the placeholder below."
        "\n${begin_indent}// What to write, and hints: docs/${stage}.md#exercise"
        "\n${begin_indent}// Test it: tests/workshop_check.sh ${name}")
      foreach(stub_line IN LISTS stub)
        _gpt_workshop_unescape("${stub_line}" stub_line)
        string(APPEND result "\n${stub_line}")
      endforeach()
      string(APPEND result "\n${line}")
      set(separator "\n")
      set(name "")

    else()
      message(FATAL_ERROR " ${where}: unknown marker '// EXERCISE ${word}' "
                          "(the markers are EXERCISE BEGIN, EXERCISE STUB and EXERCISE END)")
    endif()
  endforeach()

  if(NOT name STREQUAL "")
    message(FATAL_ERROR " ${file}:${begin_number}: exercise '${name}' has no // EXERCISE END")
  endif()
  set(${out_text} "${result}" PARENT_SCOPE)
  set(${out_exercises} "${exercises}" PARENT_SCOPE)
endfunction()

# Writes <content> to <path> only if it differs: an unchanged copy keeps its time stamp, so a
# re-configure does not make Ninja recompile every stage.
function(_gpt_workshop_write path content)
  if(EXISTS "${path}")
    file(READ "${path}" old)
    if(old STREQUAL content)
      return()
    endif()
  endif()
  file(WRITE "${path}" "${content}")
endfunction()

# gpt_workshop_stub(<input> <output> [<stage dir name> [<exercise>]]): stub one file. The stage
# dir name (default: the name of the input's directory) gives the docs chapter and the stage
# number that exercise names must carry; with <exercise>, that exercise alone is stubbed.
function(gpt_workshop_stub input output)
  if(ARGC GREATER 2 AND NOT ARGV2 STREQUAL "")
    set(stage "${ARGV2}")
  else()
    get_filename_component(dir "${input}" ABSOLUTE)
    get_filename_component(dir "${dir}" DIRECTORY)
    get_filename_component(stage "${dir}" NAME)
  endif()
  set(only "")
  if(ARGC GREATER 3)
    set(only "${ARGV3}")
  endif()
  file(READ "${input}" text)
  gpt_workshop_stub_text("${text}" "${input}" "${stage}" stubbed exercises "${only}")
  if(NOT only STREQUAL "" AND NOT exercises MATCHES "(^|;)${only}\\|")
    message(FATAL_ERROR " ${input}: no exercise ${only} is marked in this file")
  endif()
  _gpt_workshop_write("${output}" "${stubbed}")
endfunction()

# --- Which files -----------------------------------------------------------------------------

# The files of a source tree that belong in a copy, relative to <root> and sorted. Left out:
# the build description (CMakeLists.txt, *.in: the build reads them from the sources, so an
# edit in the copy would do nothing) and editor leftovers (dot files, *~).
function(_gpt_workshop_files root out_var)
  file(GLOB_RECURSE files RELATIVE "${root}" "${root}/*")
  list(FILTER files EXCLUDE REGEX "(^|/)CMakeLists\\.txt$|\\.in$|(^|/)\\.|~$")
  list(SORT files)
  set(${out_var} "${files}" PARENT_SCOPE)
endfunction()

# gpt_exercises(<stage dir> <out var>): one "name|tests regex" item per exercise marked in the
# stage directory's sources (the markers are checked as the generator checks them).
function(gpt_exercises stage_dir out_var)
  get_filename_component(stage "${stage_dir}" NAME)
  _gpt_workshop_files("${stage_dir}" files)
  set(found "")
  set(names "")
  foreach(rel IN LISTS files)
    file(READ "${stage_dir}/${rel}" text)
    gpt_workshop_stub_text("${text}" "${stage_dir}/${rel}" "${stage}" stubbed exercises)
    foreach(item IN LISTS exercises)
      string(REGEX MATCH "^([^|]*)\\|([0-9]+)\\|(.*)$" _ "${item}")
      if(CMAKE_MATCH_1 IN_LIST names)
        message(FATAL_ERROR " ${stage_dir}/${rel}:${CMAKE_MATCH_2}: exercise '${CMAKE_MATCH_1}' "
                            "is marked in another file of this stage too")
      endif()
      list(APPEND names "${CMAKE_MATCH_1}")
      list(APPEND found "${CMAKE_MATCH_1}|${CMAKE_MATCH_3}")
    endforeach()
  endforeach()
  set(${out_var} "${found}" PARENT_SCOPE)
endfunction()

# gpt_exercise_item(<item> <name var> <tests var>): the two parts of one gpt_exercises item.
function(gpt_exercise_item item name_var tests_var)
  string(REGEX MATCH "^([^|]*)\\|(.*)$" _ "${item}")
  set(${name_var} "${CMAKE_MATCH_1}" PARENT_SCOPE)
  set(${tests_var} "${CMAKE_MATCH_2}" PARENT_SCOPE)
endfunction()

# --- The participant's copy ------------------------------------------------------------------

# gpt_workshop_sync(SOURCE <stages dir> COPY <dir> PRISTINE <dir> STAGE <stage dir name>
#                   [EXERCISE <name>] [EXERCISES <out var>])
#
# Makes COPY a copy of SOURCE in which the exercises of STAGE are stubbed (with EXERCISE, that
# one alone: the stage's others keep their solutions) and every other file is verbatim.
# Participants edit COPY, so a file there is never overwritten once it exists, with one
# exception: if it is still exactly what was generated last time (PRISTINE keeps that version),
# the participant has not touched it and it is refreshed when the source changes.
#
#   file in COPY                   source changed since?   what happens
#   missing (new, or deleted to    -                       generated
#     reset the exercise)
#   same as PRISTINE (untouched)   yes                     refreshed, with a message
#   edited by the participant      no                      kept
#   edited by the participant      yes                     kept, with a warning at every
#                                                          configure until it is reset
#
# Files the participant added, and files that left SOURCE, are left alone.
# EXERCISES receives one "name|file in COPY" item per exercise stubbed.
function(gpt_workshop_sync)
  cmake_parse_arguments(ARG "" "SOURCE;COPY;PRISTINE;STAGE;EXERCISE;EXERCISES" "" ${ARGN})
  if(NOT DEFINED ARG_EXERCISE)
    set(ARG_EXERCISE "")
  endif()
  if(NOT IS_DIRECTORY "${ARG_SOURCE}/${ARG_STAGE}")
    message(FATAL_ERROR "gpt_workshop_sync: no stage directory ${ARG_SOURCE}/${ARG_STAGE}")
  endif()
  _gpt_workshop_files("${ARG_SOURCE}" files)
  set(all_exercises "")
  foreach(rel IN LISTS files)
    set(source "${ARG_SOURCE}/${rel}")
    set(copy "${ARG_COPY}/${rel}")
    set(pristine "${ARG_PRISTINE}/${rel}")

    # What the copy of this file should be: stubbed in the chosen stage, verbatim elsewhere
    # (the earlier stages are the solutions the chosen stage builds on).
    file(READ "${source}" generated)
    string(FIND "${rel}" "${ARG_STAGE}/" in_stage)
    if(in_stage EQUAL 0)
      gpt_workshop_stub_text("${generated}" "${source}" "${ARG_STAGE}" generated exercises "${ARG_EXERCISE}")
      foreach(item IN LISTS exercises)
        string(REGEX MATCH "^[^|]*" exercise "${item}")
        if(ARG_EXERCISE STREQUAL "" OR exercise STREQUAL ARG_EXERCISE)
          list(APPEND all_exercises "${exercise}|${copy}")
        endif()
      endforeach()
    endif()

    if(NOT EXISTS "${copy}")
      _gpt_workshop_write("${copy}" "${generated}")
      _gpt_workshop_write("${pristine}" "${generated}")
      continue()
    endif()
    file(READ "${copy}" current)
    set(base "")
    if(EXISTS "${pristine}")
      file(READ "${pristine}" base)
    endif()
    if(current STREQUAL generated)
      # Up to date (perhaps the participant wrote exactly this): remember it as the base.
      _gpt_workshop_write("${pristine}" "${generated}")
    elseif(EXISTS "${pristine}" AND current STREQUAL base)
      _gpt_workshop_write("${copy}" "${generated}")
      _gpt_workshop_write("${pristine}" "${generated}")
      message(STATUS "Workshop: refreshed ${copy} (its source changed; you had not edited it)")
    elseif(NOT current STREQUAL base AND NOT generated STREQUAL base)
      # Pristine stays at the version the participant started from, so this repeats until
      # they reset the file: better than a change they never learn about.
      message(WARNING " Workshop: ${source} changed since your copy was made.\n"
                      " You have edited the copy, so it was kept: ${copy}\n"
                      " To take the new version: save your work elsewhere, delete the copy, re-configure.")
    endif()
  endforeach()
  if(NOT ARG_EXERCISE STREQUAL "" AND NOT all_exercises)
    message(FATAL_ERROR "gpt_workshop_sync: stage ${ARG_STAGE} has no exercise ${ARG_EXERCISE}")
  endif()
  if(ARG_EXERCISES)
    set(${ARG_EXERCISES} "${all_exercises}" PARENT_SCOPE)
  endif()
endfunction()

# gpt_workshop_tree(<stage dir name> <exercise> <out var>): the copy of stages/ in which a
# workshop build compiles the tests of <exercise>, <build>/workshop/<exercise>/, with that
# exercise stubbed and the stage's other exercises solved; sets <out var> to its root. Prints
# the file to edit and the command that tests it.
function(gpt_workshop_tree stage exercise out_var)
  set(source "${PROJECT_SOURCE_DIR}/stages")
  set(copy "${CMAKE_BINARY_DIR}/workshop/${exercise}")
  set(pristine "${CMAKE_BINARY_DIR}/workshop/pristine/${exercise}")

  # A workshop build holds one stage: a later stage needs the earlier ones as solutions. The
  # stageNN-workshop presets build one stage each.
  get_property(taken GLOBAL PROPERTY GPT_WORKSHOP_STAGE)
  if(taken AND NOT taken STREQUAL stage)
    message(FATAL_ERROR "A workshop build holds one stage, and this one already holds ${taken}: "
                        "configure it with GPT_STAGES set to one stage (the stageNN-workshop presets do).")
  endif()
  if(NOT taken)
    set_property(GLOBAL PROPERTY GPT_WORKSHOP_STAGE "${stage}")
    # Re-configure when a stage source changes (so that the copies follow the solutions) or when
    # a file is added (CONFIGURE_DEPENDS makes the build check the list of files).
    file(GLOB_RECURSE watched CONFIGURE_DEPENDS "${source}/*")
    set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${watched})
    # Before each exercise had a copy of its own, one copy (workshop/stages) held all of them.
    if(IS_DIRECTORY "${CMAKE_BINARY_DIR}/workshop/stages")
      message(WARNING " Workshop: ${CMAKE_BINARY_DIR}/workshop/stages is a copy made by an earlier version,"
                      " which this build no longer compiles: each exercise now has a copy of its own,"
                      " workshop/<exercise>/ (docs/workshop.md). Move what you wrote there into the new"
                      " copy, then delete the old one.")
    endif()
  endif()

  gpt_workshop_sync(SOURCE "${source}" COPY "${copy}" PRISTINE "${pristine}" STAGE "${stage}"
                    EXERCISE "${exercise}" EXERCISES stubbed)
  list(GET stubbed 0 item)
  string(REGEX MATCH "^([^|]*)\\|(.*)$" _ "${item}")
  message(STATUS "Workshop exercise ${exercise}")
  message(STATUS "  edit: ${CMAKE_MATCH_2}")
  message(STATUS "  read: docs/${stage}.md#exercise")
  message(STATUS "  test: tests/workshop_check.sh ${exercise}   (builds, tests, one line: PASS, FAIL or SKIPPED)")
  set(${out_var} "${copy}" PARENT_SCOPE)
endfunction()

# --- Script mode ---------------------------------------------------------------------------

# Only when this file itself is the script (cmake -P common/cmake/workshop.cmake), not when
# another script includes it for its functions.
if(CMAKE_SCRIPT_MODE_FILE STREQUAL CMAKE_CURRENT_LIST_FILE)
  if(NOT DEFINED INPUT OR NOT DEFINED OUTPUT)
    message(FATAL_ERROR "usage: cmake -DINPUT=<file> -DOUTPUT=<file> [-DSTAGE=<stage dir name>] "
                        "[-DEXERCISE=<the one exercise to stub>] -P ${CMAKE_CURRENT_LIST_FILE}")
  endif()
  if(NOT DEFINED STAGE)
    set(STAGE "")
  endif()
  if(NOT DEFINED EXERCISE)
    set(EXERCISE "")
  endif()
  gpt_workshop_stub("${INPUT}" "${OUTPUT}" "${STAGE}" "${EXERCISE}")
endif()

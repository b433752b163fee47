# Every exercise is independent of the others (DESIGN.md §8): the copy of stages/ its test
# program is built from differs from the solutions in its own region only, so its tests cannot
# need another exercise to be written, in whatever order a participant does them.
#
#   cmake -DWORKSHOP=<workshop.cmake> -DSTAGES=<stages dir> -DWORK=<scratch dir> -P check_independent.cmake
#
# For each exercise X of each stage it makes X's copy as a workshop build does
# (gpt_workshop_sync with EXERCISE X), then checks every file of the copy against its source:
#   - X's region holds the stub, not the solution;
#   - everything else is the source as it is, apart from the one-line note that says whose
#     solution a region is, above each other exercise's region.
# Without this, two exercises of one stage stubbed in one build (as workshop builds once were)
# made each other's tests fail: a participant who wrote one correctly saw FAIL.

cmake_minimum_required(VERSION 3.25)
include(${WORKSHOP})

# _region(<text> <exercise> <begin var> <end var>): the offsets of the text between the line
# that opens <exercise>'s region and its END marker; -1 when the text has no such region.
function(_region text exercise begin_var end_var)
  string(FIND "${text}" "// EXERCISE BEGIN ${exercise} " begin)
  set(end -1)
  if(begin GREATER -1)
    string(SUBSTRING "${text}" ${begin} -1 rest)
    string(FIND "${rest}" "\n" eol)
    string(FIND "${rest}" "// EXERCISE END" close)
    math(EXPR end "${begin} + ${close}")
    math(EXPR begin "${begin} + ${eol} + 1")
  endif()
  set(${begin_var} ${begin} PARENT_SCOPE)
  set(${end_var} ${end} PARENT_SCOPE)
endfunction()

# _without_region(<text> <exercise> <out text> <out region>): the text with the body of
# <exercise>'s region taken out, and that body.
function(_without_region text exercise out_text out_region)
  _region("${text}" ${exercise} begin end)
  set(region "")
  if(begin GREATER -1)
    math(EXPR length "${end} - ${begin}")
    string(SUBSTRING "${text}" ${begin} ${length} region)
    string(SUBSTRING "${text}" 0 ${begin} head)
    string(SUBSTRING "${text}" ${end} -1 tail)
    set(text "${head}<${exercise}'s region>${tail}")
  endif()
  set(${out_text} "${text}" PARENT_SCOPE)
  set(${out_region} "${region}" PARENT_SCOPE)
endfunction()

# _check_copy(<stages dir> <copy> <exercise> <out var>): "" when <copy> differs from <stages dir>
# in <exercise>'s region only, where it holds the stub; else what is wrong.
function(_check_copy stages copy exercise out_var)
  _gpt_workshop_files(${stages} files)
  set(found_stub OFF)
  foreach(rel IN LISTS files)
    file(READ ${stages}/${rel} source)
    file(READ ${copy}/${rel} copied)
    # The notes above the other exercises' regions are the only lines a copy may add.
    string(REGEX REPLACE "\n[ \t]*// \\(The solution of stage[0-9][0-9]\\.[a-z0-9_]+, in place: this copy is for exercise ${exercise}\\.\\)"
           "" copied "${copied}")
    _without_region("${source}" ${exercise} source_rest solution)
    _without_region("${copied}" ${exercise} copied_rest stub)
    if(NOT copied_rest STREQUAL source_rest)
      set(${out_var} "the copy for exercise ${exercise} differs from the solutions outside its region, in ${rel}: "
                     "its tests would depend on more than that exercise (diff ${stages}/${rel} ${copy}/${rel})" PARENT_SCOPE)
      return()
    endif()
    if(NOT solution STREQUAL "")
      if(stub STREQUAL solution)
        set(${out_var} "${rel}: in the copy for ${exercise}, its region still holds the solution" PARENT_SCOPE)
        return()
      endif()
      set(found_stub ON)
    endif()
  endforeach()
  if(NOT found_stub)
    set(${out_var} "the copy for exercise ${exercise} has no region of it" PARENT_SCOPE)
    return()
  endif()
  set(${out_var} "" PARENT_SCOPE)
endfunction()

file(REMOVE_RECURSE ${WORK})

# First, that the check sees the fault it is for: a stage with two exercises in one file,
# copied with both stubbed, as one workshop build per stage did.
set(mini ${WORK}/mini_stages)
file(WRITE ${mini}/00_a/k.cuh "void f() {\n    // EXERCISE BEGIN stage00.one TESTS A\\.One\n    f1();\n    // EXERCISE END\n}\n"
                            "void g() {\n    // EXERCISE BEGIN stage00.two TESTS A\\.Two\n    g1();\n    // EXERCISE END\n}\n")
gpt_workshop_sync(SOURCE ${mini} COPY ${WORK}/mini_both PRISTINE ${WORK}/mini_both_pristine STAGE 00_a)
_check_copy(${mini} ${WORK}/mini_both stage00.one problem)
if(problem STREQUAL "")
  message(FATAL_ERROR "the check passed a copy in which another exercise is stubbed too")
endif()
message(STATUS "ok: a copy with two exercises stubbed fails: ${problem}")
gpt_workshop_sync(SOURCE ${mini} COPY ${WORK}/mini_one PRISTINE ${WORK}/mini_one_pristine STAGE 00_a EXERCISE stage00.one)
_check_copy(${mini} ${WORK}/mini_one stage00.one problem)
if(NOT problem STREQUAL "")
  message(FATAL_ERROR "the check failed a copy with one exercise stubbed: ${problem}")
endif()
message(STATUS "ok: a copy with one exercise stubbed passes")

# Then every exercise of stages/.
file(GLOB stage_dirs LIST_DIRECTORIES true RELATIVE ${STAGES} ${STAGES}/[0-9][0-9]_*)
list(SORT stage_dirs)
set(checked 0)
foreach(stage IN LISTS stage_dirs)
  if(NOT IS_DIRECTORY ${STAGES}/${stage})
    continue()
  endif()
  gpt_exercises(${STAGES}/${stage} exercises)
  foreach(item IN LISTS exercises)
    gpt_exercise_item("${item}" exercise tests)
    set(copy ${WORK}/${exercise})
    gpt_workshop_sync(SOURCE ${STAGES} COPY ${copy} PRISTINE ${WORK}/pristine/${exercise}
                      STAGE ${stage} EXERCISE ${exercise} EXERCISES stubbed)
    list(LENGTH stubbed n_stubbed)
    if(NOT n_stubbed EQUAL 1)
      message(FATAL_ERROR "the copy for ${exercise} stubs ${n_stubbed} exercises: ${stubbed}")
    endif()
    _check_copy(${STAGES} ${copy} ${exercise} problem)
    if(NOT problem STREQUAL "")
      message(FATAL_ERROR "${problem}")
    endif()
    message(STATUS "ok: ${exercise}: its copy differs from the solutions in its own region only")
    math(EXPR checked "${checked} + 1")
  endforeach()
endforeach()
if(checked EQUAL 0)
  message(FATAL_ERROR "no exercise found in ${STAGES}/*/")
endif()
message(STATUS "${checked} exercises, each independent of the others")

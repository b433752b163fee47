# Every exercise marked in the stages is well formed, and its stub is not the solution.
#
#   cmake -DWORKSHOP=<workshop.cmake> -DSTAGES=<stages dir> -P check_stages.cmake
#
# For each file of each stage it runs the generator (a malformed marker stops it with the
# file and line), then checks that
#   - the stubbed file differs from the solution wherever the file has an exercise,
#   - the stubbed file still carries the same exercises (the markers stay in the copy),
#   - no exercise name is used twice across the stages,
# and that there is at least one exercise, so that a scanner that finds nothing fails here.

cmake_minimum_required(VERSION 3.25)
include(${WORKSHOP})

file(GLOB stage_dirs LIST_DIRECTORIES true RELATIVE ${STAGES} ${STAGES}/[0-9][0-9]_*)
list(SORT stage_dirs)
set(all_names "")
foreach(stage IN LISTS stage_dirs)
  if(NOT IS_DIRECTORY ${STAGES}/${stage})
    continue()
  endif()
  # What stages/CMakeLists.txt calls to label the tests (it also rejects a name used twice
  # in one stage).
  gpt_exercises(${STAGES}/${stage} listed)

  _gpt_workshop_files(${STAGES}/${stage} files)
  foreach(rel IN LISTS files)
    set(file ${STAGES}/${stage}/${rel})
    file(READ ${file} solution)
    gpt_workshop_stub_text("${solution}" ${file} ${stage} stubbed exercises)
    if(NOT exercises)
      continue()
    endif()
    if(stubbed STREQUAL solution)
      message(FATAL_ERROR "${file}: has exercises, but its stubbed copy is the same as the solution")
    endif()
    gpt_workshop_stub_text("${stubbed}" "${file} (stubbed)" ${stage} restubbed exercises_in_copy)
    foreach(item IN LISTS exercises)
      string(REGEX MATCH "^([^|]*)\\|([0-9]+)\\|(.*)$" _ "${item}")
      set(name ${CMAKE_MATCH_1})
      set(line ${CMAKE_MATCH_2})
      set(tests "${CMAKE_MATCH_3}")
      if(name IN_LIST all_names)
        message(FATAL_ERROR "${file}:${line}: exercise '${name}' is marked in another stage too")
      endif()
      list(APPEND all_names ${name})
      string(FIND "${exercises_in_copy}" "${name}|" in_copy)
      if(in_copy EQUAL -1)
        message(FATAL_ERROR "${file}:${line}: exercise '${name}' is missing from the stubbed copy")
      endif()
      message(STATUS "ok: ${name} (stages/${stage}/${rel}:${line}), checked by the tests matching '${tests}'")
    endforeach()
  endforeach()
endforeach()

list(LENGTH all_names count)
if(count EQUAL 0)
  message(FATAL_ERROR "no exercise found in ${STAGES}/*/: the markers are '// EXERCISE BEGIN <name> TESTS <regex>'")
endif()
list(LENGTH stage_dirs stages)
message(STATUS "${count} exercises in ${stages} stages, all well formed")

# A workshop build's promise (DESIGN.md §8), for one exercise: with the stub in place, every
# test that checks the exercise fails, cleanly (no crash, no hang), and its output names the
# exercise so that a participant knows what to write.
#
#   cmake -DEXE=<test_<exercise>> -DFILTER=<Suite.Test:...> -DEXERCISE=<name> -P expect_exercise.cmake
#
# Registered by tests/gpu/checks.cmake as workshop.expect.<exercise>. Without a GPU the tests
# skip, and so does this check.

foreach(var EXE FILTER EXERCISE)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "usage: cmake -DEXE=<test executable> -DFILTER=<gtest filter> -DEXERCISE=<name> -P ${CMAKE_CURRENT_LIST_FILE}")
  endif()
endforeach()

execute_process(COMMAND ${EXE} --gtest_filter=${FILTER}
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out TIMEOUT 540)
message("${out}")

string(REPLACE ":" ";" expected "${FILTER}")
list(LENGTH expected n_expected)
string(REGEX MATCHALL "\\[ RUN      \\]" runs "${out}")
string(REGEX MATCHALL "\\[       OK \\] [^\n]*" passed "${out}")
string(REGEX MATCHALL "\\[  SKIPPED \\] [A-Za-z0-9_]+\\.[A-Za-z0-9_]+ \\(" skipped "${out}")
list(LENGTH runs n_run)
list(LENGTH passed n_passed)
list(LENGTH skipped n_skipped)

# One line the GPU check's workshop phase collects, whatever the verdict below.
math(EXPR n_failed "${n_run} - ${n_passed} - ${n_skipped}")
message("exercise ${EXERCISE}: stub: ${n_failed} of ${n_expected} listed tests fail")

if(n_run GREATER 0 AND n_skipped EQUAL n_run)
  message("exercise tests skipped: ${EXERCISE} (no usable GPU)")
  return()
endif()
set(problems "")
# With REQUIRE_GPU=1 and no usable GPU every test fails, for a reason that is not the stub.
if(out MATCHES "REQUIRE_GPU=1 but [^\n]*")
  list(APPEND problems "no usable GPU: ${CMAKE_MATCH_0}")
endif()
if(NOT rc MATCHES "^[0-9]+$")
  list(APPEND problems "the test executable did not exit normally: ${rc}")
elseif(rc EQUAL 0)
  list(APPEND problems "the test executable exited with status 0")
endif()
if(NOT n_run EQUAL n_expected)
  list(APPEND problems "${n_run} of the ${n_expected} tests ran (${FILTER})")
endif()
if(n_passed GREATER 0)
  string(REPLACE ";" ", " passed "${passed}")
  list(APPEND problems "tests pass with the stub, so they do not check the exercise: ${passed}")
endif()
string(FIND "${out}" "${EXERCISE}" named)
if(named EQUAL -1)
  list(APPEND problems "the output never names the exercise")
endif()

if(problems)
  string(REPLACE ";" "\n  " problems "${problems}")
  message(FATAL_ERROR "exercise ${EXERCISE}: the workshop build does not fail as it should:\n  ${problems}")
endif()
message("exercise ${EXERCISE}: all ${n_run} of its tests fail in the workshop build, and the output names it")

# One case of the exercise-stub generator (common/cmake/workshop.cmake), run the way a person
# would run it: as a script, in a child CMake.
#
#   cmake -DWORKSHOP=<workshop.cmake> -DINPUT=<case> -DOUTPUT=<file> -DSTAGE=<stage dir name>
#         [-DEXERCISE=<the one exercise to stub>]
#         -DEXPECTED=<file>                  the output must equal this file, byte for byte
#      or -DERROR_LINE=<n> -DERROR=<text>    it must fail, naming INPUT:<n> and saying <text>,
#                                            and write no output
#         -P stub_case.cmake
#
# An error case checks the exit status *and* the message together (CTest's WILL_FAIL looks
# only at the status, PASS_REGULAR_EXPRESSION only at the output), so that a generator that
# failed for another reason, or printed the message and carried on, does not pass.

file(REMOVE "${OUTPUT}")
set(only "")
if(DEFINED EXERCISE)
  set(only "-DEXERCISE=${EXERCISE}")
endif()
execute_process(
  COMMAND ${CMAKE_COMMAND} -DINPUT=${INPUT} -DOUTPUT=${OUTPUT} -DSTAGE=${STAGE} ${only} -P ${WORKSHOP}
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)

if(DEFINED EXPECTED)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "the generator failed (exit ${rc}):\n${err}")
  endif()
  file(READ "${EXPECTED}" expected)
  file(READ "${OUTPUT}" got)
  if(NOT got STREQUAL expected)
    # Show what differs, with diff when there is one.
    find_program(DIFF diff)
    if(DIFF)
      execute_process(COMMAND ${DIFF} -u ${EXPECTED} ${OUTPUT} OUTPUT_VARIABLE shown)
    else()
      set(shown "--- expected:\n${expected}\n--- got:\n${got}\n")
    endif()
    message(FATAL_ERROR "${OUTPUT} differs from ${EXPECTED}:\n${shown}")
  endif()
  message(STATUS "ok: ${INPUT} -> ${OUTPUT} as expected")
  return()
endif()

set(problems "")
if(rc EQUAL 0)
  list(APPEND problems "the generator succeeded on a malformed file")
endif()
string(FIND "${err}" "${INPUT}:${ERROR_LINE}: " at)
if(at EQUAL -1)
  list(APPEND problems "the message does not name ${INPUT}:${ERROR_LINE}")
endif()
string(FIND "${err}" "${ERROR}" at)
if(at EQUAL -1)
  list(APPEND problems "the message does not say '${ERROR}'")
endif()
if(EXISTS "${OUTPUT}")
  list(APPEND problems "an output was written anyway")
endif()
if(problems)
  list(JOIN problems "; " problems)
  message(FATAL_ERROR "${problems}\n--- exit: ${rc}\n--- stderr:\n${err}")
endif()
message(STATUS "ok: failed as expected, exit ${rc}:\n${err}")

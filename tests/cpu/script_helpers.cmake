# What the CMake script tests (cmake -P) share: include(${CMAKE_CURRENT_LIST_DIR}/script_helpers.cmake).

# gpt_run(NAME COMMAND...): runs the command; if it fails, stops the test with its output.
# Sets stdout_NAME in the caller's scope.
function(gpt_run name)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 300)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${name} failed (${rc}):\n${err}\n${out}")
  endif()
  set(stdout_${name} "${out}" PARENT_SCOPE)
endfunction()

# gpt_log_events(FILE OUT_VAR TYPE...): the events of these types in a trainer's --log file,
# without their timings, which differ from run to run while the rest must not.
function(gpt_log_events file out_var)
  list(JOIN ARGN "|" types)
  file(STRINGS ${file} lines)
  set(kept "")
  foreach(line ${lines})
    if(line MATCHES "\"type\": \"(${types})\"")
      string(REGEX REPLACE ", \"ms\": .*$" "" line "${line}")
      list(APPEND kept "${line}")
    endif()
  endforeach()
  set(${out_var} "${kept}" PARENT_SCOPE)
endfunction()

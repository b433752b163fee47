# tests/workshop_check.sh for an exercise whose workshop preset was never configured: exit status
# 1 and one line that says what to run first. The script runs from a copy beside a stages/ with
# one exercise marker and no build/, so that the checkout's own builds do not matter.
#   cmake -DSCRIPT=<tests/workshop_check.sh> -DWORK=<scratch dir> -P check_unconfigured.cmake
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK}/tests ${WORK}/stages/00_demo)
file(COPY ${SCRIPT} DESTINATION ${WORK}/tests)
file(WRITE ${WORK}/stages/00_demo/demo.cuh
     "// EXERCISE BEGIN stage00.demo TESTS Kernels.Demo\nint demo = 1;\n// EXERCISE END\n")
get_filename_component(name ${SCRIPT} NAME)

execute_process(COMMAND bash ${WORK}/tests/${name} stage00.demo
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
set(shown "exit status ${rc}, output:\n${out}${err}")
if(NOT rc EQUAL 1)
  message(FATAL_ERROR "workshop_check.sh with its preset not configured: exit status 1 expected; ${shown}")
endif()
# The exercise's line names the command; no other line names a build command that cannot work yet.
if(NOT out MATCHES "\nstage00\\.demo +NOT BUILT +not configured: run cmake --preset stage00-workshop first")
  message(FATAL_ERROR "workshop_check.sh with its preset not configured: no line that says to run "
                      "'cmake --preset stage00-workshop' first; ${shown}")
endif()
if(out MATCHES "cmake --build")
  message(FATAL_ERROR "workshop_check.sh with its preset not configured: a build command before the configure; ${shown}")
endif()
message(STATUS "workshop_check.sh, preset not configured: exit status 1, one line to run cmake --preset stage00-workshop first")

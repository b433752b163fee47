# Run by ctest after the tests of a build tree (CTEST_CUSTOM_POST_TEST, written by
# tests/CMakeLists.txt into the tree's CTestCustom.cmake). It reads this run's log and
#   - says how many tests skipped for want of a GPU: CTest counts a skipped test as passed, so
#     "100% tests passed" on a machine without a GPU would otherwise read as a success;
#   - deletes the tests' files (OUT) when every test passed, and says where they are when one
#     failed: a passing run of the CPU suite would leave about 900 MB of checkpoints behind.
#
#   cmake -DLOG=<Testing/Temporary/LastTest.log> -DOUT=<test_outputs> -DWORKSHOP=<ON|OFF> -P after_tests.cmake
#
# It always exits 0: its lines are information; the tests' results are CTest's.

# CTest writes the log of the run in progress under a temporary name and renames it afterwards;
# without the temporary file this is not the end of a test run (ctest -N), and there is nothing to say.
if(NOT EXISTS "${LOG}.tmp")
  return()
endif()
file(READ "${LOG}.tmp" log)

string(REGEX MATCHALL "\n[0-9]+/[0-9]+ Test: " ran "${log}")
list(LENGTH ran ran)
# "Test Failed." (an exit code, a crash, a timeout) or "Test Fail Reason:" (a pass or fail regex)
string(REGEX MATCHALL "\nTest Fail" failed "${log}")
list(LENGTH failed failed)
# The GPU test fixture's skip message (common/testing/gpu_test.cuh), once per skipped test.
string(REGEX MATCHALL "\n[^\n\":]*: GPU test skipped" gpu_skips "${log}")
list(LENGTH gpu_skips gpu_skipped)

if(gpu_skipped GREATER 0)
  list(GET gpu_skips 0 why)
  string(REGEX REPLACE "^\n(.*): GPU test skipped$" "\\1" why "${why}")
  if(ran EQUAL 1)
    set(what "the one test was skipped (${why}): nothing was checked")
  elseif(gpu_skipped EQUAL ran)
    set(what "all ${ran} tests were skipped (${why}): nothing was checked")
  else()
    set(what "${gpu_skipped} of ${ran} tests were skipped (${why}): those checked nothing")
  endif()
  if(WORKSHOP)
    message("note: ${what}; an exercise can only be tested on a GPU (docs/workshop.md).")
  else()
    message("note: ${what}; REQUIRE_GPU=1 makes them fail instead.")
  endif()
endif()

if(failed GREATER 0)
  message("note: the files of the tests are kept in ${OUT}, one folder per test or group; "
          "the output of each test is in ${LOG}")
elseif(ran GREATER 0 AND IS_DIRECTORY "${OUT}")
  # Emptied, not removed: the build created it and some tests expect it.
  file(GLOB leftovers LIST_DIRECTORIES true "${OUT}/*")
  if(leftovers)
    file(REMOVE_RECURSE ${leftovers})
  endif()
endif()
